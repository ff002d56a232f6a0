#!/usr/bin/env bash
# Runs every test of Brevis on a fresh machine: installs what is missing (Rust
# components, a Python venv with safetensors and numpy for the mount tests and
# moto's S3 server with boto3 for those of mounting from object storage, run on
# loopback; the Azurite emulator from npm for Azure), fetches the real corpus,
# checks formatting and lints, then runs the
# unit, property, golden-archive, integration, mount and corpus tests (cargo
# features corpus and fuse-tests), a Slurm job array, the Python package's tests, the portable
# decoders under Miri, and each fuzz target briefly (BREVIS_FUZZ_SECONDS,
# default 20). The mount tests mount FUSE filesystems for real: run as root (or
# with fusermount3) where /dev/fuse exists; as root they also mount as the user
# nobody, through fusermount3.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null; then
  echo "test.sh: cargo not found; install Rust from https://rustup.rs" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
if ! command -v python3 >/dev/null || ! python3 -m pip --version >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq python3 python3-pip >/dev/null
fi

if [ ! -e /dev/fuse ]; then
  echo "test.sh: /dev/fuse is missing; the mount tests need FUSE (modprobe fuse)" >&2
  exit 1
fi
# One mount test mounts as an unprivileged user, through the fusermount3 helper,
# with /dev/fuse open to users as distributions set it up (mode 0666).
if ! command -v fusermount3 >/dev/null; then
  echo "test.sh: installing fuse3 (apt) for fusermount3, which the non-root mount test uses"
  apt-get update -qq && apt-get install -y -qq fuse3 >/dev/null
fi
if [ "$(id -u)" -eq 0 ] && [ "$(stat -c %a /dev/fuse)" != 666 ]; then
  echo "test.sh: chmod 0666 /dev/fuse, so that the user nobody can mount (as distributions set it)"
  chmod 0666 /dev/fuse
fi
# The builds here are one-shot: no incremental state (2 GB of target/ that a
# later run of the same sources would not reuse much).
export CARGO_INCREMENTAL=0
# The whole run writes about 7 GB here (target/, fuzz/target, python/target,
# the venv) besides the corpus and the nightly toolchain: say so at the start
# where less is free, so that a build that fails for want of space halfway
# is explained.
free_kb=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [ "$free_kb" -lt $((8 * 1024 * 1024)) ]; then
  echo "test.sh: WARNING: only $((free_kb / 1024)) MB free on $(df -P . | awk 'NR == 2 { print $6 }') (for $PWD); the tests take about 8 GB" >&2
fi
# step NAME: starts step NAME, saying how long the one before it took and the
# disk space left (the whole run has to stay well within CI's limits).
step_name="setup" step_start=$SECONDS
step() {
  echo "== $1 (${step_name} took $((SECONDS - step_start)) s; $(df -Ph . | awk 'NR == 2 { print $4 }') free)"
  step_name=$1 step_start=$SECONDS
}

BREVIS_PYTHON=$(scripts/test/pyenv.sh)
export BREVIS_PYTHON

export BREVIS_CORPUS=${BREVIS_CORPUS:-$HOME/.cache/brevis-corpus}
step "corpus"
scripts/fetch-corpus.sh
# The converter that made one corpus file, on a checkpoint written here.
"$BREVIS_PYTHON" scripts/corpus/torch_to_safetensors_test.py

step "format and lints"
cargo fmt --all -- --check
cargo clippy --all-targets --features corpus,fuse-tests --quiet -- -D warnings
# The library alone, as a crate that reads archives depends on it.
cargo clippy --lib --no-default-features --quiet -- -D warnings
# The Python bindings, a crate of their own.
(cd python && cargo fmt -- --check && cargo clippy --release --quiet -- -D warnings)

step "tests"
# Benches are built, not run: their listings are not test results.
cargo build --quiet --benches --features corpus
# The mount soak test reads for a minute; its report line shows with --nocapture.
export BREVIS_SOAK_SECONDS=${BREVIS_SOAK_SECONDS:-60}
cargo test --quiet --lib --bins --tests --examples --features corpus,fuse-tests

# Archives in Azure Blob Storage, against the Azurite emulator (npm) on
# loopback: verify, unpack, pack --base and a mount; about 10 s once installed.
step "Azure (Azurite)"
scripts/test/azurite.sh target/debug

# A real Slurm job array (single-node slurmctld + slurmd on this machine, from
# Debian's packages) packs a folder with --shard auto; about two minutes.
step "Slurm job array"
scripts/test/slurm.sh target/debug/brevis

# The Python package, built into the tests' venv; also into the bench's venv
# when it exists, which has torch and transformers (too heavy to install here).
step "Python package"
scripts/test/python.sh
if [ -x target/bench-venv/bin/python ]; then
  scripts/test/python.sh "$PWD/target/bench-venv/bin/python"
fi

# Miri checks the unsafe-free portable decoders for undefined behaviour (it
# runs no SIMD): every codec on small streams of every word type.
step "Miri"
if { rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal; } &&
  rustup component add --toolchain nightly miri rust-src >/dev/null; then
  # (Miri ignores optimisation levels and warns about the test profile's.)
  CARGO_PROFILE_TEST_OPT_LEVEL=0 cargo +nightly miri test --quiet --lib --no-default-features -- \
    codec::tests::small_streams codec::tests::tiny_streams
else
  # Miri comes from rustup's servers, not a package registry: where they
  # cannot be reached, say so loudly rather than fail every other check.
  echo "test.sh: WARNING: Miri could not be installed (rustup could not fetch it); the Miri step did NOT run"
fi

# Each fuzz target runs briefly on its kept seeds (a crash fails the run;
# scripts/test/fuzz.sh SECONDS runs them longer). Like Miri it needs the nightly
# toolchain, and cargo-fuzz from crates.io.
step "fuzz (${BREVIS_FUZZ_SECONDS:-20} s per target)"
if rustup toolchain list | grep -q '^nightly'; then
  scripts/test/fuzz.sh "${BREVIS_FUZZ_SECONDS:-20}"
else
  echo "test.sh: WARNING: the nightly toolchain could not be installed; the fuzz step did NOT run"
fi

echo "== all tests passed (${step_name} took $((SECONDS - step_start)) s; ${SECONDS} s in all)"
