#!/usr/bin/env bash
# Compares two builds of brevis-mount on whole-file reads through fresh
# mounts, alternating the builds so that the host's drift hits both alike.
#
#   scripts/bench/mount_ab.sh BUILD_A BUILD_B RUNS NAME...
#
# NAME is a corpus checkpoint (scripts/fetch-corpus.sh), packed once into
# target/mount-ab/NAME.brv by target/release/brevis. Each run mounts
# target/mount-ab with one build, then the other, and reads NAME.safetensors
# once from start to end through each fresh mount (scripts/bench/read.py:
# from the open to the end of the file, in 128 KiB reads). Prints each
# build's median ms and MB/s per NAME. Needs /dev/fuse and root (or
# fusermount3); the mount is a temporary directory, unmounted on exit.
set -euo pipefail

if [ $# -lt 4 ]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
a=$1 b=$2 runs=$3
shift 3
root=$(cd "$(dirname "$0")/../.." && pwd)
corpus=${BREVIS_CORPUS:-$HOME/.cache/brevis-corpus}
archives=$root/target/mount-ab
mnt=$(mktemp -d)
unmount() { umount "$mnt" 2>/dev/null || fusermount3 -u "$mnt"; }
cleanup() {
    if mountpoint -q "$mnt"; then unmount; fi
    rmdir "$mnt"
}
trap cleanup EXIT
for build in "$a" "$b"; do
    [ -x "$build" ] || { echo "mount_ab: $build: not an executable" >&2; exit 2; }
done
mkdir -p "$archives"
for name in "$@"; do
    src=$corpus/$name/model.safetensors
    [ -f "$src" ] || { echo "mount_ab: $src missing: run scripts/fetch-corpus.sh" >&2; exit 2; }
    [ -f "$archives/$name.brv" ] || "$root/target/release/brevis" pack -q "$src" "$archives/$name.brv"
done

# Seconds for one read of $2.safetensors through a fresh mount by build $1.
read_once() {
    "$1" "$archives" "$mnt"
    python3 "$root/scripts/bench/read.py" "$mnt/$2.safetensors" | cut -d' ' -f1
    unmount
}

# Prints the median of the seconds TIMES... that BUILD took to read NAME,
# BYTES long.
report() {
    local name=$1 build=$2 bytes=$3 m
    shift 3
    m=$(printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
    awk -v n="$name" -v b="$build" -v m="$m" -v s="$bytes" -v r="$runs" \
        'BEGIN {printf "%-16s %-40s median %7.2f ms %7.1f MB/s (%d mounts)\n", n, b, m * 1e3, s / m / 1e6, r}'
}

for name in "$@"; do
    bytes=$(stat -c %s "$corpus/$name/model.safetensors")
    times_a=() times_b=()
    for ((i = 0; i < runs; i++)); do
        times_a+=("$(read_once "$a" "$name")")
        times_b+=("$(read_once "$b" "$name")")
    done
    report "$name" "$a" "$bytes" "${times_a[@]}"
    report "$name" "$b" "$bytes" "${times_b[@]}"
done
