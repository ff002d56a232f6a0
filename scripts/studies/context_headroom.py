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

With --low, the low byte of each element of every 16-bit float tensor of
at least 4096 elements instead (a sibling field: the high byte is decoded
first), in the same chunks:

  order 0   the low byte on its own
  high      within each class of its own element's high byte (256)
  top 3     only its top 3 bits within each class of the high byte, the
            other 5 bits at 5 bits each (8-symbol tables)

Each is given in bytes: the entropy of the counts the chunk itself gives,
corrected for the noise a histogram fits (Miller-Madow), tables not
counted. It is what the context could save at most before paying for its
tables: a table per class in every chunk unless they are shared (256 for
previous, above, high and top 3, 8 for rows and columns). Where classes see
few symbols each (rare high bytes: the tails), the correction falls short
of what coding them costs, so the figure is a bound from above.

  python3 scripts/studies/context_headroom.py [--low] MODEL.safetensors

Needs numpy.
"""

import json
import struct
import sys

import numpy as np

CHUNK = 256 * 1024
DTYPES = {"F32": np.uint32, "F16": np.uint16, "BF16": np.uint16}
CLASSES = 8


def tensors(path, low):
    """(name, row length, words, bytes a word) of the tensors measured: 2-D
    float tensors of 1 MiB or more, or with `low` 16-bit float tensors of
    4096 words or more."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] not in DTYPES:
            continue
        start, end = t["data_offsets"]
        words = np.frombuffer(data[8 + n + start : 8 + n + end], DTYPES[t["dtype"]])
        if low and words.itemsize == 2 and len(words) >= 4096:
            yield name, t["shape"][-1], words.astype(np.int64), 2
        elif not low and len(t["shape"]) == 2 and end - start >= 1 << 20:
            yield name, t["shape"][1], words.astype(np.int64), words.itemsize


def bits(symbols, context, contexts, alphabet=256):
    """Order-0 bits of `symbols` (below `alphabet`) within each class of
    `context`, plus each histogram's expected shortfall, (distinct - 1) /
    (2 ln 2) bits (Miller-Madow): a histogram fits its own sample's noise,
    more so the more contexts split the sample."""
    counts = np.bincount(context * alphabet + symbols, minlength=contexts * alphabet)
    counts = counts.reshape(contexts, alphabet).astype(np.float64)
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


def chunk_costs(words, size, row_len, start):
    """Bytes of one chunk's high bytes: order 0 and within each context."""
    high = words >> (8 * size - 8)
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


def low_costs(words, size, row_len, start):
    """Bytes of one chunk's low bytes: order 0, within each class of the
    element's high byte, and its top 3 bits so (the rest at 5 bits each)."""
    high, low = words >> 8, words & 0xFF
    zero = np.zeros(len(low), np.int64)
    top = bits(low >> 5, high, 256, alphabet=8) + 5 * len(low)
    return np.array([bits(low, zero, 1), bits(low, high, 256), top]) / 8


def main():
    args = sys.argv[1:]
    low = args[:1] == ["--low"]
    if len(args) != 1 + low:
        sys.exit(__doc__)
    if low:
        costs_of, columns = low_costs, ["high", "top 3"]
    else:
        costs_of, columns = chunk_costs, ["previous", "above", "rows", "columns"]
    total = np.zeros(1 + len(columns))
    print(f"{'tensor':<48} {'order 0':>10} " + " ".join(f"{c:>9}" for c in columns))
    for name, row_len, words, size in tensors(args[-1], low):
        per = CHUNK // size
        costs = sum(costs_of(words[s : s + per], size, row_len, s) for s in range(0, len(words), per))
        total += costs
        changes = " ".join(f"{100 * (c / costs[0] - 1):+8.2f}%" for c in costs[1:])
        print(f"{name[:48]:<48} {costs[0]:10.0f} {changes}")
    if not total[0]:
        sys.exit("no tensor measured")
    changes = " ".join(f"{100 * (c / total[0] - 1):+8.2f}%" for c in total[1:])
    print(f"{'all (bytes saved: ' + ', '.join(f'{total[0] - c:.0f}' for c in total[1:]) + ')':<48} {total[0]:10.0f} {changes}")


if __name__ == "__main__":
    main()
