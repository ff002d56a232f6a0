#!/usr/bin/env bash
# Makes (once) a Python venv with safetensors and numpy, the loaders the mount is
# tested and shown with, and moto's S3 server with boto3, which the tests of
# mounting from object storage run on loopback; prints the path of its
# interpreter.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/pyenv
if ! "$venv/bin/python" -c "import safetensors, numpy, moto.server, boto3" 2>/dev/null; then
  echo "pyenv: making $venv with safetensors, numpy, moto[server] and boto3" >&2
  python3 -m venv "$venv" 2>/dev/null || {
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$venv"
  }
  "$venv/bin/python" -m pip install -q safetensors numpy 'moto[server]' boto3 >&2
fi
printf '%s\n' "$PWD/$venv/bin/python"
