#!/usr/bin/env python3
"""Per-tensor references for a safetensors file, as ratios (original / bytes): order 0
and order 1.

The reference codes each tensor's symbols order-0 with the tensor's own histogram,
code tables not counted, plus the header verbatim. Symbols: the 16-bit words of a
16-bit dtype, the high and low 16-bit halves of a 32-bit dtype (two histograms), and
bytes otherwise.

Such an "empirical entropy" is below what any coder can reach on a short stream: a
histogram of n samples fits their own noise, by about (distinct - 1) / (2 ln 2) bits
(the Miller-Madow correction). A uniformly random 16-bit half of a 147,456-word
tensor scores 15.64 bits, not 16. So the script prints both:

    reference=R reference_bytes=RB corrected=C corrected_bytes=CB order1=O order1_bytes=OB

R (RB bytes): the order-0 reference; C (CB bytes): the same with each histogram's
expected shortfall added back, an estimate of what a coder that knew each tensor's
true distribution (and paid nothing for its tables) would need.

O (OB bytes): an order-1 reference of each tensor's byte planes with its tables paid
for: every plane (the high and low byte of a 16-bit dtype, the four bytes of a
32-bit one, or the bytes) coded with the previous byte of the same plane as its
context, at the length an adaptive code that sends no table reaches (the
Krichevsky-Trofimov estimate, one model per context), or order 0 the same way
where that is shorter; the header verbatim. It is what a coder of byte planes with
a context per plane and a table per tensor plane can be expected to need.

    python3 scripts/studies/references.py MODEL.safetensors
"""

import json
import math
import struct
import sys

import numpy as np


def entropy_bytes(symbols, corrected):
    """Bytes of an order-0 code of `symbols` with their own histogram."""
    counts = np.unique(symbols, return_counts=True)[1]
    bits = float(-(counts * np.log2(counts / counts.sum())).sum())
    if corrected:
        bits += (len(counts) - 1) / (2 * math.log(2))
    return bits / 8


def adaptive_bits(counts):
    """Bits of an adaptive code (Krichevsky-Trofimov) of a stream with these byte counts."""
    counts = counts.astype(np.int64)
    n, alphabet = int(counts.sum()), len(counts)
    if n == 0:
        return 0.0
    # log Gamma(k + 1/2) - log Gamma(1/2) for k = 0..max, as a running sum of logs.
    half = np.concatenate([[0.0], np.cumsum(np.log(np.arange(max(n, counts.max())) + 0.5))])
    whole = math.lgamma(n + alphabet / 2) - math.lgamma(alphabet / 2)
    return (whole - half[counts].sum()) / math.log(2)


def order1_plane_bytes(plane):
    """Bytes of one byte plane: the shorter of its adaptive order-1 and order-0 codes."""
    previous = np.concatenate([[0], plane[:-1]]).astype(np.int64)
    pairs = np.bincount(previous * 256 + plane, minlength=256 * 256).reshape(256, 256)
    order1 = sum(adaptive_bits(row) for row in pairs if row.any())
    order0 = adaptive_bits(np.bincount(plane, minlength=256))
    return min(order0, order1) / 8


def byte_planes(dtype, data):
    """The byte planes of a tensor's elements (one plane for 8-bit or unknown dtypes)."""
    width = {"F32": 4, "I32": 4, "U32": 4, "BF16": 2, "F16": 2, "I16": 2, "U16": 2}.get(dtype, 1)
    if len(data) % width:
        width = 1
    planes = np.frombuffer(data, dtype=np.uint8).reshape(-1, width)
    return [planes[:, i] for i in range(width)]


def tensor_symbols(dtype, data):
    """The symbol streams of a tensor's bytes (see the module doc)."""
    if dtype in ("F32", "I32", "U32") and len(data) % 4 == 0:
        words = np.frombuffer(data, dtype="<u4")
        return [words >> 16, words & 0xFFFF]
    if dtype in ("BF16", "F16", "I16", "U16") and len(data) % 2 == 0:
        return [np.frombuffer(data, dtype="<u2")]
    return [np.frombuffer(data, dtype=np.uint8)]


def reference(path, tensor_bytes):
    """The file's size and the reference's bytes, `tensor_bytes(dtype, data)` a tensor's."""
    with open(path, "rb") as f:
        raw = f.read()
    header_len = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + header_len])
    start = 8 + header_len
    total = float(start)
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        data = raw[start + begin : start + end]
        if data:
            total += tensor_bytes(info["dtype"], data)
    return len(raw), total


def order0(corrected):
    return lambda dtype, data: sum(entropy_bytes(s, corrected) for s in tensor_symbols(dtype, data))


def order1(dtype, data):
    return sum(order1_plane_bytes(plane) for plane in byte_planes(dtype, data))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: references.py MODEL.safetensors")
    path = sys.argv[1]
    fields = []
    for label, tensor_bytes in (("reference", order0(False)), ("corrected", order0(True)), ("order1", order1)):
        size, total = reference(path, tensor_bytes)
        fields += [f"{label}={size / total:.4f}", f"{label}_bytes={total:.0f}"]
    print(" ".join(fields))


if __name__ == "__main__":
    main()
