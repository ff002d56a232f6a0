#!/usr/bin/env bash
# Reads corpus files through `brevis-mount s3://...` from moto's S3 server on
# loopback (the tests' venv, scripts/test/pyenv.sh): per file, the archive's size,
# a cold sequential read's MB/s (a fresh mount, nothing cached), the bytes it
# fetched and its requests, then the same from a fresh mount whose disk cache
# an earlier one filled; and, for scale, one plain GET of the whole archive
# (curl). Every read is compared with the original (cmp). Needs root
# (or fusermount3) and /dev/fuse.
#
#   scripts/bench/s3.sh [FILE ...]   # default: minilm-bf16 and minilm-f32
# BENCH_RUNS (default 3) cold reads per file, each on a fresh mount.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${BENCH_RUNS:-3}
corpus=$(scripts/fetch-corpus.sh)
python=$(scripts/test/pyenv.sh)
if [ $# -eq 0 ]; then
  set -- "$corpus/minilm-bf16/model.safetensors" "$corpus/minilm-f32/model.safetensors"
fi
cargo build --release --quiet --bins
work=$(mktemp -d)
port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$python" -m moto.server -H 127.0.0.1 -p "$port" >/dev/null 2>&1 &
moto=$!
mnt=$work/mnt
mkdir -p "$mnt"
cleanup() {
  umount "$mnt" 2>/dev/null || true
  kill "$moto" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:$port
for _ in $(seq 100); do
  "$python" -c "import socket; socket.create_connection(('127.0.0.1', $port))" 2>/dev/null && break
  sleep 0.1
done

s3() {
  "$python" -c "import boto3, sys
s3 = boto3.client('s3', endpoint_url='$AWS_ENDPOINT_URL', aws_access_key_id='test', aws_secret_access_key='test', region_name='us-east-1')
$1" "${@:2}"
}
s3 "s3.create_bucket(Bucket='bench')"

stat_of() {
  "$python" -c "import os, json; print(json.loads(os.getxattr('$mnt', 'user.brevis.stats'))['$1'])"
}

# Reads $mnt/$1 cold (a fresh mount with options $2...), prints
# "seconds fetched_bytes requests disk_hit_bytes".
read_once() {
  local name=$1
  shift
  target/release/brevis-mount "$@" "s3://bench/$name.brv" "$mnt" --log "$work/log"
  local start end
  start=$(date +%s.%N)
  cat "$mnt/$name.safetensors" >/dev/null
  end=$(date +%s.%N)
  cmp "$mnt/$name.safetensors" "$work/$name.original"
  echo "$(echo "$end - $start" | bc) $(stat_of fetched_bytes) $(stat_of requests) $(stat_of disk_hit_bytes)"
  # The last close reaches the server just after the reader exits.
  for _ in $(seq 50); do umount "$mnt" 2>/dev/null && return; sleep 0.1; done
  umount "$mnt"
}

printf '| file | original | archive | one GET of the archive, MB/s | cold read MB/s (%s runs) | fetched bytes | fetched / archive | requests | filling the disk cache: MB/s | from the disk cache: MB/s, fetched, disk hits | opening: fetched | 4 KiB read: fetched |\n' "$runs"
printf '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
for file in "$@"; do
  name=$(basename "$(dirname "$file")")
  cp "$file" "$work/$name.original"
  target/release/brevis pack -q "$file" "$work/$name.brv"
  s3 "s3.upload_file(sys.argv[1], 'bench', sys.argv[2], ExtraArgs={'ACL': 'public-read'})" \
    "$work/$name.brv" "$name.brv"
  # What the server gives one plain GET of the whole object, for scale.
  raw=$(curl -s -o /dev/null -w '%{speed_download}' "$AWS_ENDPOINT_URL/bench/$name.brv")
  raw=$(echo "scale=1; $raw / 1000000" | bc)
  orig=$(stat -c %s "$file")
  size=$(stat -c %s "$work/$name.brv")
  speeds=()
  for _ in $(seq "$runs"); do
    out=$(read_once "$name")
    read -r secs fetched requests _ <<<"$out"
    speeds+=("$(echo "scale=1; $orig / $secs / 1000000" | bc)")
  done
  # One 4 KiB read in the middle of the file, on a fresh mount: what opening
  # the archive fetched (its index), and then what the read fetched.
  target/release/brevis-mount "s3://bench/$name.brv" "$mnt" --log "$work/log"
  stat "$mnt/$name.safetensors" >/dev/null
  opened=$(stat_of fetched_bytes)
  dd if="$mnt/$name.safetensors" of=/dev/null bs=4096 count=1 skip=$((orig / 8192)) iflag=direct status=none
  one=$(($(stat_of fetched_bytes) - opened))
  for _ in $(seq 50); do umount "$mnt" 2>/dev/null && break; sleep 0.1; done
  out=$(read_once "$name" --disk-cache "$work/cache")
  read -r secs _ _ _ <<<"$out"
  fill=$(echo "scale=1; $orig / $secs / 1000000" | bc)
  out=$(read_once "$name" --disk-cache "$work/cache")
  read -r secs dfetched _ hits <<<"$out"
  dspeed=$(echo "scale=1; $orig / $secs / 1000000" | bc)
  ratio=$(echo "scale=4; $fetched / $size" | bc)
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s, %s, %s | %s | %s |\n' "$name" "$orig" "$size" "$raw" \
    "$(IFS=/; echo "${speeds[*]}")" "$fetched" "$ratio" "$requests" "$fill" "$dspeed" "$dfetched" "$hits" "$opened" "$one"
done
