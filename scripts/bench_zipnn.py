#!/usr/bin/env python3
"""Measure ZipNN (pip package `zipnn`) on one .safetensors file, for scripts/bench.sh.

usage: bench_zipnn.py FILE [--runs N] [--threads T ...]

Two ways of using ZipNN are measured, each with every thread count given:
  zipnn-tensor  what ZipNN recommends for safetensors files (its zipnn_compress_safetensors.py):
                every floating-point tensor compressed on its own with its own dtype and
                method HUFFMAN, kept raw when that does not shrink it; other tensors and the
                JSON header stored raw. Size = 8 + header + sum of the stored tensor payloads
                (ZipNN's own .znn.safetensors adds a little metadata on top of that).
  zipnn-file    the whole file's bytes in one ZipNN byte-mode call, bytearray_dtype set to
                the dtype that holds most of the file's bytes, other settings default.

Only the compress()/decompress() calls are timed (no file reads or writes), each the
median of N runs; every run's round trip is checked against the original bytes.
ZipNN reorders its input buffer in place, so every call gets a fresh copy (not timed).

Output, one line per measurement (all on stdout):
  RESULT tool=zipnn-tensor threads=1 orig=90868376 size=67000000 pack_s=0.51 unpack_s=0.12 ok=1
or, if ZipNN cannot be imported or fails:
  ERROR tool=zipnn reason=<text without newlines>
"""
import argparse
import json
import statistics
import struct
import sys
import time
import warnings

# ZipNN's dtype names for the safetensors dtypes it compresses as floating point.
ZIPNN_DTYPE = {
    "F32": "float32",
    "BF16": "bfloat16",
    "F16": "float16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}


def say(line):
    print(line, flush=True)


def split_safetensors(blob):
    (hlen,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8 : 8 + hlen])
    header.pop("__metadata__", None)
    base = 8 + hlen
    spans = sorted((info["data_offsets"][0], info["data_offsets"][1], info["dtype"]) for info in header.values())
    return base, spans


def median_time(fn, runs):
    times = []
    result = None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def bench_file(ZipNN, blob, spans, threads, runs):
    weight = {}
    for lo, hi, dtype in spans:
        weight[dtype] = weight.get(dtype, 0) + (hi - lo)
    major = max((d for d in weight if d in ZIPNN_DTYPE), key=lambda d: weight[d], default=None)
    if major is None:
        raise RuntimeError("no floating-point tensors")
    kw = dict(input_format="byte", bytearray_dtype=ZIPNN_DTYPE[major], threads=threads)
    pack_times, unpack_times, size = [], [], 0
    for _ in range(runs):
        src = bytearray(blob)
        z = ZipNN(**kw)
        t0 = time.perf_counter()
        packed = z.compress(src)
        pack_times.append(time.perf_counter() - t0)
        size = len(packed)
        packed = bytes(packed)
        z = ZipNN(**kw)
        t0 = time.perf_counter()
        out = z.decompress(bytearray(packed))
        unpack_times.append(time.perf_counter() - t0)
        if bytes(out) != blob:
            return size, statistics.median(pack_times), statistics.median(unpack_times), False
    return size, statistics.median(pack_times), statistics.median(unpack_times), True


def bench_tensor(ZipNN, blob, base, spans, threads, runs):
    # One ZipNN object per dtype, made before timing (construction is not compression).
    packers = {d: ZipNN(input_format="byte", bytearray_dtype=ZIPNN_DTYPE[d], method="HUFFMAN", threads=threads)
               for _, _, d in spans if d in ZIPNN_DTYPE}
    unpacker = ZipNN(input_format="byte", method="HUFFMAN", threads=threads)
    pack_times, unpack_times, size = [], [], 0
    for _ in range(runs):
        pieces = [bytearray(blob[base + lo : base + hi]) for lo, hi, _ in spans]
        stored = []  # (compressed?, payload)
        t0 = time.perf_counter()
        for (lo, hi, dtype), piece in zip(spans, pieces):
            if dtype in packers and len(piece) > 0:
                try:
                    c = packers[dtype].compress(piece)
                except Exception:  # tiny tensors, e.g. scalar scales: stored raw
                    c = None
                if c is not None and len(c) < hi - lo:
                    stored.append((True, c))
                    continue
            stored.append((False, blob[base + lo : base + hi]))
        pack_times.append(time.perf_counter() - t0)
        size = base + sum(len(p) for _, p in stored)
        inputs = [bytearray(p) if comp else p for comp, p in stored]
        t0 = time.perf_counter()
        restored = [unpacker.decompress(p) if comp else p for (comp, _), p in zip(stored, inputs)]
        out = b"".join([blob[:base]] + [bytes(r) for r in restored])
        unpack_times.append(time.perf_counter() - t0)
        if out != blob:
            return size, statistics.median(pack_times), statistics.median(unpack_times), False
    return size, statistics.median(pack_times), statistics.median(unpack_times), True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    try:
        from zipnn import ZipNN
    except Exception as exc:  # not installed, or torch/extension broken
        say(f"ERROR tool=zipnn reason={type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return 0
    with open(args.file, "rb") as fh:
        blob = fh.read()
    base, spans = split_safetensors(blob)
    for name, run in (("zipnn-tensor", lambda t: bench_tensor(ZipNN, blob, base, spans, t, args.runs)),
                      ("zipnn-file", lambda t: bench_file(ZipNN, blob, spans, t, args.runs))):
        for threads in args.threads:
            try:
                size, pack_s, unpack_s, ok = run(threads)
            except Exception as exc:
                say(f"ERROR tool={name} threads={threads} reason={type(exc).__name__}: {' '.join(str(exc).split())}")
                continue
            say(f"RESULT tool={name} threads={threads} orig={len(blob)} size={size} "
                f"pack_s={pack_s:.6f} unpack_s={unpack_s:.6f} ok={int(ok)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
