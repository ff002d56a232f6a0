"""The real checkpoints the tests load (scripts/fetch-corpus.sh) and what they hold."""

import glob
import importlib.util
import json
import os
import struct

CORPUS = os.environ.get("BREVIS_CORPUS", os.path.expanduser("~/.cache/brevis-corpus"))
CORPUS_FILES = sorted(glob.glob(os.path.join(CORPUS, "*", "model.safetensors")))
HAS_TORCH = importlib.util.find_spec("torch") is not None
NUMPY_DTYPES = {"F64", "F32", "F16", "I64", "I32", "I16", "I8", "U8", "BOOL"}


def corpus_name(path):
    return os.path.basename(os.path.dirname(path))


def dtypes_of(path):
    """The dtypes of the tensors in the safetensors file at `path`."""
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    header.pop("__metadata__", None)
    return {t["dtype"] for t in header.values()}
