#!/usr/bin/env bash
# Reads checkpoints through `brevis-mount s3://...` from an S3 endpoint on
# loopback that is not the bottleneck (examples/s3_files.rs, sendfile from a
# folder), every read cold (`drop_caches` first): per file, the archive's
# size, one plain GET of the whole archive (curl) for scale, a read of the
# whole file from a fresh mount (MB/s of the original; the bytes it fetched
# and its requests), what opening the archive and one 4 KiB read fetch, and
# the disk cache: a fresh mount filling an empty `--disk-cache`, then a
# fresh mount reading from it (MB/s, bytes still fetched, bytes from the
# disk, its files). Every read is compared with the original (cmp). Needs
# root (mount, drop_caches) and /dev/fuse.
#
#   scripts/bench/s3.sh [FILE.safetensors ...]   # default: minilm-bf16 and minilm-f32
# BENCH_RUNS (default 3) rounds per file; the table gives medians.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${BENCH_RUNS:-3}
corpus=$(scripts/fetch-corpus.sh)
if [ $# -eq 0 ]; then
  set -- "$corpus/minilm-bf16/model.safetensors" "$corpus/minilm-f32/model.safetensors"
fi
cargo build --release --quiet --bins --examples
work=$(mktemp -d /tmp/brevis-s3.XXXXXX)
mnt=$work/mnt
mkdir -p "$mnt" "$work/store/bench"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
target/release/examples/s3_files "$port" "$work/store" 2>/dev/null &
server=$!
cleanup() {
  umount "$mnt" 2>/dev/null || true
  kill "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:$port

cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
stat_of() {
  python3 -c "import os, json; print(json.loads(os.getxattr('$mnt', 'user.brevis.stats'))['$1'])"
}
unmount() {
  # The last close reaches the server just after the reader exits; the
  # server writes what waits for the disk cache before it exits.
  for _ in $(seq 50); do umount "$mnt" 2>/dev/null && break; sleep 0.1; done
  mountpoint -q "$mnt" && umount "$mnt"
  while pgrep -f "brevis-mount s3://bench/.* $mnt" >/dev/null; do sleep 0.1; done
}

# Reads $mnt/$1 cold (a fresh mount with options $2...), prints
# "MB/s fetched_bytes requests disk_hit_bytes".
read_once() {
  local name=$1
  shift
  cold
  target/release/brevis-mount "s3://bench/$name.brv" "$mnt" --log "$work/log" "$@"
  local start end
  start=$(date +%s.%N)
  cat "$mnt/$name.safetensors" >/dev/null
  end=$(date +%s.%N)
  local stats
  stats="$(stat_of fetched_bytes) $(stat_of requests) $(stat_of disk_hit_bytes)"
  cmp "$mnt/$name.safetensors" "$work/$name.original"
  unmount
  echo "$(echo "scale=1; $orig / ($end - $start) / 1000000" | bc) $stats"
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf '| file | original | archive | one GET of the archive, MB/s | cold read MB/s | fetched / archive | requests | opening: fetched | 4 KiB read: fetched | filling the disk cache: MB/s | from the disk cache: MB/s | still fetched | its files |\n'
printf '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
for file in "$@"; do
  name=$(basename "$file" .safetensors)
  [[ $name == model ]] && name=$(basename "$(dirname "$file")")
  ln -sf "$file" "$work/$name.original"
  target/release/brevis pack -q "$file" "$work/store/bench/$name.brv"
  orig=$(stat -L -c %s "$file")
  size=$(stat -L -c %s "$work/store/bench/$name.brv")
  gets=() reads=() fills=() warms=() left=()
  for _ in $(seq "$runs"); do
    cold
    gets+=("$(curl -s -o /dev/null -w '%{speed_download}' "$AWS_ENDPOINT_URL/bench/$name.brv" | awk '{printf "%.1f", $1 / 1e6}')")
    read -r speed fetched requests _ <<<"$(read_once "$name")"
    reads+=("$speed")
    rm -rf "$work/cache"
    read -r speed _ _ _ <<<"$(read_once "$name" --disk-cache "$work/cache")"
    fills+=("$speed")
    read -r speed still _ _ <<<"$(read_once "$name" --disk-cache "$work/cache")"
    warms+=("$speed")
    left+=("$still")
  done
  files=$(find "$work/cache" -name '*.blk' | wc -l)
  # One 4 KiB read in the middle of the file, on a fresh mount: what opening
  # the archive fetched (its index), and then what the read fetched.
  target/release/brevis-mount "s3://bench/$name.brv" "$mnt" --log "$work/log"
  stat "$mnt/$name.safetensors" >/dev/null
  opened=$(stat_of fetched_bytes)
  dd if="$mnt/$name.safetensors" of=/dev/null bs=4096 count=1 skip=$((orig / 8192)) iflag=direct status=none
  one=$(($(stat_of fetched_bytes) - opened))
  unmount
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$orig" "$size" \
    "$(median <<<"${gets[*]}")" "$(median <<<"${reads[*]}")" "$(echo "scale=4; $fetched / $size" | bc)" \
    "$requests" "$opened" "$one" "$(median <<<"${fills[*]}")" "$(median <<<"${warms[*]}")" \
    "$(median <<<"${left[*]}")" "$files"
  rm -f "$work/store/bench/$name.brv"
done
