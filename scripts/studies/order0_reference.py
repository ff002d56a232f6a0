#!/usr/bin/env python3
"""Per-tensor order-0 references for a safetensors file, as ratios (original / bytes).

The reference codes each tensor's symbols order-0 with the tensor's own histogram,
code tables not counted, plus the header verbatim. Symbols: the 16-bit words of a
16-bit dtype, the high and low 16-bit halves of a 32-bit dtype (two histograms), and
bytes otherwise.

Such an "empirical entropy" is below what any coder can reach on a short stream: a
histogram of n samples fits their own noise, by about (distinct - 1) / (2 ln 2) bits
(the Miller-Madow correction). A uniformly random 16-bit half of a 147,456-word
tensor scores 15.64 bits, not 16. So the script prints both:

    reference=R reference_bytes=RB corrected=C corrected_bytes=CB

R (RB bytes): the order-0 reference; C (CB bytes): the same with each histogram's
expected shortfall added back, an estimate of what a coder that knew each tensor's
true distribution (and paid nothing for its tables) would need.

    python3 scripts/studies/order0_reference.py MODEL.safetensors
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


def tensor_symbols(dtype, data):
    """The symbol streams of a tensor's bytes (see the module doc)."""
    if dtype in ("F32", "I32", "U32") and len(data) % 4 == 0:
        words = np.frombuffer(data, dtype="<u4")
        return [words >> 16, words & 0xFFFF]
    if dtype in ("BF16", "F16", "I16", "U16") and len(data) % 2 == 0:
        return [np.frombuffer(data, dtype="<u2")]
    return [np.frombuffer(data, dtype=np.uint8)]


def reference(path, corrected):
    """The file's size and the reference's bytes."""
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
            total += sum(entropy_bytes(s, corrected) for s in tensor_symbols(info["dtype"], data))
    return len(raw), total


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: order0_reference.py MODEL.safetensors")
    path = sys.argv[1]
    fields = []
    for label, corrected in (("reference", False), ("corrected", True)):
        size, total = reference(path, corrected)
        fields += [f"{label}={size / total:.4f}", f"{label}_bytes={total:.0f}"]
    print(" ".join(fields))


if __name__ == "__main__":
    main()
