#!/usr/bin/env python3
"""The order-0 reference for coding a checkpoint against a base.

usage: xor_entropy.py FILE.safetensors [BASE.safetensors]

Prints the bytes an order-0 coder of byte planes would need: for each tensor, the
entropy of each byte position of its elements (plane k holds byte k of every
element), taken over the XOR of its bytes with the base's tensor of the same name,
dtype and shape when BASE is given and has one, else over its own bytes; plus the
header, uncoded. Needs numpy only.
"""
import json
import struct
import sys

import numpy as np

WIDTH = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2,
         "I16": 2, "U16": 2}


def tensors(path):
    blob = np.fromfile(path, dtype=np.uint8)
    (hlen,) = struct.unpack_from("<Q", blob[:8].tobytes())
    header = json.loads(blob[8:8 + hlen].tobytes())
    header.pop("__metadata__", None)
    start = 8 + hlen
    out = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        out[name] = (t["dtype"], tuple(t["shape"]), blob[start + a:start + b])
    return 8 + hlen, out


def planes_bits(data, width):
    bits = 0.0
    planes = data.reshape(-1, width) if data.size % width == 0 else data.reshape(-1, 1)
    for k in range(planes.shape[1]):
        counts = np.bincount(planes[:, k], minlength=256)
        counts = counts[counts > 0].astype(np.float64)
        n = counts.sum()
        bits += float((counts * np.log2(n / counts)).sum())
    return bits


def main():
    header, mine = tensors(sys.argv[1])
    base = tensors(sys.argv[2])[1] if len(sys.argv) > 2 else {}
    bits = 0.0
    for name, (dtype, shape, data) in mine.items():
        other = base.get(name)
        if other is not None and other[0] == dtype and other[1] == shape:
            data = data ^ other[2]
        bits += planes_bits(data, WIDTH.get(dtype, 1))
    print(int(header + bits / 8))


if __name__ == "__main__":
    main()
