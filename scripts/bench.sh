#!/usr/bin/env bash
# Benchmarks brevis against zstd -3, zstd -9 and ZipNN on the corpus of scripts/fetch-corpus.sh
# and prints a markdown table to stdout (progress goes to stderr).
#
# For every corpus file and tool: compressed size, ratio (original / compressed), and pack and
# unpack speed on 1 thread and on all threads ($(nproc)). Speed is MB of the ORIGINAL file
# (1 MB = 1e6 bytes) per second of wall time, the median of BENCH_RUNS runs.
#
#   brevis  CLI: pack SRC OUT.brv -j T -q / unpack OUT.brv OUT -j T -q; every round trip is
#           checked with cmp and the script fails if one differs.
#   zstd    CLI: -3 / -9 with -T1 or -T0, file to file in the same work folder as brevis, and
#           each output fsync'd (`sync FILE`) inside the timing, because brevis fsyncs its
#           outputs too; round trips checked with cmp as well.
#   ZipNN   Python API (scripts/bench_zipnn.py), two ways: per tensor as ZipNN recommends for
#           safetensors, and the whole file's bytes in one call. Only the compress/decompress
#           calls are timed (no file I/O), round trips checked in memory.
#
# Installs what it lacks (Debian): zstd (apt), numpy and zipnn (pip; zipnn builds a C
# extension and pulls in torch). If ZipNN cannot be installed the table says so.
#
# Env:
#   BENCH_RUNS=3         runs per measurement (median is reported)
#   BENCH_SEARCH=1       0 skips the second table (search budgets and ablations)
#   BENCH_MOUNT=1        0 skips the third table (reads through brevis-mount; needs root or
#                        fusermount3, and /dev/fuse)
#   BENCH_SEARCH_RUNS=1  runs per search-table measurement (median is reported)
#   BENCH_REFIT=1        0 skips the re-fit table (pack -j1 with and without --no-refit,
#                        BENCH_RUNS rounds alternating the two, medians)
#   BENCH_FILES="a b"    corpus names to run (space or comma separated; default all)
#   BENCH_ZIPNN=1        0 skips ZipNN (no install attempted)
#   BENCH_BUILD=1        run `cargo build --release` first; 0 only builds if the binary is missing
#   BREVIS_BIN=path      use this brevis binary instead of target/release/brevis (no build)
#   BENCH_TMP=dir        work folder for archives and outputs (default: a new dir in $TMPDIR or /tmp)
#   BREVIS_CORPUS=dir    corpus folder (see scripts/fetch-corpus.sh)
#   PYTHON=python3       interpreter for ZipNN and the corpus scripts
set -euo pipefail

scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$scripts/.." && pwd)
runs=${BENCH_RUNS:-3}
want_zipnn=${BENCH_ZIPNN:-1}
py=${PYTHON:-python3}
all_threads=$(nproc)
all_names="minilm-f32 minilm-bf16 minilm-fp8 minilm-upcast wordllama-f16"

log() { printf 'bench: %s\n' "$*" >&2; }
die() { printf 'bench: ERROR: %s\n' "$*" >&2; exit 1; }

[[ $runs =~ ^[1-9][0-9]*$ ]] || die "BENCH_RUNS must be a positive integer, got '$runs'"

# ---------------------------------------------------------------- 1. install what is missing
as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else return 1; fi
}
apt_updated=0
apt_install() {
  command -v apt-get >/dev/null || { log "no apt-get: install $* by hand"; return 1; }
  if (( ! apt_updated )); then as_root apt-get update -qq >&2 || return 1; apt_updated=1; fi
  log "apt-get install $*"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}
has_module() { "$py" -c "import $1" >/dev/null 2>&1; }

# pip_install PKG...: into $py; if that interpreter refuses (PEP 668, no pip), into a venv
# under ~/.cache that then becomes $py for the rest of the run.
venv=${BENCH_VENV:-$HOME/.cache/brevis-bench/venv}
pip_install() {
  if "$py" -m pip --version >/dev/null 2>&1 && "$py" -m pip install -q "$@" >&2; then return 0; fi
  if [[ $py != "$venv/bin/python" ]]; then
    log "pip install into $py failed; using a virtualenv at $venv"
    if [[ ! -x $venv/bin/python ]]; then
      "$py" -m venv --system-site-packages "$venv" >&2 2>&1 \
        || { apt_install python3-venv python3-pip && "$py" -m venv --system-site-packages "$venv" >&2; } \
        || return 1
    fi
    py=$venv/bin/python
    "$py" -m pip install -q "$@" >&2
  else
    return 1
  fi
}

command -v zstd >/dev/null || apt_install zstd || die "zstd is missing and could not be installed"
command -v "$py" >/dev/null || apt_install python3 || die "$py is missing and could not be installed"
if [[ -x $venv/bin/python ]] && ! has_module numpy && "$venv/bin/python" -c 'import numpy' 2>/dev/null; then
  py=$venv/bin/python   # an earlier run set this up
fi
has_module numpy || pip_install numpy || die "could not install numpy"

zipnn_status=ok
if [[ $want_zipnn == 0 ]]; then
  zipnn_status="skipped (BENCH_ZIPNN=0)"
elif ! has_module zipnn; then
  if [[ -x $venv/bin/python ]] && "$venv/bin/python" -c 'import zipnn' 2>/dev/null; then
    py=$venv/bin/python
  else
    # zipnn ships as an sdist with a C extension: it needs a compiler and Python's headers.
    command -v gcc >/dev/null || apt_install gcc || true
    if [[ ! -e $("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h ]]; then
      apt_install python3-dev || true
    fi
    log "pip install zipnn (builds a C extension; pulls in torch, several GB)"
    zipnn_log=${TMPDIR:-/tmp}/brevis-bench-zipnn-install.log
    if ! pip_install zipnn 2>"$zipnn_log"; then
      zipnn_status="not installed: 'pip install zipnn' failed (log: $zipnn_log)"
    elif ! has_module zipnn; then
      zipnn_status="not installed: 'import zipnn' fails after pip install"
    fi
  fi
fi
[[ $zipnn_status == ok ]] || log "ZipNN: $zipnn_status"

# ---------------------------------------------------------------- 2. corpus and brevis
corpus=$(PYTHON=$py bash "$scripts/fetch-corpus.sh")
if [[ -n ${BREVIS_BIN:-} ]]; then
  brevis=$BREVIS_BIN
else
  brevis=$repo/target/release/brevis
  if [[ ${BENCH_BUILD:-1} != 0 || ! -x $brevis ]]; then
    log "cargo build --release"
    (cd "$repo" && cargo build --release >&2)
  fi
fi
[[ -x $brevis ]] || die "no brevis binary at $brevis"

names=${BENCH_FILES:-$all_names}
names=${names//,/ }
for name in $names; do
  [[ -s $corpus/$name/model.safetensors ]] || die "no corpus file $corpus/$name/model.safetensors (known: $all_names)"
done

work=${BENCH_TMP:-}
if [[ -z $work ]]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/brevis-bench.XXXXXX")
  remove_work=1
else
  mkdir -p "$work"
  remove_work=0
fi
cleanup() {
  if mountpoint -q "$work/mnt" 2>/dev/null; then umount "$work/mnt"; fi
  if (( remove_work )); then rm -rf "$work"; fi
  rm -f "/dev/shm/brevis-bench-$$.safetensors"
}
trap cleanup EXIT

# Run a private copy, so that a rebuild during the run cannot mix two binaries in one table.
cp "$brevis" "$work/brevis"
cp "$(dirname "$brevis")/brevis-mount" "$work/brevis-mount" 2>/dev/null || true
brevis_src="$brevis, built $(date -r "$brevis" '+%F %T')"
brevis=$work/brevis

# ---------------------------------------------------------------- 3. measuring helpers
if [[ -n ${EPOCHREALTIME:-} ]]; then now() { printf '%s' "${EPOCHREALTIME/,/.}"; }
else now() { date +%s.%N; }; fi

# elapsed CMD...: run CMD (stdout/stderr kept on stderr) and print its wall time in seconds,
# after a `sync` outside the timing
elapsed() {
  local t0 t1
  # Flush earlier runs' writes first, so that no run pays for another's writeback.
  sync
  t0=$(now)
  "$@" >&2 || return 1
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", b - a }'
}
# median VALUES...: "-" (not measured) if the first value is "-"
median() {
  [[ $1 == - ]] && { echo -; return; }
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
mbps() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.1f", (s > 0) ? n / 1e6 / s : 0 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", a / b }'; }
fsize() { stat -c %s "$1"; }

rows=()
# add_row NAME TOOL SIZE RATIO P1 U1 PN UN
add_row() { rows+=("$(printf '%s\t' "$@")"); }

# bench_cli NAME SRC TOOL PACK_FN UNPACK_FN: PACK_FN THREADS SRC OUT / UNPACK_FN THREADS IN OUT
# are the commands; times both thread settings, checks each round trip with cmp.
bench_cli() {
  local name=$1 src=$2 tool=$3 pack=$4 unpack=$5
  local orig packed=$work/packed restored=$work/restored size=0 t i
  orig=$(fsize "$src")
  local -a cells=()
  for t in 1 "$all_threads"; do
    local -a pt=() ut=()
    for ((i = 0; i < runs; i++)); do
      rm -f "$packed" "$restored"
      pt+=("$(elapsed "$pack" "$t" "$src" "$packed")") || die "$tool pack failed on $name (threads $t)"
      size=$(fsize "$packed")
      ut+=("$(elapsed "$unpack" "$t" "$packed" "$restored")") || die "$tool unpack failed on $name (threads $t)"
      cmp -s "$src" "$restored" || die "$tool ROUND TRIP DIFFERS on $name (threads $t, run $((i + 1))): $(cmp "$src" "$restored" 2>&1 | head -n 1)"
    done
    cells+=("$(mbps "$orig" "$(median "${pt[@]}")")" "$(mbps "$orig" "$(median "${ut[@]}")")")
  done
  rm -f "$packed" "$restored"
  add_row "$name" "$tool" "$size" "$(ratio "$orig" "$size")" "${cells[@]}"
}

brevis_pack() { "$brevis" pack "$2" "$3" -j "$1" -q; }
brevis_unpack() { "$brevis" unpack "$2" "$3" -j "$1" -q; }
zthreads() { if [[ $1 == 1 ]]; then echo -T1; else echo -T0; fi; }
zstd3_pack() { zstd -q -3 "$(zthreads "$1")" -f "$2" -o "$3" && sync "$3"; }
zstd9_pack() { zstd -q -9 "$(zthreads "$1")" -f "$2" -o "$3" && sync "$3"; }
zstd_unpack() { zstd -q -d "$(zthreads "$1")" -f "$2" -o "$3" && sync "$3"; }

bench_zipnn() {
  local name=$1 src=$2 line tool t orig size p u ok
  local -A got=()
  local -a threads=(1)
  (( all_threads > 1 )) && threads+=("$all_threads")
  if [[ $zipnn_status != ok ]]; then
    add_row "$name" "zipnn" "${zipnn_status%%:*}" "-" "-" "-" "-" "-"
    return
  fi
  while IFS= read -r line; do
    case $line in
      RESULT*)
        tool= t= orig= size= p= u= ok=
        for kv in ${line#RESULT }; do
          case $kv in
            tool=*) tool=${kv#*=} ;; threads=*) t=${kv#*=} ;; orig=*) orig=${kv#*=} ;;
            size=*) size=${kv#*=} ;; pack_s=*) p=${kv#*=} ;; unpack_s=*) u=${kv#*=} ;; ok=*) ok=${kv#*=} ;;
          esac
        done
        got[$tool]=1
        if [[ $ok != 1 ]]; then
          log "ZipNN ($tool, threads $t) ROUND TRIP DIFFERS on $name"
          got[$tool.bad]=1
        fi
        got[$tool.size]=$size got[$tool.orig]=$orig
        got[$tool.p$t]=$(mbps "$orig" "$p") got[$tool.u$t]=$(mbps "$orig" "$u")
        ;;
      ERROR*) log "ZipNN on $name: ${line#ERROR }"; got[error]=${line#ERROR } ;;
    esac
  done < <("$py" "$scripts/bench_zipnn.py" "$src" --runs "$runs" --threads "${threads[@]}")
  for tool in zipnn-tensor zipnn-file; do
    if [[ -z ${got[$tool]:-} ]]; then
      add_row "$name" "$tool" "failed: ${got[error]:-no output}" "-" "-" "-" "-" "-"
    elif [[ -n ${got[$tool.bad]:-} ]]; then
      add_row "$name" "$tool" "ROUND TRIP FAILED" "-" "-" "-" "-" "-"
    else
      add_row "$name" "$tool" "${got[$tool.size]}" "$(ratio "${got[$tool.orig]}" "${got[$tool.size]}")" \
        "${got[$tool.p1]}" "${got[$tool.u1]}" "${got[$tool.p${threads[-1]}]}" "${got[$tool.u${threads[-1]}]}"
    fi
  done
}

# bench_search NAME SRC: archive size and pack time (all threads) for each search setting.
search_rows=()
bench_search() {
  local name=$1 src=$2 orig label flags size secs base="" i
  orig=$(fsize "$src")
  local -a settings=("budget 0 (root only)|--budget 0" "budget 1|--budget 1" "budget 8 (default)|--budget 8"
    "budget 32|--budget 32" "budget 256|--budget 256" "default, no A* order|--no-astar" "default, no prior|--no-prior"
    "default, no re-fit (every chunk searched)|--no-refit")
  for setting in "${settings[@]}"; do
    label=${setting%%|*} flags=${setting#*|}
    local -a pt=()
    for ((i = 0; i < ${BENCH_SEARCH_RUNS:-1}; i++)); do
      rm -f "$work/search.brv"
      # shellcheck disable=SC2086
      pt+=("$(elapsed "$brevis" pack $flags -q "$src" "$work/search.brv")") || die "brevis pack $flags failed on $name"
    done
    "$brevis" verify -q "$work/search.brv" >&2 || die "brevis verify failed on $name ($label)"
    size=$(fsize "$work/search.brv")
    secs=$(median "${pt[@]}")
    [[ -n $base ]] || base=$secs
    search_rows+=("$(printf '%s\t' "$name" "$label" "$size" "$(ratio "$orig" "$size")" "$(printf '%.2f' "$secs")" \
      "$(mbps "$orig" "$secs")" "$(awk -v b="$base" -v s="$secs" 'BEGIN { printf "%.0f%%", 100 * b / s }')")")
  done
  rm -f "$work/search.brv"
}

# bench_refit NAME SRC: pack on one thread re-fitting later chunks (the default) and
# searching every chunk (--no-refit), alternating, BENCH_RUNS rounds; medians.
refit_rows=()
bench_refit() {
  local name=$1 src=$2 orig i mode
  orig=$(fsize "$src")
  local -a refit=() search=()
  for ((i = 0; i < runs; i++)); do
    for mode in refit search; do
      rm -f "$work/$mode.brv"
      local -a flags=(-j1 -q)
      [[ $mode == search ]] && flags+=(--no-refit)
      local t
      t=$(elapsed "$brevis" pack "${flags[@]}" "$src" "$work/$mode.brv") || die "brevis pack ${flags[*]} failed on $name"
      if [[ $mode == refit ]]; then refit+=("$t"); else search+=("$t"); fi
    done
  done
  local a b sa sb
  a=$(median "${refit[@]}") b=$(median "${search[@]}")
  sa=$(fsize "$work/refit.brv") sb=$(fsize "$work/search.brv")
  refit_rows+=("$(printf '%s\t' "$name" "$sa" "$sb" "$(awk -v a="$sa" -v b="$sb" 'BEGIN { printf "%+.4f%%", 100 * (a - b) / b }')" \
    "$(mbps "$orig" "$a")" "$(mbps "$orig" "$b")" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2fx", b / a }')")")
  rm -f "$work/refit.brv" "$work/search.brv"
}

# bench_mount NAME SRC: sequential reads and a safetensors load through brevis-mount, next
# to the same on the original file in the page cache.
#   cold      a fresh mount (empty chunk cache, nothing of the presented file in the page
#             cache) with the archive itself in the page cache, as the original is
#   serving   as cold, on a fresh mount that has first served another file (a copy of the
#             archive under another name, whose chunks are not this file's): what reading a
#             model costs on a mount that is already running, without its start-up costs
#             (threads, and the first touch of its buffers)
#   disk      the same after dropping all caches, so the archive is read from disk (root only)
#   warm      the presented file read again: the kernel serves it from its page cache
#   tmpfs     the original copied to /dev/shm: the page cache's speed in the 4 KiB pages that
#             this kernel gives FUSE files too (where shmem huge pages are off), next to the
#             original on its own filesystem, which may cache it in larger folios
# Loads: the original from the page cache and the mount warm (the same mount loaded
# again) are medians of 5 loads in one process after an untimed one; the mount cold is
# one load through a fresh mount.
mount_rows=()
mnt=$work/mnt
mount_fresh() {
  if mountpoint -q "$mnt"; then umount "$mnt"; fi
  mkdir -p "$mnt"
  if [[ ${1:-} == drop ]]; then sync; echo 3 >/proc/sys/vm/drop_caches; fi
  "$work/brevis-mount" "$work/archives" "$mnt" || die "brevis-mount failed"
}
# read_secs FILE: seconds to read FILE from its open to its end in 128 KiB reads, as cat
# reads, timed inside the reader (bench_read.py), so that process start-up is not counted
read_secs() {
  local out
  sync
  out=$("$py" "$scripts/bench_read.py" "$1") || die "reading $1 failed"
  [[ ${out#* } == "$(fsize "$1")" ]] || die "read ${out#* } bytes of $1, expected $(fsize "$1")"
  echo "${out%% *}"
}
# shm_copy SRC: copies SRC into /dev/shm and prints the copy's path, when /dev/shm is a
# tmpfs with room (the tmpfs column of bench_mount)
shm_copy() {
  local src=$1 dst
  [[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs ]] || return 1
  (( $(df --output=avail -B1 /dev/shm | tail -n 1) > 2 * $(fsize "$src") )) || return 1
  dst=/dev/shm/brevis-bench-$$.safetensors
  cp "$src" "$dst" && echo "$dst"
}
# shm_pages: the page size of tmpfs files, from the kernel's shmem huge page setting
shm_pages() {
  local setting
  setting=$(grep -o '\[[a-z_]*\]' /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null | tr -d '[]')
  case $setting in
    never | deny) echo "4 KiB: shmem_enabled=$setting" ;;
    "") echo "unknown size" ;;
    *) echo "4 KiB or larger: shmem_enabled=$setting" ;;
  esac
}
# load_secs FILE [N]: seconds of one load, or with N the median of N after an
# untimed one (bench_load.py)
load_secs() {
  local out
  out=$("$py" "$scripts/bench_load.py" "$@") || die "bench_load.py failed on $1"
  case $out in none*) echo "-" ;; *) echo "$out" | awk '{ print $2 }' ;; esac
}
ms() { [[ $1 == - ]] && echo - || awk -v s="$1" 'BEGIN { printf "%.1f", s * 1000 }'; }
times_of() { [[ $1 == - || $2 == - ]] && echo - || awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
bench_mount() {
  local name=$1 src=$2 orig i shown archive
  orig=$(fsize "$src")
  rm -rf "$work/archives" && mkdir -p "$work/archives"
  archive=$work/archives/$name.brv
  "$brevis" pack -q "$src" "$archive" >&2 || die "brevis pack failed on $name"
  shown=$mnt/$name.safetensors
  cp "$archive" "$work/archives/$name-other.brv"
  local -a cold=() serving=() disk=() warm=() plain=() shm=() lorig=() lcold=() lwarm=()
  local shm_file
  shm_file=$(shm_copy "$src") || shm_file=
  for ((i = 0; i < runs; i++)); do
    cat "$src" "$archive" >/dev/null
    plain+=("$(read_secs "$src")")
    if [[ -n $shm_file ]]; then shm+=("$(read_secs "$shm_file")"); fi
    lorig+=("$(load_secs "$src" 5)")
    mount_fresh
    cold+=("$(read_secs "$shown")")
    warm+=("$(read_secs "$shown")")
    cmp -s "$src" "$shown" || die "$shown DIFFERS from $src"
    mount_fresh
    read_secs "$mnt/$name-other.safetensors" >/dev/null
    serving+=("$(read_secs "$shown")")
    mount_fresh
    lcold+=("$(load_secs "$shown")")
    lwarm+=("$(load_secs "$shown" 5)")
    if [[ $(id -u) -eq 0 ]]; then
      mount_fresh drop
      disk+=("$(read_secs "$shown")")
    fi
  done
  umount "$mnt"
  if [[ -n $shm_file ]]; then rm -f "$shm_file"; fi
  local lo lc lw dk=- tm=-
  lo=$(median "${lorig[@]}") lc=$(median "${lcold[@]}") lw=$(median "${lwarm[@]}")
  if (( ${#disk[@]} )); then dk=$(mbps "$orig" "$(median "${disk[@]}")"); fi
  if (( ${#shm[@]} )); then tm=$(mbps "$orig" "$(median "${shm[@]}")"); fi
  mount_rows+=("$(printf '%s\t' "$name" "$(ratio "$orig" "$(fsize "$archive")")" \
    "$(mbps "$orig" "$(median "${cold[@]}")")" "$(mbps "$orig" "$(median "${serving[@]}")")" "$dk" "$(mbps "$orig" "$(median "${warm[@]}")")" \
    "$(mbps "$orig" "$(median "${plain[@]}")")" "$tm" "$(ms "$lo")" "$(ms "$lc")" "$(times_of "$lc" "$lo")" \
    "$(ms "$lw")" "$(times_of "$lw" "$lo")")")
}

# print_table HEADER ROWS...: tab-separated rows as an aligned markdown table
print_table() {
  printf '%s\n' "$@" | awk -F'\t' '
  { for (i = 1; i < NF; i++) { c[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } n = NR; nf = NF - 1 }
  END {
    for (r = 1; r <= n; r++) {
      line = "|"
      for (i = 1; i <= nf; i++) {
        # text columns left-aligned, numbers right-aligned
        fmt = (i <= 2) ? " %-" w[i] "s |" : " %" w[i] "s |"
        line = line sprintf(fmt, c[r, i])
      }
      print line
      if (r == 1) {
        line = "|"
        for (i = 1; i <= nf; i++) {
          d = ""; for (k = 0; k < w[i]; k++) d = d "-"
          line = line ((i <= 2) ? " " d " |" : " " substr(d, 2) ": |")
        }
        print line
      }
    }
  }'
}

# ---------------------------------------------------------------- 4. run
start=$(now)
for name in $names; do
  src=$corpus/$name/model.safetensors
  log "$name ($(fsize "$src") bytes): brevis"
  bench_cli "$name" "$src" brevis brevis_pack brevis_unpack
  log "$name: zstd -3"
  bench_cli "$name" "$src" "zstd -3" zstd3_pack zstd_unpack
  log "$name: zstd -9"
  bench_cli "$name" "$src" "zstd -9" zstd9_pack zstd_unpack
  if [[ $zipnn_status == ok ]]; then log "$name: zipnn"; fi
  bench_zipnn "$name" "$src"
  if [[ ${BENCH_SEARCH:-1} != 0 ]]; then log "$name: search settings"; bench_search "$name" "$src"; fi
  if [[ ${BENCH_REFIT:-1} != 0 ]]; then log "$name: re-fit"; bench_refit "$name" "$src"; fi
  if [[ ${BENCH_MOUNT:-1} != 0 ]]; then log "$name: reads through brevis-mount"; bench_mount "$name" "$src"; fi
done
total=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }')

# ---------------------------------------------------------------- 5. table
N=$all_threads
print_table "$(printf 'file\ttool\tsize (B)\tratio\tpack MB/s 1T\tunpack MB/s 1T\tpack MB/s %sT\tunpack MB/s %sT\t' "$N" "$N")" "${rows[@]}"
if (( ${#search_rows[@]} )); then
  echo
  echo "Search settings (brevis pack, $N threads; 'vs root' = pack throughput relative to budget 0):"
  echo
  print_table "$(printf 'file\tsetting\tsize (B)\tratio\tpack s\tpack MB/s\tvs root\t')" "${search_rows[@]}"
fi
if (( ${#refit_rows[@]} )); then
  echo
  echo "Re-fitting later chunks (default) against searching every chunk (--no-refit), brevis pack -j1, $runs rounds alternating, medians:"
  echo
  print_table "$(printf 'file\tsize re-fit (B)\tsize searched (B)\tsize change\tpack MB/s re-fit\tpack MB/s searched\tspeed-up\t')" "${refit_rows[@]}"
fi
if (( ${#mount_rows[@]} )); then
  echo
  echo "Reads through brevis-mount (MB/s of presented bytes; cold = fresh mount with the archive in the page cache, serving = the same on a fresh mount after it read another file, disk = fresh mount after dropping all caches, warm = read again, original = the original file from the page cache, tmpfs = the original copied to /dev/shm and read from there (page cache in pages of $(shm_pages)). Reads are 128 KiB, timed inside the reader from the open to the end of the file. Load = safetensors load_file + touch every page, ms, with $("$py" -c 'import torch' 2>/dev/null && echo torch || echo numpy); original from the page cache and mount warm: median of 5 loads after an untimed one; mount cold: one load through a fresh mount):"
  echo
  print_table "$(printf 'file\tratio\tcold MB/s\tserving MB/s\tdisk MB/s\twarm MB/s\toriginal MB/s\ttmpfs MB/s\tload original ms\tload cold ms\tcold/original\tload warm ms\twarm/original\t')" "${mount_rows[@]}"
fi
echo
zipnn_version=n/a
if [[ $zipnn_status == ok ]]; then
  zipnn_version=$("$py" -c 'import importlib.metadata as m; print(m.version("zipnn"))' 2>/dev/null || echo "?")
fi
echo "Median of $runs run(s); ${N}T = $N threads (nproc). MB = 1e6 bytes of the original file. Total ${total} s."
echo "brevis: $("$brevis" --version 2>/dev/null) ($brevis_src); zstd $(zstd -V 2>&1 | grep -o 'v[0-9][0-9.]*' | head -n 1); zipnn: $zipnn_version; CPU: $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || uname -m)"
echo "brevis and zstd: CLI, file to file in $( [[ -n ${BENCH_TMP:-} ]] && echo "$work" || echo "${TMPDIR:-/tmp}" ), output fsync'd (zstd: 'sync FILE' inside the timing, as brevis fsyncs); zstd -T1 / -T0."
echo "zipnn-tensor: per-tensor HUFFMAN with each tensor's dtype (ZipNN's safetensors recipe); zipnn-file: whole file in one call, dtype of most bytes."
echo "ZipNN times are in-memory compress()/decompress() calls only (no file read/write), which favours ZipNN."
[[ $zipnn_status == ok ]] || echo "ZipNN: $zipnn_status"
