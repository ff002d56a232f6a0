#!/usr/bin/env python3
"""How much a context could save on the high byte of a checkpoint's matrices.

For every 2-D float tensor of at least 1 MiB in a .safetensors file, the high
byte of each element (sign and exponent bits: the field whose statistics
change with a weight's scale) is coded order-0 in chunks of 256 KiB, and
against that, order-0 within each class of a context the decoder would
already have:

  previous  the high byte of the previous element in the row
  above     the high byte of the element one row above, same column
  rows      the row's class: the chunk's rows ranked by their high bytes'
            sum and cut into 8 classes of equal count (what a Partition does)
  columns   the column's class, likewise over the chunk's columns

Each is given in bytes: the entropy of the counts the chunk itself gives,
corrected for the noise a histogram fits (Miller-Madow), tables not
counted. It is what the context could save at most before paying for its
tables: 256 tables for previous and above, 8 for rows and columns, in every
chunk unless they are shared.

  python3 scripts/context_headroom.py MODEL.safetensors

Needs numpy.
"""

import json
import struct
import sys

import numpy as np

CHUNK = 256 * 1024
DTYPES = {"F32": np.uint32, "F16": np.uint16, "BF16": np.uint16}
CLASSES = 8


def tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] not in DTYPES or len(t["shape"]) != 2:
            continue
        start, end = t["data_offsets"]
        if end - start < 1 << 20:
            continue
        words = np.frombuffer(data[8 + n + start : 8 + n + end], DTYPES[t["dtype"]])
        bits = 8 * words.itemsize
        yield name, t["shape"][1], (words >> (bits - 8)).astype(np.int64), words.itemsize


def bits(symbols, context, contexts):
    """Order-0 bits of `symbols` within each class of `context`, plus each
    histogram's expected shortfall, (distinct - 1) / (2 ln 2) bits
    (Miller-Madow): a histogram fits its own sample's noise, more so the more
    contexts split the sample."""
    counts = np.bincount(context * 256 + symbols, minlength=contexts * 256)
    counts = counts.reshape(contexts, 256).astype(np.float64)
    totals = counts.sum(axis=1, keepdims=True)
    nonzero = counts > 0
    entropy = -(counts[nonzero] * np.log2((counts / np.maximum(totals, 1))[nonzero])).sum()
    used = (totals > 0).sum()
    return entropy + (nonzero.sum() - used) / (2 * np.log(2))


def ranked_classes(keys, n):
    """Class 0..CLASSES-1 of each of `n` items, by rank of `keys`."""
    order = np.argsort(keys, kind="stable")
    classes = np.empty(n, np.int64)
    classes[order] = np.arange(n) * CLASSES // n
    return classes


def chunk_costs(high, row_len, start):
    """Bytes of one chunk's high bytes: order 0 and within each context."""
    n = len(high)
    index = np.arange(start, start + n)
    column, row = index % row_len, index // row_len - start // row_len
    rows = row[-1] + 1
    previous = np.where(column == 0, 0, np.concatenate([[0], high[:-1]]))
    above = np.where(index - start >= row_len, np.roll(high, row_len), 0)
    row_sums = np.bincount(row, weights=high, minlength=rows)
    column_sums = np.bincount(column, weights=high, minlength=row_len)
    row_class = ranked_classes(row_sums, rows)[row]
    column_class = ranked_classes(column_sums, row_len)[column]
    zero = np.zeros(n, np.int64)
    return np.array(
        [
            bits(high, zero, 1),
            bits(high, previous, 256),
            bits(high, above, 256),
            bits(high, row_class, CLASSES),
            bits(high, column_class, CLASSES),
        ]
    ) / 8


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    total = np.zeros(5)
    print(f"{'tensor':<48} {'order 0':>10} {'previous':>9} {'above':>9} {'rows':>9} {'columns':>9}")
    for name, row_len, high, size in tensors(sys.argv[1]):
        per = CHUNK // size
        costs = sum(chunk_costs(high[s : s + per], row_len, s) for s in range(0, len(high), per))
        total += costs
        changes = " ".join(f"{100 * (c / costs[0] - 1):+8.2f}%" for c in costs[1:])
        print(f"{name[:48]:<48} {costs[0]:10.0f} {changes}")
    if not total[0]:
        sys.exit("no 2-D float tensor of 1 MiB or more")
    changes = " ".join(f"{100 * (c / total[0] - 1):+8.2f}%" for c in total[1:])
    print(f"{'all (bytes saved: ' + ', '.join(f'{total[0] - c:.0f}' for c in total[1:]) + ')':<48} {total[0]:10.0f} {changes}")


if __name__ == "__main__":
    main()
