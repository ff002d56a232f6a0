#!/usr/bin/env python3
"""The order-0 references for coding a checkpoint against a base.

usage: xor_entropy.py FILE.safetensors [BASE.safetensors] [--difference]

Prints the bytes an order-0 coder of byte planes would need: for each tensor, the
entropy of each byte position of its elements (plane k holds byte k of every
element), taken over the XOR of its bytes with the base's tensor of the same name,
dtype and shape when BASE is given and has one, else over its own bytes; plus the
header, uncoded. With --difference, float tensors (F16, BF16, F32, F64) use instead
the zigzag of the difference of their values from the base's in sign-magnitude
order (what `brevis pack --base` may store, docs/FORMAT.md "Bases"). Needs numpy only.
"""
import json
import struct
import sys

import numpy as np

WIDTH = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2,
         "I16": 2, "U16": 2}
FLOATS = {"F64", "F32", "F16", "BF16"}
UNSIGNED = {2: np.uint16, 4: np.uint32, 8: np.uint64}
SIGNED = {2: np.int16, 4: np.int32, 8: np.int64}


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


def difference(data, base, width):
    """zigzag(order(data) - order(base)) per element, as bytes."""
    u, s = UNSIGNED[width], SIGNED[width]
    bits = 8 * width

    def order(v):
        v = v.view(u)
        sign = (v.view(s) >> (bits - 1)).view(u)
        return v ^ (sign & u(np.iinfo(u).max >> 1))

    d = (order(data) - order(base)).view(s)
    return ((d << 1) ^ (d >> (bits - 1))).view(np.uint8)


def main():
    args = [a for a in sys.argv[1:] if a != "--difference"]
    use_difference = "--difference" in sys.argv[1:]
    header, mine = tensors(args[0])
    base = tensors(args[1])[1] if len(args) > 1 else {}
    bits = 0.0
    for name, (dtype, shape, data) in mine.items():
        other = base.get(name)
        width = WIDTH.get(dtype, 1)
        if other is not None and other[0] == dtype and other[1] == shape:
            if use_difference and dtype in FLOATS:
                data = difference(data, other[2], width)
            else:
                data = data ^ other[2]
        bits += planes_bits(data, width)
    print(int(header + bits / 8))


if __name__ == "__main__":
    with np.errstate(over="ignore"):
        main()
