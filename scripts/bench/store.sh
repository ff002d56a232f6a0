#!/usr/bin/env bash
# Benchmarks packing checkpoints against a base (`brevis pack --base`) and prints a
# markdown table to stdout (progress on stderr).
#
# Data: scripts/corpus/finetune.py fine-tunes the corpus's minilm-f32 for 300 AdamW steps on
# CPU, keeping checkpoints at steps 100, 200 and 300 in F32 and BF16 (cached under
# target/store-bench/ft; needs torch and transformers, installed into the bench venv
# target/bench-venv). Pairs: the step-300 fine-tune against the base model, and the
# step-200 checkpoint against step 100, each in F32 and BF16.
#
# For each pair: the original's size, its archive alone, its archive against the base,
# their ratios, and the order-0 references of scripts/studies/xor_entropy.py (byte planes of the
# XOR with the base, and of the difference from the base's values); pack -j1 MB/s alone and against the base; unpack -j1 MB/s of the
# archive against the base; and the read MB/s of the fine-tune through a fresh
# brevis-mount of the store (needs root and /dev/fuse), as scripts/bench.sh reads:
# cold = the store's archives in the page cache, disk = all caches dropped; 128 KiB
# reads timed inside the reader (bench_read.py). Speeds are MB (1e6 bytes) of the
# original per second of wall time, medians of BENCH_RUNS runs.
#
# Then the base model saved again as two shard files (packed alone, with --base, with
# --dedup), and a store mirrored with rsync: what adding fine-tunes, and changing one
# tensor of a model, send.
#
# Env: BENCH_RUNS=3, BENCH_VENV=target/bench-venv, BREVIS_CORPUS=~/.cache/brevis-corpus
set -euo pipefail

scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
repo=$(cd "$scripts/.." && pwd)
runs=${BENCH_RUNS:-3}
venv=${BENCH_VENV:-$repo/target/bench-venv}
corpus=${BREVIS_CORPUS:-$HOME/.cache/brevis-corpus}
work=$repo/target/store-bench
log() { printf 'bench_store: %s\n' "$*" >&2; }

cargo build --release --manifest-path "$repo/Cargo.toml" -q
brevis=$repo/target/release/brevis
mount_bin=$repo/target/release/brevis-mount
base_f32=$corpus/minilm-f32/model.safetensors
[[ -f $base_f32 ]] || "$scripts/fetch-corpus.sh" minilm-f32 >&2

if [[ ! -x $venv/bin/python ]]; then
  log "making $venv"
  python3 -m venv "$venv" >&2
fi
py=$venv/bin/python
if ! "$py" -c "import torch, transformers, safetensors, numpy" 2>/dev/null; then
  log "installing torch transformers safetensors numpy into $venv"
  "$py" -m pip install -q torch transformers safetensors numpy >&2
fi
ft=$work/ft
if [[ ! -f $ft/step300-bf16/model.safetensors ]]; then
  log "fine-tuning minilm-f32 for 300 steps (a few minutes on two cores)"
  "$py" "$scripts/corpus/finetune.py" "$corpus/minilm-f32" "$ft" >&2
fi

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# seconds CMD...: wall seconds of one run
seconds() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | "$py" -c "print(eval(input()))"; }
# read_secs FILE: seconds to read FILE in 128 KiB reads, timed inside the reader
read_secs() { "$py" "$scripts/bench/read.py" "$1" | cut -d' ' -f1; }
mbps() { "$py" -c "print(f'{$1 / $2 / 1e6:.0f}')"; }
ratio() { "$py" -c "print(f'{$1 / $2:.3f}')"; }
size() { stat -c%s "$1"; }

store=$work/store
rm -rf "$store" && mkdir -p "$store"
cp "$base_f32" "$ft/base-f32.safetensors"
mkdir -p "$ft/base-f32" && mv "$ft/base-f32.safetensors" "$ft/base-f32/model.safetensors"

echo "| file | against | original | alone | against the base | ratio alone | ratio against the base | XOR order-0 | difference order-0 | pack -j1 MB/s alone | pack -j1 MB/s against the base | unpack -j1 MB/s | cold read through the mount MB/s | disk read through the mount MB/s |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for pair in "step300-f32 base-f32" "step300-bf16 base-bf16" "step200-f32 step100-f32" "step200-bf16 step100-bf16"; do
  set -- $pair
  src=$ft/$1/model.safetensors
  base_src=$ft/$2/model.safetensors
  [[ -f $store/$2.brv ]] || "$brevis" pack -q "$base_src" "$store/$2.brv"
  alone=$work/$1.alone.brv
  delta=$store/$1-on-$2.brv
  pa=() pb=() un=() cold=() disk=()
  for _ in $(seq "$runs"); do
    pa+=("$(seconds "$brevis" pack -q -j1 --force "$src" "$alone")")
    pb+=("$(seconds "$brevis" pack -q -j1 --force --base "$store/$2.brv" "$src" "$delta")")
    un+=("$(seconds "$brevis" unpack -q -j1 --force "$delta" "$work/out.safetensors")")
  done
  cmp "$work/out.safetensors" "$src" || { log "round trip differs: $1"; exit 1; }
  if [[ $(id -u) -eq 0 && -e /dev/fuse ]]; then
    mkdir -p "$work/mnt"
    shown=$work/mnt/$1-on-$2.safetensors
    for _ in $(seq "$runs"); do
      cat "$store"/*.brv >/dev/null
      "$mount_bin" "$store" "$work/mnt"
      cold+=("$(read_secs "$shown")")
      umount "$work/mnt"
      "$mount_bin" "$store" "$work/mnt"
      sync && echo 3 >/proc/sys/vm/drop_caches
      disk+=("$(read_secs "$shown")")
      cmp "$shown" "$src" || { umount "$work/mnt"; log "mount differs: $1"; exit 1; }
      umount "$work/mnt"
    done
    read_mbps="$(mbps "$(size "$src")" "$(printf '%s\n' "${cold[@]}" | median)") | $(mbps "$(size "$src")" "$(printf '%s\n' "${disk[@]}" | median)")"
  else
    read_mbps="(needs root and /dev/fuse) | (needs root and /dev/fuse)"
  fi
  n=$(size "$src")
  xor0=$("$py" "$scripts/studies/xor_entropy.py" "$src" "$base_src")
  diff0=$("$py" "$scripts/studies/xor_entropy.py" "$src" "$base_src" --difference)
  echo "| $1 | $2 | $n | $(size "$alone") | $(size "$delta") | $(ratio "$n" "$(size "$alone")") | $(ratio "$n" "$(size "$delta")") | $xor0 ($(ratio "$n" "$xor0")) | $diff0 ($(ratio "$n" "$diff0")) | $(mbps "$n" "$(printf '%s\n' "${pa[@]}" | median)") | $(mbps "$n" "$(printf '%s\n' "${pb[@]}" | median)") | $(mbps "$n" "$(printf '%s\n' "${un[@]}" | median)") | $read_mbps |"
done

# The base model saved again in two shard files (tensors split in half by order), as
# a re-upload or a re-sharded save is: packed alone, against the base archive (tensors
# matched by name), and with --dedup=STORE into the store (matched by content, no --base).
reshard=$work/resharded-f32
if [[ ! -f $reshard/model-2.safetensors ]]; then
  mkdir -p "$reshard"
  "$py" - "$base_f32" "$reshard" <<'PY'
import sys
from safetensors.numpy import load_file, save_file
tensors = load_file(sys.argv[1])
names = list(tensors)
half = len(names) // 2
for k, part in enumerate((names[:half], names[half:]), 1):
    save_file({n: tensors[n] for n in part}, f"{sys.argv[2]}/model-{k}.safetensors")
PY
fi
sum_sizes() { find "$1" -name "*.$2" -printf '%s\n' | awk '{s += $1} END {print s}'; }
n=$(sum_sizes "$reshard" safetensors)
rm -rf "$work/reshard-alone" "$work/reshard-base" "$store/resharded"
"$brevis" pack -q "$reshard" "$work/reshard-alone"
"$brevis" pack -q --base "$store/base-f32.brv" "$reshard" "$work/reshard-base"
"$brevis" pack -q --dedup="$store" "$reshard" "$store/resharded"
"$brevis" unpack -q "$store/resharded" "$work/reshard-out"
diff -r "$work/reshard-out" "$reshard" >/dev/null || { log "resharded round trip differs"; exit 1; }
rm -rf "$work/reshard-out"
echo
echo "| copy | original | alone | against the base (--base) | in the store (--dedup) |"
echo "|---|---:|---:|---:|---:|"
alone=$(sum_sizes "$work/reshard-alone" brv)
based=$(sum_sizes "$work/reshard-base" brv)
deduped=$(sum_sizes "$store/resharded" brv)
echo "| base-f32 saved again as two shard files | $n | $alone ($(ratio "$n" "$alone")x) | $based ($(ratio "$n" "$based")x) | $deduped ($(ratio "$n" "$deduped")x) |"

# A store mirrored with rsync. The bases, and a copy of base-f32 that nothing depends
# on, are packed and mirrored; then the bases are packed again (archives are
# deterministic and keep their source's time) and the step-300 fine-tunes are packed
# against them, and the store is mirrored again with --checksum (whole files compared
# by content, not by size and time). Then base-f32 with one tensor scaled by 1.01 is
# packed over the copy's archive and mirrored with --no-whole-file, as rsync does over
# a network: only the changed records travel.
if ! command -v rsync >/dev/null; then
  command -v apt-get >/dev/null && { apt-get update -qq && apt-get install -y -qq rsync; } >&2 \
    || log "rsync missing: its table is left out"
fi
if command -v rsync >/dev/null; then
  src_store=$work/rsync-store mirror=$work/rsync-mirror
  rm -rf "$src_store" "$mirror" && mkdir -p "$src_store"
  for b in base-bf16 base-f32; do "$brevis" pack -q "$ft/$b/model.safetensors" "$src_store/$b.brv"; done
  cp -p "$src_store/base-f32.brv" "$src_store/copy-f32.brv"
  rsync -a "$src_store/" "$mirror/"
  for b in base-bf16 base-f32; do "$brevis" pack -q --force "$ft/$b/model.safetensors" "$src_store/$b.brv"; done
  for d in bf16 f32; do
    "$brevis" pack -q --base "$src_store/base-$d.brv" "$ft/step300-$d/model.safetensors" "$src_store/step300-$d.brv"
  done
  # sent STATS: bytes rsync sent, and the literal (unmatched) data among them.
  sent() { tr -d , <<<"$1" | awk '/Total bytes sent/ {s = $4} /Literal data/ {l = $3} END {print s " | " l}'; }
  added=$(( $(size "$src_store/step300-bf16.brv") + $(size "$src_store/step300-f32.brv") ))
  echo
  echo "| change to the mirrored store | bytes of new or changed archives | rsync: bytes sent | rsync: literal data |"
  echo "|---|---:|---:|---:|"
  echo "| step-300 fine-tunes (BF16, F32) added against their bases, bases packed again | $added | $(sent "$(rsync -a --checksum --stats "$src_store/" "$mirror/")") |"
  changed=$work/changed-f32
  mkdir -p "$changed"
  "$py" - "$ft/base-f32/model.safetensors" "$changed/model.safetensors" <<'PY'
import sys
from safetensors.numpy import load_file, save_file
tensors = load_file(sys.argv[1])
name = "encoder.layer.5.output.dense.weight"
tensors[name] = tensors[name] * 1.01
save_file(tensors, sys.argv[2])
PY
  "$brevis" pack -q --force "$changed/model.safetensors" "$src_store/copy-f32.brv"
  echo "| base-f32 with one 384x1536 tensor scaled by 1.01, packed over a copy of its archive (--no-whole-file) | $(size "$src_store/copy-f32.brv") | $(sent "$(rsync -a --no-whole-file --stats "$src_store/" "$mirror/")") |"
  diff -r "$src_store" "$mirror" >/dev/null || { log "mirror differs"; exit 1; }
fi
