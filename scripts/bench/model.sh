#!/usr/bin/env bash
# Loading, packing and unpacking at the size people load: a 7.3 GB BF16
# checkpoint of Llama-3-8B's shapes (scripts/corpus/model_checkpoint.py, made
# once under the work folder), measured in one run, the ways alternating
# within each round, each cold (page cache dropped first) and cached (what
# it reads already in the page cache). Prints a markdown table of medians:
# wall seconds, CPU seconds (user + system) and peak RSS.
#
#   raw safetensors.torch   safetensors.torch.load_file of the original, every page touched
#   mount safetensors.torch the same through a fresh brevis-mount of the archive
#   mount dd                dd bs=4M of the file the mount presents
#   brevis.torch            brevis.torch.load_file of the archive (no FUSE)
#   unpack, verify          brevis unpack -j2 / verify -j2
#   pack -j1, pack -j2      once per round, from the cached original
#
# Needs root (drop_caches, the mount), /dev/fuse, and a venv with torch,
# safetensors and this tree's Python package (scripts/bench.sh makes
# target/bench-venv; this script builds the package into it).
#
# Env:
#   BENCH_RUNS=3           rounds (medians reported)
#   BENCH_MODEL_DIR=dir    work folder (default target/bench-model; needs ~25 GB)
#   BENCH_VENV=dir         venv with torch (default target/bench-venv)
#   BENCH_BUILD=1          0: use target/release/{brevis,brevis-mount} as they are
set -euo pipefail
scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
repo=$(cd "$scripts/.." && pwd)
runs=${BENCH_RUNS:-3}
work=${BENCH_MODEL_DIR:-$repo/target/bench-model}
venv=${BENCH_VENV:-$repo/target/bench-venv}
py=$venv/bin/python
log() { printf 'bench_model: %s\n' "$*" >&2; }
die() { printf 'bench_model: ERROR: %s\n' "$*" >&2; exit 1; }

brevis=$repo/target/release/brevis
mount_bin=$repo/target/release/brevis-mount
model=$work/llama.safetensors
brv=$work/archives/llama.brv

# `bench_model.sh through-mount CMD...`: CMD run with the archives mounted
# at $work/mnt (a fresh mount), for timing as one command.
if [[ ${1:-} == through-mount ]]; then
  shift
  "$mount_bin" "$work/archives" "$work/mnt"
  status=0
  "$@" || status=$?
  umount "$work/mnt"
  exit $status
fi

[[ $(id -u) == 0 ]] || die "needs root (drop_caches and the mount)"
[[ -e /dev/fuse ]] || die "/dev/fuse is missing"
[[ -x /usr/bin/time ]] || die "/usr/bin/time is missing (apt install time)"
"$py" -c "import torch, safetensors" 2>/dev/null || die "$py lacks torch or safetensors (run scripts/bench.sh once)"
if [[ ${BENCH_BUILD:-1} != 0 ]]; then
  log "cargo build --release; the Python package into $venv"
  "$scripts/bench/install_brevis.sh" "$py"
fi

mkdir -p "$work/archives" "$work/mnt"
[[ -f $model ]] || { log "making $model"; "$py" "$scripts/corpus/model_checkpoint.py" "$model" >&2; }
[[ -f $brv ]] || { log "packing $brv"; "$brevis" pack -q "$model" "$brv"; }
mountpoint -q "$work/mnt" && umount "$work/mnt"

cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
warm() { cat "$@" >/dev/null; }
declare -A results=()
# measure NAME CMD...: appends "wall cpu rss_mb" of CMD to results[NAME].
measure() {
  local name=$1; shift
  local out
  out=$(/usr/bin/time -f '%e %U %S %M' "$@" 2>&1 >/dev/null | tail -1) || die "$name failed: $out"
  read -r wall user sys rss <<<"$out"
  results[$name]+="$wall $(echo "$user + $sys" | bc) $((rss / 1024));"
}
presented=$work/mnt/llama.safetensors
# The mount server runs in the background: its CPU and memory are not the
# command's, so those rows show the loader's alone (wall time is the whole).

for round in $(seq "$runs"); do
  log "round $round of $runs"
  for state in cold cached; do
    prep() { if [[ $state == cold ]]; then cold; else warm "$@"; fi; }
    prep "$model"; measure "raw safetensors.torch ($state)" "$py" "$scripts/bench/model_load.py" safetensors-torch "$model"
    prep "$brv"; measure "mount safetensors.torch ($state)" "$0" through-mount "$py" "$scripts/bench/model_load.py" safetensors-torch "$presented"
    prep "$brv"; measure "mount dd ($state)" "$0" through-mount dd if="$presented" of=/dev/null bs=4M status=none
    prep "$brv"; measure "brevis.torch ($state)" "$py" "$scripts/bench/model_load.py" brevis-torch "$brv"
    prep "$brv"; measure "unpack -j2 ($state)" "$brevis" unpack -q -j2 --force "$brv" "$work/out.safetensors"
    rm -f "$work/out.safetensors"
    prep "$brv"; measure "verify -j2 ($state)" "$brevis" verify -q -j2 "$brv"
  done
  warm "$model"
  for j in 1 2; do
    measure "pack -j$j (cached)" "$brevis" pack -q -j$j --force "$model" "$work/repacked.brv"
  done
  rm -f "$work/repacked.brv"
done

median() { tr ';' '\n' | awk -v k="$1" 'NF { print $k }' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
echo "| job | wall s | CPU s | peak RSS MB |"
echo "| --- | ---: | ---: | ---: |"
for name in "raw safetensors.torch (cold)" "mount safetensors.torch (cold)" "brevis.torch (cold)" \
  "mount dd (cold)" "unpack -j2 (cold)" "verify -j2 (cold)" \
  "raw safetensors.torch (cached)" "mount safetensors.torch (cached)" "brevis.torch (cached)" \
  "mount dd (cached)" "unpack -j2 (cached)" "verify -j2 (cached)" "pack -j1 (cached)" "pack -j2 (cached)"; do
  r=${results[$name]}
  echo "| $name | $(median 1 <<<"$r") | $(median 2 <<<"$r") | $(median 3 <<<"$r") |"
done
echo
echo "$(basename "$model"): $(stat -c %s "$model") bytes; archive $(stat -c %s "$brv") bytes; $runs round(s)."
