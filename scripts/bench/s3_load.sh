#!/usr/bin/env bash
# Loading checkpoints from object storage, side by side: an S3 endpoint that is
# not the bottleneck (examples/s3_files.rs, GET and HEAD over a folder with
# sendfile; s3s-fs from crates.io took 0.37 s per 8 MiB range, this 0.02 s)
# behind a link of limited bandwidth and latency
# (examples/throttle_proxy.rs), and four ways
# to get every tensor into memory as torch tensors (scripts/bench/s3_load.py):
#
#   runai      runai-model-streamer (PyPI) streams the raw .safetensors
#   boto3      a plain download (boto3), then safetensors.torch.load_file
#   mount      brevis-mount s3://... (a fresh mount), then safetensors.torch.load_file
#   brevis     brevis.torch.load_file("s3://.../x.brv")
#
# For each link and file, BENCH_RUNS rounds (default 3) run the loaders in
# turn; the table gives the median wall time, the bytes that crossed the link
# and the requests (counted by the proxy), and every loader's tensors must
# have the same digest.
#
#   scripts/bench/s3_load.sh [FILE.safetensors ...]   (default: minilm-bf16, minilm-f32)
#
# BENCH_LINKS   "MBIT/MS ..." links to measure (default "1000/2 4000/2 0/0";
#               0 Mbit/s is unlimited)
# BENCH_VENV    venv with torch (default target/bench-venv, made by scripts/bench.sh)
# Needs root and /dev/fuse for the mount.
set -euo pipefail
scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
repo=$(cd "$scripts/.." && pwd)
runs=${BENCH_RUNS:-3}
links=${BENCH_LINKS:-1000/2 4000/2 0/0}
venv=${BENCH_VENV:-$repo/target/bench-venv}
py=$venv/bin/python
log() { printf 's3_load: %s\n' "$*" >&2; }
die() { printf 's3_load: ERROR: %s\n' "$*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || die "needs root (the mount)"
"$py" -c "import torch, safetensors" 2>/dev/null || die "$py lacks torch (run scripts/bench.sh once)"
"$py" -c "import runai_model_streamer, boto3" 2>/dev/null ||
  "$py" -m pip install -q "runai-model-streamer[s3]" boto3 >&2
"$scripts/bench/install_brevis.sh" "$py"
proxy=$repo/target/release/examples/throttle_proxy
server=$repo/target/release/examples/s3_files
mount_bin=$repo/target/release/brevis-mount

corpus=$("$scripts/fetch-corpus.sh")
[[ $# -gt 0 ]] || set -- "$corpus/minilm-bf16/model.safetensors" "$corpus/minilm-f32/model.safetensors"

work=$(mktemp -d /tmp/brevis-s3-load.XXXXXX)
pids=()
cleanup() {
  mountpoint -q "$work/mnt" && umount "$work/mnt"
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/store/bench" "$work/mnt" "$work/scratch"
names=()
for file in "$@"; do
  # A corpus file is named by its folder, any other by its own name.
  name=$(basename "$file" .safetensors)
  [[ $name == model ]] && name=$(basename "$(dirname "$file")")
  names+=("$name")
  ln -f "$file" "$work/store/bench/$name.safetensors" 2>/dev/null || cp "$file" "$work/store/bench/$name.safetensors"
  "$repo/target/release/brevis" pack -q "$file" "$work/store/bench/$name.brv"
done

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
server_port=$(free_port)
"$server" "$server_port" "$work/store" 2>"$work/server.log" &
pids+=($!)
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
export RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING=0 AWS_EC2_METADATA_DISABLED=true

# One load: prints "seconds bytes_down requests digest" (a failed one, "failed").
# The proxy's counters since the last call: "bytes_down requests".
stats() {
  local fd line
  exec {fd}<>"/dev/tcp/127.0.0.1/$1" || return 1
  read -r line <&"$fd"
  exec {fd}<&-
  [[ -n $line ]] || return 1
  echo "$line"
}
load() {
  local how=$1 name=$2 out
  stats "$stats_port" >/dev/null
  exec 3>&2 2>>"$work/errors"
  case $how in
    runai) out=$("$py" "$scripts/bench/s3_load.py" runai "s3://bench/$name.safetensors") ;;
    boto3) out=$("$py" "$scripts/bench/s3_load.py" boto3 "s3://bench/$name.safetensors" "$work/scratch") ;;
    brevis) out=$("$py" "$scripts/bench/s3_load.py" brevis "s3://bench/$name.brv") ;;
    mount)
      # Mounting (which opens the archive: its trailer and index) counts.
      local t0 t1
      t0=$(date +%s.%N)
      "$mount_bin" "s3://bench/$name.brv" "$work/mnt" --log "$work/mount.log"
      t1=$(date +%s.%N)
      out=$("$py" "$scripts/bench/s3_load.py" file "$work/mnt/$name.safetensors")
      read -r secs rest <<<"$(tail -n 1 <<<"$out")"
      out="$(echo "$secs + $t1 - $t0" | bc) $rest"
      # The last close reaches the server just after the reader exits.
      for _ in $(seq 50); do umount "$work/mnt" 2>/dev/null && break; sleep 0.1; done
      mountpoint -q "$work/mnt" && umount "$work/mnt" ;;
  esac
  exec 2>&3 3>&-
  # (runai-model-streamer may print its own lines first.)
  out=$(tail -n 1 <<<"$out")
  [[ -n $out ]] || { echo failed; return; }
  read -r secs _ _ digest <<<"$out"
  local counted
  counted=$(stats "$stats_port") || { echo failed; return; }
  echo "$secs $counted $digest"
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
loaders=(runai boto3 mount brevis)
echo "Loading from object storage (scripts/bench/s3_load.sh, $(date -u +%F), $runs rounds, medians):"
echo
echo "| link | file | original | archive | loader | seconds | vs runai | bytes over the link | requests |"
echo "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |"
for link in $links; do
  mbit=${link%/*} ms=${link#*/}
  port=$(free_port) stats_port=$(free_port)
  "$proxy" "$port" "$server_port" "$mbit" "$ms" "$stats_port" &
  pids+=($!)
  export AWS_ENDPOINT_URL=http://127.0.0.1:$port
  for _ in $(seq 100); do stats "$stats_port" >/dev/null 2>&1 && break; sleep 0.1; done
  label=$([[ $mbit == 0 ]] && echo "loopback" || echo "$mbit Mbit/s, ${ms} ms")
  for name in "${names[@]}"; do
    declare -A secs=() bytes=() reqs=() digests=()
    for _ in $(seq "$runs"); do
      for how in "${loaders[@]}"; do
        read -r s b r d <<<"$(load "$how" "$name")"
        [[ $s != failed ]] || die "$name: $how failed: $(tail -n 5 "$work/errors")"
        secs[$how]+="$s "; bytes[$how]=$b; reqs[$how]=$r; digests[$how]=$d
      done
    done
    want=${digests[runai]}
    for how in "${loaders[@]}"; do
      [[ ${digests[$how]} == "$want" ]] || die "$name: $how loaded other tensors (digest ${digests[$how]}, runai $want)"
    done
    base=$(median <<<"${secs[runai]}")
    for how in "${loaders[@]}"; do
      m=$(median <<<"${secs[$how]}")
      printf '| %s | %s | %s | %s | %s | %.3f | %.2fx | %s | %s |\n' "$label" "$name" \
        "$(stat -L -c %s "$work/store/bench/$name.safetensors")" "$(stat -L -c %s "$work/store/bench/$name.brv")" \
        "$how" "$m" "$(echo "$base / $m" | bc -l)" "${bytes[$how]}" "${reqs[$how]}"
    done
    unset secs bytes reqs digests
  done
  kill "${pids[-1]}"
done
