#!/usr/bin/env bash
# A real Slurm job array packs a model folder with `brevis pack --shard auto`:
# starts munge and a single-node Slurm cluster (slurmctld + slurmd) on this
# machine, submits `sbatch --array=0-2`, and checks that the output is
# byte-identical to one `brevis pack` of the same folder; then removes two
# outputs and submits the array again, which must redo only those.
#
#   scripts/test/slurm.sh [BREVIS]     (default: target/debug/brevis)
#
# Needs root (the daemons run as root) and installs Debian's slurmctld, slurmd,
# slurm-client and munge when missing. Takes about half a minute.
set -euo pipefail
cd "$(dirname "$0")/../.."
brevis=$(realpath "${1:-target/debug/brevis}")
corpus=${BREVIS_CORPUS:-$HOME/.cache/brevis-corpus}
log() { echo "slurm.sh: $*" >&2; }
die() { log "FAILED: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (slurmd and munged run as root here)"
[ -x "$brevis" ] || die "$brevis is not built (cargo build)"
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
  ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
  log "installing slurmctld, slurmd, slurm-client and munge (apt)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
fi

work=$(mktemp -d /tmp/brevis-slurm.XXXXXX)
chmod 755 "$work"
stop() {
  for pid in "$work"/*.pid; do
    [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true
  done
  sleep 1
  rm -rf "$work"
}
trap stop EXIT

# Munge, on a socket and key of its own.
mkdir -p "$work/munge"
dd if=/dev/urandom of="$work/munge/key" bs=1024 count=1 status=none
chmod 400 "$work/munge/key"
munged --force --key-file="$work/munge/key" --socket="$work/munge/socket" \
  --pid-file="$work/munged.pid" --log-file="$work/munge/log" --seed-file="$work/munge/seed"

# Ports of its own, so that a Slurm already running here is not disturbed.
host=$(hostname -s)
mkdir -p "$work/state" "$work/spool"
cat >"$work/slurm.conf" <<EOF
ClusterName=brevis-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
AuthInfo=socket=$work/munge/socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$work/slurm.conf
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"

# Until the node takes jobs (bounded).
for _ in $(seq 60); do
  sinfo -h -o %t 2>/dev/null | grep -qx 'idle' && break
  sleep 0.5
done
sinfo -h -o %t | grep -qx 'idle' || {
  tail -n 20 "$work/slurmctld.log" "$work/slurmd.log" >&2 || true
  die "the Slurm node did not come up"
}

# A model folder of four checkpoints (in a subfolder too) and a config.
src=$work/model
mkdir -p "$src/sub"
for name in fracast-int8 silero-vad-f32 wordllama-f16; do
  [ -f "$corpus/$name/model.safetensors" ] || die "$corpus/$name missing: run scripts/fetch-corpus.sh"
  cp "$corpus/$name/model.safetensors" "$src/$name.safetensors"
done
cp "$corpus/silero-vad-f32/model.safetensors" "$src/sub/again.safetensors"
echo '{"model_type": "test"}' >"$src/config.json"

"$brevis" pack "$src" "$work/one" 2>/dev/null

# The array: each task packs its share; --wait returns when all have ended.
array() {
  sbatch --array=0-2 --wait --quiet -o "$work/task-%a.log" \
    --wrap "'$brevis' pack --shard auto '$src' '$work/sharded'" ||
    { cat "$work"/task-*.log >&2; die "sbatch --array=0-2 failed"; }
}
array
diff -r "$work/one" "$work/sharded" >&2 || die "the job array's output differs from one pack"
log "a job array of 3 tasks packed $(find "$src" -type f | wc -l) files, identical to one pack"

# A rerun after two outputs were lost redoes those and leaves the rest as is
# (every output is written under a temporary name and renamed: a rewritten
# one has a new inode).
inodes() { stat -c '%n %i' "$work/sharded/config.json" "$work/sharded/sub/again.brv" \
  "$work/sharded/silero-vad-f32.brv"; }
before=$(inodes)
rm "$work/sharded/wordllama-f16.brv" "$work/sharded/fracast-int8.brv"
array
diff -r "$work/one" "$work/sharded" >&2 || die "the rerun's output differs from one pack"
[ "$(inodes)" = "$before" ] || die "the rerun rewrote outputs that were done: $(inodes)"
log "a rerun redid the two lost outputs only: ok"
