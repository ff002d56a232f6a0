#!/usr/bin/env bash
# Loading, packing and unpacking at the size people load: a 7.3 GB BF16
# checkpoint of Llama-3-8B's shapes with a transformers config.json
# (scripts/corpus/model_checkpoint.py, made once under the work folder),
# measured in one run, the ways alternating within each round, each cold
# (page cache dropped first), cached (what it reads already in the page cache)
# and slow (cold, the job and the mount server in a cgroup whose disk reads
# are limited to BENCH_SLOW_BPS, as a network disk is). Prints a markdown
# table of medians: wall seconds, CPU seconds (user + system) and peak RSS,
# then what the mount decoded for what it was asked. "load s" is the loader's own
# time to every tensor in memory (scripts/bench/model_load.py's clock: without
# Python's start-up and imports, or mounting), where "wall s" is the whole command's.
#
#   raw safetensors.torch   safetensors.torch.load_file of the original, every page touched
#   mount safetensors.torch the same through a fresh brevis-mount of the archive
#   raw/mount transformers  AutoModelForCausalLM.from_pretrained of the folder, in BF16
#   mount dd                dd bs=4M of the file the mount presents
#   brevis.torch            brevis.torch.load_file of the archive (no FUSE)
#   unpack, verify          brevis unpack -j2 / verify -j2
#   pack -j1, pack -j2      once per round, from the cached original
#
# (numpy rows are left out: numpy has no BF16.) Needs root (drop_caches, the
# mount, the cgroup), /dev/fuse, cgroup v1 blkio, and a venv with torch,
# transformers, safetensors and this tree's Python package (scripts/bench.sh
# makes target/bench-venv; this script builds the package into it).
#
# Env:
#   BENCH_RUNS=3           rounds (medians reported)
#   BENCH_MODEL_DIR=dir    work folder (default target/bench-model; needs ~25 GB)
#   BENCH_VENV=dir         venv with torch (default target/bench-venv)
#   BENCH_BUILD=1          0: use target/release/{brevis,brevis-mount} as they are
#   BENCH_SLOW_BPS=500000000  the slow state's read limit, bytes/s (0: no slow state)
#   BENCH_PACK=1           0: leave out the pack rows
set -euo pipefail
scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
repo=$(cd "$scripts/.." && pwd)
runs=${BENCH_RUNS:-3}
work=${BENCH_MODEL_DIR:-$repo/target/bench-model}
venv=${BENCH_VENV:-$repo/target/bench-venv}
slow_bps=${BENCH_SLOW_BPS:-500000000}
py=$venv/bin/python
log() { printf 'bench_model: %s\n' "$*" >&2; }
die() { printf 'bench_model: ERROR: %s\n' "$*" >&2; exit 1; }

brevis=$repo/target/release/brevis
mount_bin=$repo/target/release/brevis-mount
raw=$work/raw
model=$raw/model.safetensors
archives=$work/archives
brv=$archives/model.brv
mnt=$work/mnt
cgroup=/sys/fs/cgroup/blkio/brevis-bench-model

# `model.sh through-mount CMD...`: CMD run with the archives mounted at $mnt
# (a fresh mount), for timing as one command; the mount's counters are
# appended to $work/mount-stats.
if [[ ${1:-} == through-mount ]]; then
  shift
  "$mount_bin" "$archives" "$mnt"
  status=0
  "$@" || status=$?
  "$py" -c "import os, sys; print(os.getxattr(sys.argv[1], 'user.brevis.stats').decode())" \
    "$mnt" >>"$work/mount-stats" || true
  umount "$mnt"
  exit $status
fi
# `model.sh slow CMD...`: CMD run in the cgroup whose disk reads are limited.
if [[ ${1:-} == slow ]]; then
  shift
  echo $$ >"$cgroup/cgroup.procs"
  exec "$@"
fi

[[ $(id -u) == 0 ]] || die "needs root (drop_caches, the mount and the cgroup)"
[[ -e /dev/fuse ]] || die "/dev/fuse is missing"
[[ -x /usr/bin/time ]] || die "/usr/bin/time is missing (apt install time)"
"$py" -c "import torch, safetensors, transformers" 2>/dev/null ||
  die "$py lacks torch, safetensors or transformers (run scripts/bench.sh once)"
if [[ ${BENCH_BUILD:-1} != 0 ]]; then
  log "cargo build --release; the Python package into $venv"
  "$scripts/bench/install_brevis.sh" "$py"
fi

mkdir -p "$raw" "$archives" "$mnt"
[[ -f $model ]] || { log "making $model"; "$py" "$scripts/corpus/model_checkpoint.py" --config "$model" >&2; }
[[ -f $brv ]] || { log "packing $brv"; "$brevis" pack -q "$model" "$brv"; }
cp "$raw/config.json" "$archives/config.json"
mountpoint -q "$mnt" && umount "$mnt"
states=(cold cached)
if [[ $slow_bps != 0 ]]; then
  [[ -d /sys/fs/cgroup/blkio ]] || die "no cgroup v1 blkio here: set BENCH_SLOW_BPS=0"
  device=$(findmnt -no MAJ:MIN -T "$work" | head -1)
  # A partition's limit goes on its whole disk.
  disk=$(basename "$(readlink -f "/sys/dev/block/$device/..")")
  if [[ -n $disk && -e /sys/block/$disk/dev ]]; then device=$(cat "/sys/block/$disk/dev"); fi
  mkdir -p "$cgroup"
  echo "$device $slow_bps" >"$cgroup/blkio.throttle.read_bps_device"
  states+=(slow)
fi

cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
warm() { cat "$@" >/dev/null; }
declare -A results=()
# measure NAME CMD...: appends "wall cpu rss_mb load" of CMD to results[NAME]
# (load: the first field of a loader's line, "-" for other commands).
measure() {
  local name=$1; shift
  local printed wall user sys rss load_s
  printed=$(/usr/bin/time -f '%e %U %S %M' -o "$work/time" "$@") || die "$name failed: $(cat "$work/time")"
  read -r wall user sys rss < <(tail -1 "$work/time")
  load_s=$(awk 'NF == 4 { print $1 }' <<<"$printed")
  results[$name]+="$wall $(echo "$user + $sys" | bc) $((rss / 1024)) ${load_s:--};"
}
load="$scripts/bench/model_load.py"
# The mount server runs in the background: its CPU and memory are not the
# command's, so those rows show the loader's alone (wall time is the whole).
: >"$work/mount-stats"
slow_rate=()

for round in $(seq "$runs"); do
  log "round $round of $runs"
  for state in "${states[@]}"; do
    prep() { if [[ $state == cached ]]; then warm "$@"; else cold; fi; }
    run=()
    [[ $state == slow ]] && run=("$0" slow)
    prep "$model"; measure "raw safetensors.torch ($state)" "${run[@]}" "$py" "$load" safetensors-torch "$model"
    prep "$brv"; measure "mount safetensors.torch ($state)" "${run[@]}" "$0" through-mount "$py" "$load" safetensors-torch "$mnt/model.safetensors"
    prep "$brv"; measure "brevis.torch ($state)" "${run[@]}" "$py" "$load" brevis-torch "$brv"
    prep "$model"; measure "raw transformers ($state)" "${run[@]}" "$py" "$load" transformers "$raw"
    prep "$brv"; measure "mount transformers ($state)" "${run[@]}" "$0" through-mount "$py" "$load" transformers "$mnt"
    if [[ $state == slow ]]; then
      cold
      slow_rate+=("$("$0" slow dd if="$model" of=/dev/null bs=4M count=1000 2>&1 | awk '/copied/ { print $(NF-1), $NF }')")
      continue
    fi
    prep "$brv"; measure "mount dd ($state)" "$0" through-mount dd if="$mnt/model.safetensors" of=/dev/null bs=4M status=none
    prep "$brv"; measure "unpack -j2 ($state)" "$brevis" unpack -q -j2 --force "$brv" "$work/out.safetensors"
    rm -f "$work/out.safetensors"
    prep "$brv"; measure "verify -j2 ($state)" "$brevis" verify -q -j2 "$brv"
  done
  [[ ${BENCH_PACK:-1} == 0 ]] && continue
  warm "$model"
  for j in 1 2; do
    measure "pack -j$j (cached)" "$brevis" pack -q -j$j --force "$model" "$work/repacked.brv"
  done
  rm -f "$work/repacked.brv"
done

# median K: the median of field K of the ";"-separated entries on stdin ("" if none is a number)
median() { tr ';' '\n' | awk -v k="$1" 'NF && $k != "-" { print $k }' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
echo "| job | wall s | load s | CPU s | peak RSS MB |"
echo "| --- | ---: | ---: | ---: | ---: |"
for state in "${states[@]}"; do
  for job in "raw safetensors.torch" "mount safetensors.torch" "brevis.torch" "raw transformers" \
    "mount transformers" "mount dd" "unpack -j2" "verify -j2"; do
    r=${results["$job ($state)"]:-}
    [[ -n $r ]] && echo "| $job ($state) | $(median 1 <<<"$r") | $(median 4 <<<"$r") | $(median 2 <<<"$r") | $(median 3 <<<"$r") |"
  done
done
for j in 1 2; do
  r=${results["pack -j$j (cached)"]:-}
  [[ -n $r ]] && echo "| pack -j$j (cached) | $(median 1 <<<"$r") | | $(median 2 <<<"$r") | $(median 3 <<<"$r") |"
done
echo
echo "model.safetensors: $(stat -c %s "$model") bytes; archive $(stat -c %s "$brv") bytes; $runs round(s)."
[[ ${#slow_rate[@]} -gt 0 ]] && echo "slow state: limit $slow_bps B/s; dd of the original in it: ${slow_rate[*]}."
# Decoded against asked, per mounted job (the counters of each fresh mount).
"$py" - "$work/mount-stats" <<'PY'
import json, sys
ratios = sorted(s["decoded_bytes"] / max(1, s["read_bytes"])
                for s in map(json.loads, open(sys.argv[1])) if s["read_bytes"])
if ratios:
    print(f"the mount decoded {ratios[0]:.3f}-{ratios[-1]:.3f}x the bytes it was asked for "
          f"({len(ratios)} fresh mounts)")
PY
