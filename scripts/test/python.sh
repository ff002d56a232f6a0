#!/usr/bin/env bash
# Builds the Python package (python/, pyo3 + maturin) into a venv and runs its
# tests (python/tests, pytest) there.
#
#   scripts/test/python.sh [PYTHON]
#
# PYTHON is the venv's interpreter (default: the tests' venv of scripts/test/pyenv.sh,
# which has numpy and safetensors). The torch and transformers tests run where
# the venv has them (the bench's venv, target/bench-venv, does); elsewhere they
# are reported as skipped, loudly.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${1:-$(scripts/test/pyenv.sh)}
# Absolute, without resolving the venv's symbolic link to its base interpreter.
py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py")
"$py" -m pip install -q "maturin>=1.5,<2" pytest boto3 "moto[server]" >&2
wheels=$PWD/target/wheels
rm -f "$wheels"/brevis-*.whl
(cd python && "$(dirname "$py")/maturin" build --quiet --release -i "$py" -o "$wheels" >&2)
wheel=$(ls "$wheels"/brevis-*.whl)
# One wheel for every CPython from 3.9 on (the stable ABI), installed with no
# Rust toolchain involved.
case $(basename "$wheel") in
  *-cp39-abi3-*linux*_x86_64.whl) ;;
  *) echo "test/python.sh: $wheel is not an abi3 wheel for CPython >= 3.9" >&2; exit 1 ;;
esac
"$py" -m pip install -q --force-reinstall --no-deps "$wheel"
# From outside python/, so that the installed package is the one imported.
cd /tmp
"$py" -m pytest -q -p no:cacheprovider -rs "$OLDPWD/python/tests"
if ! "$py" -c "import torch, transformers" 2>/dev/null; then
  echo "test_python.sh: WARNING: torch/transformers are not installed in $py: the torch" \
    "loading and transformers tests did NOT run (they run in target/bench-venv)"
fi
