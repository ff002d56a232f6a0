#!/usr/bin/env bash
# Benchmarks brevis against ZipNN, lmzip, z4ai, glyd, zstd -3 and zstd -9 on the corpus of
# scripts/fetch-corpus.sh and prints markdown tables to stdout (progress goes to stderr).
#
# First table, for every corpus file and tool: compressed size, ratio (original /
# compressed), and pack and unpack speed on 1 thread and on all threads ($(nproc)). Speed is
# MB of the ORIGINAL file (1 MB = 1e6 bytes) per second of wall time, the median of
# BENCH_RUNS rounds; the rounds interleave the tools (round 1 of every tool, then round 2 ...)
# so that a change in the machine's load falls on all of them alike. Every round trip of
# every tool is checked, and the script fails if one differs.
#
#   brevis  CLI, file to file: pack SRC OUT.brv -j T -q (default level) / unpack OUT.brv OUT
#           -j T -q; round trips checked with cmp.
#   zstd    CLI: -3 / -9 with -T1 or -T0, file to file in the same work folder as brevis, and
#           each output fsync'd (`sync FILE`) inside the timing, because brevis fsyncs its
#           outputs too; round trips checked with cmp.
#   PyPI peers, through their Python APIs (scripts/bench/peers.py has the exact calls), at
#   their default levels, one process per peer, thread count and round, timing only the
#   compress/decompress calls (Python's start-up and imports are not timed):
#   ZipNN   in memory, two ways: per tensor as ZipNN recommends for safetensors
#           (zipnn-tensor), and the whole file's bytes in one call (zipnn-file); threads=T.
#   lmzip   (module lmz) lmz.compress / lmz.decompress, file to file (its API works on
#           paths), workers=T, outputs fsync'd inside the timing; restored file compared.
#   z4ai    in memory: z4ai.safetensors.compress_bytes / decompress_bytes, its per-tensor
#           safetensors container; workers=T (threads=1 for T = 1).
#   glyd    in memory: glyd.compress(threads=T) at the API's default level ("max") on the
#           whole file / glyd.decompress (no thread argument).
#   In-memory peers' round trips are checked in memory. For the 1-thread column each peer
#   gets its thread argument 1, OMP_NUM_THREADS=MKL_NUM_THREADS=OPENBLAS_NUM_THREADS=1,
#   and its process is pinned to one CPU (sched_setaffinity), because z4ai sizes some thread
#   pools by os.cpu_count() and glyd decompresses on several threads whatever it is given.
#   brevis -j1 and zstd -T1 are not pinned.
#
# Further tables: brevis against the per-tensor order-0 references (scripts/studies/references.py),
# brevis effort levels (pack -j1 --level N), search budgets, re-fitting,
# peak memory of brevis (/usr/bin/time), and reads through brevis-mount.
#
# Installs what it lacks (Debian): zstd and time (apt); a venv at target/bench-venv
# (BENCH_VENV) with numpy, safetensors and the peers (pip: zipnn, lmzip, z4ai, glyd; zipnn
# builds a C extension and pulls in torch). A peer that cannot be installed or imported, or
# fails, gets a row saying so.
#
# Env:
#   BENCH_RUNS=3         rounds per measurement (median is reported)
#   BENCH_PEERS="zipnn lmzip z4ai glyd"
#                        PyPI peers to run (space or comma separated; empty: none)
#   BENCH_ZIPNN=1        0 drops zipnn from BENCH_PEERS (no install attempted)
#   BENCH_PIN=1          0 does not pin the peers' 1-thread runs to one CPU
#   BENCH_LEVELS=1       0 skips the effort-level table (brevis pack -j1 --level N)
#   BENCH_LEVEL_LIST="1 3 5 7 9"  levels in that table
#   BENCH_SEARCH=1       0 skips the search-budget table
#   BENCH_SEARCH_RUNS=1  runs per search-table measurement (median is reported)
#   BENCH_REFIT=1        0 skips the re-fit table (pack -j1 with and without --no-refit,
#                        BENCH_RUNS rounds alternating the two, medians)
#   BENCH_RSS=1          0 skips the peak-memory table (minilm-f32, else the largest
#                        selected corpus file)
#   BENCH_MODEL=0        1 adds the model-size table of scripts/bench/model.sh (a 7.3 GB
#                        checkpoint loaded cold and cached: raw file, mount, brevis.torch,
#                        unpack, verify, pack; needs root and ~25 GB; tens of minutes)
#   BENCH_MOUNT=1        0 skips the mount table (reads through brevis-mount; needs root or
#                        fusermount3, and /dev/fuse)
#   BENCH_FILES="a b"    corpus names to run (space or comma separated; default all)
#   BENCH_BUILD=1        run `cargo build --release` first; 0 only builds if the binary is missing
#   BREVIS_BIN=path      use this brevis binary instead of target/release/brevis (no build)
#   BENCH_TMP=dir        work folder for archives and outputs (default: a new dir in $TMPDIR or /tmp)
#   BENCH_VENV=dir       the peers' venv (default target/bench-venv; made if missing)
#   BREVIS_CORPUS=dir    corpus folder (see scripts/fetch-corpus.sh)
#   PYTHON=python3       interpreter the venv is made with
set -euo pipefail

scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$scripts/.." && pwd)
runs=${BENCH_RUNS:-3}
base_py=${PYTHON:-python3}
all_threads=$(nproc)
all_names="minilm-f32 minilm-bf16 minilm-fp8 minilm-upcast minilm-dequant4 wordllama-f16 criscross-f16 silero-vad-f32 fracast-int8 minilm-q8_0 minilm-q4_0 minilm-q5_0 minilm-q4_k minilm-q5_k minilm-q6_k minilm-mxfp4 minilm-gptq minilm-awq minilm-nf4 minilm-int8 minilm-positions"
all_peers="zipnn lmzip z4ai glyd"

log() { printf 'bench: %s\n' "$*" >&2; }
die() { printf 'bench: ERROR: %s\n' "$*" >&2; exit 1; }

[[ $runs =~ ^[1-9][0-9]*$ ]] || die "BENCH_RUNS must be a positive integer, got '$runs'"
peers=${BENCH_PEERS-$all_peers}
peers=${peers//,/ }
for peer in $peers; do
  [[ " $all_peers " == *" $peer "* ]] || die "unknown peer '$peer' in BENCH_PEERS (known: $all_peers)"
done
if [[ ${BENCH_ZIPNN:-1} == 0 ]]; then peers=$(printf '%s\n' $peers | grep -vx zipnn | tr '\n' ' ' || true); fi
level_list=${BENCH_LEVEL_LIST:-1 3 5 7 9}
level_list=${level_list//,/ }

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

command -v zstd >/dev/null || apt_install zstd || die "zstd is missing and could not be installed"
[[ -x /usr/bin/time ]] || apt_install time || log "no /usr/bin/time: the peak-memory table is skipped"
command -v "$base_py" >/dev/null || apt_install python3 || die "$base_py is missing and could not be installed"

# The peers live in a venv of their own under target/ (made once, kept between runs).
venv=${BENCH_VENV:-$repo/target/bench-venv}
py=$venv/bin/python
if [[ ! -x $py ]]; then
  log "making the venv $venv"
  "$base_py" -m venv "$venv" >&2 \
    || { apt_install python3-venv python3-pip && rm -rf "$venv" && "$base_py" -m venv "$venv" >&2; } \
    || die "could not make a venv at $venv"
fi
has_module() { "$py" -c "import $1" >/dev/null 2>&1; }
pip_install() { "$py" -m pip install -q "$@" >&2; }
for module in numpy safetensors; do
  has_module $module || pip_install $module || die "could not install $module into $venv"
done

# peer_status[PEER]: ok, or why the peer has no numbers
declare -A peer_status=() peer_module=([zipnn]=zipnn [lmzip]=lmz [z4ai]=z4ai [glyd]=glyd)
for peer in $all_peers; do peer_status[$peer]="skipped (not in BENCH_PEERS)"; done
for peer in $peers; do
  module=${peer_module[$peer]}
  if has_module "$module"; then peer_status[$peer]=ok; continue; fi
  if [[ $peer == zipnn ]]; then
    # zipnn ships as an sdist with a C extension: it needs a compiler and Python's headers.
    command -v gcc >/dev/null || apt_install gcc || true
    if [[ ! -e $("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h ]]; then
      apt_install python3-dev || true
    fi
    log "pip install zipnn (builds a C extension; pulls in torch, several GB)"
  else
    log "pip install $peer"
  fi
  install_log=${TMPDIR:-/tmp}/brevis-bench-$peer-install.log
  if ! pip_install "$peer" 2>"$install_log"; then
    peer_status[$peer]="not installed: 'pip install $peer' failed (log: $install_log)"
  elif ! has_module "$module"; then
    peer_status[$peer]="not installed: 'import $module' fails after pip install"
  else
    peer_status[$peer]=ok
  fi
  [[ ${peer_status[$peer]} == ok ]] || log "$peer: ${peer_status[$peer]}"
done

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

threads_list=(1)
(( all_threads > 1 )) && threads_list+=("$all_threads")
N=${threads_list[-1]}

# Measurements of the first table, per tool and thread count ("TOOL|T"): seconds of every
# round, and the compressed size; tool_error[TOOL] says why a tool has no numbers.
declare -A pack_s=() unpack_s=() packed_size=() tool_error=()
rows=() notes=()
# add_row NAME TOOL SIZE RATIO P1 U1 PN UN
add_row() { rows+=("$(printf '%s\t' "$@")"); }

# cli_round NAME SRC TOOL PACK_FN UNPACK_FN T: one round of a command-line tool on T threads
# (PACK_FN T SRC OUT / UNPACK_FN T IN OUT); the round trip is checked with cmp.
cli_round() {
  local name=$1 src=$2 tool=$3 pack=$4 unpack=$5 t=$6
  local packed=$work/packed restored=$work/restored p u
  rm -f "$packed" "$restored"
  p=$(elapsed "$pack" "$t" "$src" "$packed") || die "$tool pack failed on $name (threads $t)"
  u=$(elapsed "$unpack" "$t" "$packed" "$restored") || die "$tool unpack failed on $name (threads $t)"
  cmp -s "$src" "$restored" || die "$tool ROUND TRIP DIFFERS on $name (threads $t): $(cmp "$src" "$restored" 2>&1 | head -n 1)"
  pack_s[$tool|$t]+=" $p" unpack_s[$tool|$t]+=" $u" packed_size[$tool|$t]=$(fsize "$packed")
  rm -f "$packed" "$restored"
}

brevis_pack() { "$brevis" pack "$2" "$3" -j "$1" -q; }
brevis_unpack() { "$brevis" unpack "$2" "$3" -j "$1" -q; }
zthreads() { if [[ $1 == 1 ]]; then echo -T1; else echo -T0; fi; }
zstd3_pack() { zstd -q -3 "$(zthreads "$1")" -f "$2" -o "$3" && sync "$3"; }
zstd9_pack() { zstd -q -9 "$(zthreads "$1")" -f "$2" -o "$3" && sync "$3"; }
zstd_unpack() { zstd -q -d "$(zthreads "$1")" -f "$2" -o "$3" && sync "$3"; }

# peer_tools PEER: the table's tools for a peer
peer_tools() { if [[ $1 == zipnn ]]; then echo zipnn-tensor zipnn-file; else echo "$1"; fi; }

# peer_round NAME SRC PEER T: one round of a PyPI peer (scripts/bench/peers.py) on T threads
peer_round() {
  local name=$1 src=$2 peer=$3 t=$4 out rc=0 line tool kv th size p u ok pc uc
  local -a tools pin=()
  read -r -a tools <<<"$(peer_tools "$peer")"
  [[ ${BENCH_PIN:-1} == 0 ]] && pin=(--no-pin)
  out=$(env OMP_NUM_THREADS="$t" MKL_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="$t" \
    "$py" "$scripts/bench/peers.py" "$src" --threads "$t" --work "$work" "${pin[@]}" "${tools[@]}") || rc=$?
  for tool in "${tools[@]}"; do
    [[ -n ${tool_error[$tool]:-} ]] && continue
    line=$(grep -E "^(RESULT|ERROR) tool=$tool " <<<"$out" | head -n 1 || true)
    case $line in
      RESULT*)
        th= size= p= u= ok= pc= uc=
        for kv in ${line#RESULT }; do
          case $kv in
            threads=*) th=${kv#*=} ;; size=*) size=${kv#*=} ;; pack_s=*) p=${kv#*=} ;;
            unpack_s=*) u=${kv#*=} ;; ok=*) ok=${kv#*=} ;; pack_cpu=*) pc=${kv#*=} ;; unpack_cpu=*) uc=${kv#*=} ;;
          esac
        done
        [[ $ok == 1 ]] || die "$tool ROUND TRIP DIFFERS on $name (threads $t)"
        [[ $th == "$t" ]] || die "$tool answered for threads $th, asked $t"
        pack_s[$tool|$t]+=" $p" unpack_s[$tool|$t]+=" $u" packed_size[$tool|$t]=$size
        log "  $tool T$t: pack ${p}s (CPU ${pc}s), unpack ${u}s (CPU ${uc}s)"
        ;;
      ERROR*)
        tool_error[$tool]="failed: ${line#*reason=}"
        log "$tool on $name: ${tool_error[$tool]}"
        ;;
      *)
        tool_error[$tool]="failed: bench/peers.py exited with status $rc and no result"
        log "$tool on $name: ${tool_error[$tool]}"
        ;;
    esac
  done
}

# table_row NAME SRC TOOL: the first table's row of a measured tool
table_row() {
  local name=$1 src=$2 tool=$3 orig size t
  orig=$(fsize "$src")
  if [[ -n ${tool_error[$tool]:-} ]]; then
    add_row "$name" "$tool" "${tool_error[$tool]%%:*}" "-" "-" "-" "-" "-"
    [[ ${tool_error[$tool]} == failed* ]] && notes+=("$tool on $name: ${tool_error[$tool]}")
    return
  fi
  size=${packed_size[$tool|1]}
  # Archives are the same for any thread count for every tool here; say so if not.
  for t in "${threads_list[@]}"; do
    [[ ${packed_size[$tool|$t]} == "$size" ]] || size="$size (${t}T: ${packed_size[$tool|$t]})"
  done
  local -a cells=()
  for t in 1 "$N"; do
    # shellcheck disable=SC2086
    cells+=("$(mbps "$orig" "$(median ${pack_s[$tool|$t]})")" "$(mbps "$orig" "$(median ${unpack_s[$tool|$t]})")")
  done
  add_row "$name" "$tool" "$size" "$(ratio "$orig" "${size%% *}")" "${cells[@]}"
}

# ref_row NAME SRC: brevis's archive beside the file's per-tensor references
# (scripts/studies/references.py: order 0 with tables not counted, the same with the
# histograms' expected shortfall added back, and order 1 on byte planes with tables paid);
# 'smaller by' = how much smaller brevis's archive is than each.
ref_rows=()
ref_row() {
  local name=$1 src=$2 orig size out rb cb ob
  [[ -n ${tool_error[brevis]:-} ]] && return
  orig=$(fsize "$src")
  size=${packed_size[brevis|1]}
  out=$("$py" "$scripts/studies/references.py" "$src") || die "studies/references.py failed on $name"
  rb=${out#*reference_bytes=} rb=${rb%% *} cb=${out#*corrected_bytes=} cb=${cb%% *}
  ob=${out#*order1_bytes=}
  ref_rows+=("$(printf '%s\t' "$name" "$size" "$(ratio "$orig" "$size")" "$(ratio "$orig" "$rb")" \
    "$(smaller_by "$size" "$rb")" "$(ratio "$orig" "$cb")" "$(smaller_by "$size" "$cb")" \
    "$(ratio "$orig" "$ob")" "$(smaller_by "$size" "$ob")")")
}
# smaller_by SIZE REF: how much smaller SIZE is than REF, in percent of REF
smaller_by() { awk -v s="$1" -v r="$2" 'BEGIN { printf "%+.3f%%", 100 * (r - s) / r }'; }

# bench_main NAME SRC: the first table for one file, BENCH_RUNS interleaved rounds
bench_main() {
  local name=$1 src=$2 r t peer tool
  pack_s=() unpack_s=() packed_size=() tool_error=()
  for peer in $all_peers; do
    if [[ ${peer_status[$peer]} != ok ]]; then
      for tool in $(peer_tools "$peer"); do tool_error[$tool]=${peer_status[$peer]}; done
    fi
  done
  for ((r = 1; r <= runs; r++)); do
    log "$name: round $r of $runs"
    for t in "${threads_list[@]}"; do cli_round "$name" "$src" brevis brevis_pack brevis_unpack "$t"; done
    for peer in $all_peers; do
      [[ ${peer_status[$peer]} == ok ]] || continue
      for t in "${threads_list[@]}"; do peer_round "$name" "$src" "$peer" "$t"; done
    done
    for t in "${threads_list[@]}"; do
      cli_round "$name" "$src" "zstd -3" zstd3_pack zstd_unpack "$t"
      cli_round "$name" "$src" "zstd -9" zstd9_pack zstd_unpack "$t"
    done
  done
  table_row "$name" "$src" brevis
  ref_row "$name" "$src"
  for peer in $all_peers; do
    # a peer left out of BENCH_PEERS gets no row; one that failed to install does
    [[ " $peers " == *" $peer "* ]] || continue
    for tool in $(peer_tools "$peer"); do table_row "$name" "$src" "$tool"; done
  done
  table_row "$name" "$src" "zstd -3"
  table_row "$name" "$src" "zstd -9"
}

# bench_levels NAME SRC: brevis pack -j1 --level N for each level of BENCH_LEVEL_LIST,
# BENCH_RUNS rounds interleaving the levels; each level's archive is unpacked -j1 (timed
# too) and checked with cmp every round.
level_rows=()
bench_levels() {
  local name=$1 src=$2 orig r lvl p u
  orig=$(fsize "$src")
  local -A lp=() lu=() ls=()
  for ((r = 1; r <= runs; r++)); do
    for lvl in $level_list; do
      rm -f "$work/level.brv" "$work/level.out"
      p=$(elapsed "$brevis" pack -j1 -q --level "$lvl" "$src" "$work/level.brv") || die "brevis pack --level $lvl failed on $name"
      u=$(elapsed "$brevis" unpack -j1 -q "$work/level.brv" "$work/level.out") || die "brevis unpack failed on $name (level $lvl)"
      cmp -s "$src" "$work/level.out" || die "brevis --level $lvl ROUND TRIP DIFFERS on $name"
      [[ -z ${ls[$lvl]:-} || ${ls[$lvl]} == $(fsize "$work/level.brv") ]] || die "brevis --level $lvl made archives of two sizes on $name"
      lp[$lvl]+=" $p" lu[$lvl]+=" $u" ls[$lvl]=$(fsize "$work/level.brv")
    done
  done
  rm -f "$work/level.brv" "$work/level.out"
  local base=${ls[5]:-}
  for lvl in $level_list; do
    local vs=-
    [[ -n $base ]] && vs=$(awk -v a="${ls[$lvl]}" -v b="$base" 'BEGIN { printf "%+.4f%%", 100 * (a - b) / b }')
    # shellcheck disable=SC2086
    level_rows+=("$(printf '%s\t' "$name" "$lvl" "${ls[$lvl]}" "$(ratio "$orig" "${ls[$lvl]}")" "$vs" \
      "$(mbps "$orig" "$(median ${lp[$lvl]})")" "$(mbps "$orig" "$(median ${lu[$lvl]})")")")
  done
}

# bench_rss NAME SRC: peak resident memory of brevis pack and unpack (/usr/bin/time -f %M),
# the median of BENCH_RUNS rounds
rss_rows=()
bench_rss() {
  local name=$1 src=$2 r i kib
  local -a labels=("pack -j1" "pack -j$N" "pack -j1 --chunk-size 4194304" "unpack -j1" "unpack -j$N")
  local -A got=()
  rm -f "$work/rss.brv"
  "$brevis" pack -q "$src" "$work/rss.brv" >&2 || die "brevis pack failed on $name"
  for ((r = 1; r <= runs; r++)); do
    for i in "${!labels[@]}"; do
      local -a args
      read -r -a args <<<"${labels[$i]}"
      rm -f "$work/rss.out" "$work/rss.time"
      if [[ ${args[0]} == pack ]]; then
        /usr/bin/time -f %M -o "$work/rss.time" "$brevis" "${args[@]}" -q "$src" "$work/rss.out" >&2 || die "brevis ${labels[$i]} failed on $name"
      else
        /usr/bin/time -f %M -o "$work/rss.time" "$brevis" "${args[@]}" -q "$work/rss.brv" "$work/rss.out" >&2 || die "brevis ${labels[$i]} failed on $name"
        cmp -s "$src" "$work/rss.out" || die "brevis ${labels[$i]} ROUND TRIP DIFFERS on $name"
      fi
      kib=$(tail -n 1 "$work/rss.time")
      got[$i]+=" $kib"
    done
  done
  rm -f "$work/rss.brv" "$work/rss.out" "$work/rss.time"
  for i in "${!labels[@]}"; do
    # shellcheck disable=SC2086
    rss_rows+=("$(printf '%s\t' "$name" "brevis ${labels[$i]}" "$(awk -v k="$(median ${got[$i]})" 'BEGIN { printf "%.1f", k * 1024 / 1e6 }')" \
      "$(awk -v k="$(median ${got[$i]})" -v n="$(fsize "$src")" 'BEGIN { printf "%.2f", k * 1024 / n }')")")
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
#   serving   as cold, on a fresh mount that has first served another file like it (the
#             source with one bit of its last byte flipped, packed: the same chunks and
#             programs, but another content id, so none of its decoded chunks serve this
#             file's reads; a byte-identical copy would share them): what reading a model
#             costs on a mount that is already running, without its start-up costs (threads,
#             and the first touch of its buffers)
#   passed    the original itself put beside the archives, which the mount shows as it is,
#             read through a fresh mount: the mount's floor, what its lookup, open and read
#             requests cost without any decoding (on small files, a large part of a cold read)
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
# reads, timed inside the reader (bench/read.py), so that process start-up is not counted
read_secs() {
  local out
  sync
  out=$("$py" "$scripts/bench/read.py" "$1") || die "reading $1 failed"
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
# untimed one (bench/load.py)
load_secs() {
  local out
  out=$("$py" "$scripts/bench/load.py" "$@") || die "bench/load.py failed on $1"
  case $out in none*) echo "-" ;; *) echo "$out" | awk '{ print $2 }' ;; esac
}
ms() { [[ $1 == - ]] && echo - || awk -v s="$1" 'BEGIN { printf "%.1f", s * 1000 }'; }
times_of() { [[ $1 == - || $2 == - ]] && echo - || awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
# other_source SRC DST: a copy of SRC with the lowest bit of its last byte (tensor data)
# flipped, for the serving column of bench_mount
other_source() {
  cp "$1" "$2" && "$py" - "$2" <<'PY' || die "cannot write $2"
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-1, 2)
    last = f.read(1)[0]
    f.seek(-1, 2)
    f.write(bytes([last ^ 1]))
PY
}
bench_mount() {
  local name=$1 src=$2 orig i shown archive
  orig=$(fsize "$src")
  rm -rf "$work/archives" && mkdir -p "$work/archives"
  archive=$work/archives/$name.brv
  "$brevis" pack -q "$src" "$archive" >&2 || die "brevis pack failed on $name"
  shown=$mnt/$name.safetensors
  other_source "$src" "$work/other.safetensors"
  "$brevis" pack -q "$work/other.safetensors" "$work/archives/$name-other.brv" >&2 ||
    die "brevis pack failed on a copy of $name"
  rm -f "$work/other.safetensors"
  local original=$work/archives/$name-original.safetensors
  cp "$src" "$original"
  local -a cold=() serving=() passed=() disk=() warm=() plain=() shm=() lorig=() lcold=() lwarm=()
  local shm_file
  shm_file=$(shm_copy "$src") || shm_file=
  for ((i = 0; i < runs; i++)); do
    cat "$src" "$archive" "$original" >/dev/null
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
    passed+=("$(read_secs "$mnt/${original##*/}")")
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
    "$(mbps "$orig" "$(median "${cold[@]}")")" "$(mbps "$orig" "$(median "${serving[@]}")")" \
    "$(mbps "$orig" "$(median "${passed[@]}")")" "$dk" "$(mbps "$orig" "$(median "${warm[@]}")")" \
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
  log "$name ($(fsize "$src") bytes): brevis, ${peers:-no peers}, zstd -3, zstd -9"
  bench_main "$name" "$src"
  if [[ ${BENCH_LEVELS:-1} != 0 ]]; then log "$name: effort levels"; bench_levels "$name" "$src"; fi
  if [[ ${BENCH_SEARCH:-1} != 0 ]]; then log "$name: search settings"; bench_search "$name" "$src"; fi
  if [[ ${BENCH_REFIT:-1} != 0 ]]; then log "$name: re-fit"; bench_refit "$name" "$src"; fi
  if [[ ${BENCH_MOUNT:-1} != 0 ]]; then log "$name: reads through brevis-mount"; bench_mount "$name" "$src"; fi
done
if [[ ${BENCH_RSS:-1} != 0 && -x /usr/bin/time ]]; then
  # minilm-f32 when selected, else the largest selected file
  rss_name=
  for name in $names; do
    if [[ -z $rss_name ]] || (( $(fsize "$corpus/$name/model.safetensors") > $(fsize "$corpus/$rss_name/model.safetensors") )); then
      rss_name=$name
    fi
  done
  [[ " $names " == *" minilm-f32 "* ]] && rss_name=minilm-f32
  log "$rss_name: peak memory"
  bench_rss "$rss_name" "$corpus/$rss_name/model.safetensors"
fi
total=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }')

# ---------------------------------------------------------------- 5. tables
print_table "$(printf 'file\ttool\tsize (B)\tratio\tpack MB/s 1T\tunpack MB/s 1T\tpack MB/s %sT\tunpack MB/s %sT\t' "$N" "$N")" "${rows[@]}"
if (( ${#ref_rows[@]} )); then
  echo
  echo "brevis against the per-tensor references (scripts/studies/references.py): order 0 on 16-bit symbols, or the two 16-bit halves of 32-bit values, or bytes, tables not counted; 'corrected' adds back each histogram's expected shortfall, (distinct - 1) / (2 ln 2) bits; 'order 1' codes each byte plane with the previous byte as context, tables paid (an adaptive code's length); 'smaller by' = how much smaller brevis's archive is:"
  echo
  print_table "$(printf 'file\tbrevis size (B)\tbrevis ratio\treference ratio\tsmaller by\tcorrected ratio\tsmaller by\torder 1 ratio\tsmaller by\t')" "${ref_rows[@]}"
fi
if (( ${#level_rows[@]} )); then
  echo
  echo "Effort levels (brevis pack -j1 --level N, unpack -j1; $runs rounds interleaving the levels, medians; 'vs level 5' = size change against the default level):"
  echo
  print_table "$(printf 'file\tlevel\tsize (B)\tratio\tvs level 5\tpack MB/s 1T\tunpack MB/s 1T\t')" "${level_rows[@]}"
fi
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
if (( ${#rss_rows[@]} )); then
  echo
  echo "Peak resident memory (/usr/bin/time -f %M, median of $runs runs; MB = 1e6 bytes; x file = peak RSS / original file size):"
  echo
  print_table "$(printf 'file\tcommand\tpeak RSS MB\tx file\t')" "${rss_rows[@]}"
fi
if (( ${#mount_rows[@]} )); then
  echo
  echo "Reads through brevis-mount (MB/s of presented bytes; cold = fresh mount with the archive in the page cache, serving = the same on a fresh mount after it read another file, passed = the original itself read through a fresh mount that shows it as it is (no decoding: the mount's floor), disk = fresh mount after dropping all caches, warm = read again, original = the original file from the page cache, tmpfs = the original copied to /dev/shm and read from there (page cache in pages of $(shm_pages)). Reads are 128 KiB, timed inside the reader from the open to the end of the file. Load = safetensors load_file + touch every page, ms, with $("$py" -c 'import torch' 2>/dev/null && echo torch || echo numpy); original from the page cache and mount warm: median of 5 loads after an untimed one; mount cold: one load through a fresh mount):"
  echo
  print_table "$(printf 'file\tratio\tcold MB/s\tserving MB/s\tpassed MB/s\tdisk MB/s\twarm MB/s\toriginal MB/s\ttmpfs MB/s\tload original ms\tload cold ms\tcold/original\tload warm ms\twarm/original\t')" "${mount_rows[@]}"
fi
echo
peer_versions=
for peer in $all_peers; do
  if [[ ${peer_status[$peer]} == ok ]]; then
    peer_versions+="; $peer $("$py" -c "import importlib.metadata as m; print(m.version('$peer'))" 2>/dev/null || echo "?")"
  fi
done
echo "Median of $runs interleaved round(s); ${N}T = $N threads (nproc). MB = 1e6 bytes of the original file. Total ${total} s. Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
echo "brevis: $("$brevis" --version 2>/dev/null) ($brevis_src); zstd $(zstd -V 2>&1 | grep -o 'v[0-9][0-9.]*' | head -n 1)$peer_versions; Python $("$py" -c 'import platform; print(platform.python_version())'); CPU: $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || uname -m)"
echo "brevis and zstd: CLI, file to file in $( [[ -n ${BENCH_TMP:-} ]] && echo "$work" || echo "${TMPDIR:-/tmp}" ), output fsync'd (zstd: 'sync FILE' inside the timing, as brevis fsyncs); brevis -j T; zstd -T1 / -T0."
echo "Peers: Python API, only the compress/decompress calls timed, default levels. zipnn-tensor: per-tensor HUFFMAN with each tensor's dtype (ZipNN's safetensors recipe); zipnn-file: whole file in one call, dtype of most bytes; z4ai: z4ai.safetensors.compress_bytes (per tensor); glyd: glyd.compress, whole file, level \"max\". These three in memory (no file read/write), which favours them; lmzip: lmz.compress/decompress file to file, outputs fsync'd."
echo "Peers' 1T: thread argument 1 (ZipNN threads, lmz workers, z4ai workers and threads, glyd threads), OMP/MKL/OPENBLAS_NUM_THREADS=1$( [[ ${BENCH_PIN:-1} == 0 ]] && echo ", not pinned" || echo ", process pinned to one CPU" ); ${N}T: thread argument $N, not pinned."
for peer in $all_peers; do
  case ${peer_status[$peer]} in ok | skipped*) ;; *) echo "$peer: ${peer_status[$peer]}" ;; esac
done
if (( ${#notes[@]} )); then printf '%s\n' "${notes[@]}"; fi
if [[ ${BENCH_MODEL:-0} != 0 ]]; then
  echo
  echo "Loading, packing and unpacking a 7.3 GB BF16 checkpoint (scripts/bench/model.sh):"
  echo
  BENCH_VENV=$venv "$scripts/bench/model.sh"
fi
