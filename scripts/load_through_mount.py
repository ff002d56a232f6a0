"""Loads every .safetensors file under ORIGINALS twice, from the originals and
from the same path under MOUNT, with the unmodified safetensors loaders for
numpy: load_file (reads the file) and safe_open (memory-maps it). Exits non-zero
on any difference.

usage: python3 load_through_mount.py MOUNT ORIGINALS
"""
import pathlib
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def main():
    mount, originals = map(pathlib.Path, sys.argv[1:3])
    files = sorted(originals.rglob("*.safetensors"))
    tensors = 0
    for original in files:
        shown = mount / original.relative_to(originals)
        expected = load_file(original)
        loaded = load_file(shown)
        assert loaded.keys() == expected.keys(), f"{shown}: tensor names differ"
        for name, value in expected.items():
            assert same(loaded[name], value), f"{shown}: {name} differs (load_file)"
        with safe_open(shown, framework="np") as mapped:
            assert set(mapped.keys()) == set(expected), f"{shown}: names differ (safe_open)"
            for name in mapped.keys():
                assert same(mapped.get_tensor(name), expected[name]), f"{shown}: {name} (safe_open)"
        tensors += len(expected)
        params = sum(v.size for v in expected.values())
        print(f"{shown}: {len(expected)} tensors, {params} parameters, identical to the original")
    print(f"checked {len(files)} files, {tensors} tensors: identical through the mount")
    return 0 if files else 1


if __name__ == "__main__":
    sys.exit(main())
