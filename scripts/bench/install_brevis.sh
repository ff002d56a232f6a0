#!/usr/bin/env bash
# Builds brevis (release: the commands and the Python wheel) and installs the
# wheel into the venv of PYTHON, for the benches that load through it.
#
#   scripts/bench/install_brevis.sh PYTHON
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=$1
venv=$(dirname "$py")
(cd "$repo" && cargo build --release --quiet --bins --examples)
"$py" -m pip install -q "maturin>=1.5,<2" >&2
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
(cd "$repo/python" && "$venv/maturin" build --quiet --release -i "$py" -o "$wheels" >&2)
"$py" -m pip install -q --force-reinstall --no-deps "$wheels"/brevis-*.whl >&2
