#!/usr/bin/env python3
"""One round of the PyPI peers (ZipNN, lmzip, z4ai, glyd) on one .safetensors file, for
scripts/bench.sh.

usage: bench_peers.py FILE --threads T --work DIR [--no-pin] TOOL...

TOOL is one or more of zipnn-tensor, zipnn-file, lmzip, z4ai, glyd. Each packs the file
once and unpacks it once with T threads and checks that the result equals the original.
bench.sh starts one process per peer, thread count and round, so that the rounds of all
tools interleave and no thread pool a library made for one thread count is reused for the
other.

How each is called (every one at its default level; T is the thread count):
  zipnn-tensor  ZipNN's recipe for safetensors (its zipnn_compress_safetensors.py): each
                floating-point tensor compressed on its own, ZipNN(input_format="byte",
                bytearray_dtype=<its dtype>, method="HUFFMAN", threads=T), kept raw when
                that does not shrink it; other tensors and the JSON header stored raw.
                Size = 8 + header + the stored tensor payloads (ZipNN's .znn.safetensors
                adds a little metadata on top). In memory.
  zipnn-file    the whole file's bytes in one ZipNN(input_format="byte", bytearray_dtype=
                <dtype of most bytes>, threads=T) call. In memory.
  lmzip         lmz.compress(FILE, DIR/x.lmz, workers=T) / lmz.decompress(..., workers=T):
                its API is file to file; the output is fsync'd inside the timing, as
                brevis fsyncs its outputs, and the restored file is compared with the
                original after the timing.
  z4ai          z4ai.safetensors.compress_bytes(blob, workers=T, threads=1 if T == 1 else
                0) / decompress_bytes(frame, workers=T): its per-tensor safetensors
                container (ZSTN). In memory.
  glyd          glyd.compress(blob, threads=T) at the Python API's default level ("max") /
                glyd.decompress(frame), which has no thread argument. The whole file in
                one call. In memory.
In memory means: only the compress/decompress calls are timed (no file read or write),
round trips checked against the original bytes in memory.

Threads: with T == 1 the process first pins itself to one CPU (os.sched_setaffinity), so
that the thread pools z4ai sizes by os.cpu_count() and glyd's decompressor (which has no
thread argument) get one core; bench.sh also sets OMP_NUM_THREADS, MKL_NUM_THREADS and
OPENBLAS_NUM_THREADS to 1 then. With T > 1, or --no-pin, nothing is pinned.

Output, one line per tool (stdout):
  RESULT tool=z4ai threads=1 orig=90868376 size=67000000 pack_s=0.51 unpack_s=0.12 pack_cpu=0.50 unpack_cpu=0.12 ok=1
  ERROR tool=z4ai reason=<text without newlines>       (cannot be imported, or failed)
pack_cpu/unpack_cpu are the process's CPU seconds (all threads) during the timed calls.
"""
import argparse
import json
import os
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


def one_line(exc):
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def split_safetensors(blob):
    (hlen,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8 : 8 + hlen])
    header.pop("__metadata__", None)
    base = 8 + hlen
    spans = sorted((info["data_offsets"][0], info["data_offsets"][1], info["dtype"]) for info in header.values())
    return base, spans


class Clock:
    """Wall and process CPU seconds of the code inside `with`."""

    def __enter__(self):
        self.w, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *_):
        self.wall = time.perf_counter() - self.w
        self.cpu = time.process_time() - self.c


# Each runner returns (size, pack Clock, unpack Clock, round trip equal).

def run_zipnn_file(blob, threads, work):
    from zipnn import ZipNN

    base, spans = split_safetensors(blob)
    weight = {}
    for lo, hi, dtype in spans:
        weight[dtype] = weight.get(dtype, 0) + (hi - lo)
    major = max((d for d in weight if d in ZIPNN_DTYPE), key=lambda d: weight[d], default=None)
    if major is None:
        raise RuntimeError("no floating-point tensors")
    kw = dict(input_format="byte", bytearray_dtype=ZIPNN_DTYPE[major], threads=threads)
    src = bytearray(blob)  # ZipNN reorders its input in place: a fresh copy, not timed
    z = ZipNN(**kw)
    with Clock() as p:
        packed = z.compress(src)
    size = len(packed)
    packed = bytearray(bytes(packed))
    z = ZipNN(**kw)
    with Clock() as u:
        out = z.decompress(packed)
    return size, p, u, bytes(out) == blob


def run_zipnn_tensor(blob, threads, work):
    from zipnn import ZipNN

    base, spans = split_safetensors(blob)
    # One ZipNN object per dtype, made before timing (construction is not compression).
    packers = {d: ZipNN(input_format="byte", bytearray_dtype=ZIPNN_DTYPE[d], method="HUFFMAN", threads=threads)
               for _, _, d in spans if d in ZIPNN_DTYPE}
    unpacker = ZipNN(input_format="byte", method="HUFFMAN", threads=threads)
    pieces = [bytearray(blob[base + lo : base + hi]) for lo, hi, _ in spans]
    stored = []  # (compressed?, payload)
    with Clock() as p:
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
    size = base + sum(len(x) for _, x in stored)
    inputs = [bytearray(x) if comp else x for comp, x in stored]
    with Clock() as u:
        restored = [unpacker.decompress(x) if comp else x for (comp, _), x in zip(stored, inputs)]
        out = b"".join([blob[:base]] + [bytes(r) for r in restored])
    return size, p, u, out == blob


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def run_lmzip(blob, threads, work, src):
    import lmz

    packed = os.path.join(work, "peer.lmz")
    restored = os.path.join(work, "peer.restored")
    for f in (packed, restored):
        if os.path.exists(f):
            os.unlink(f)
    os.sync()  # earlier runs' writeback is not this run's
    with Clock() as p:
        lmz.compress(src, packed, workers=threads)
        fsync_path(packed)
    size = os.path.getsize(packed)
    os.sync()
    with Clock() as u:
        lmz.decompress(packed, restored, workers=threads)
        fsync_path(restored)
    with open(restored, "rb") as fh:
        ok = fh.read() == blob
    os.unlink(packed)
    os.unlink(restored)
    return size, p, u, ok


def run_z4ai(blob, threads, work):
    from z4ai import safetensors as zst

    with Clock() as p:
        frame = zst.compress_bytes(blob, workers=threads, threads=1 if threads == 1 else 0)
    with Clock() as u:
        out = zst.decompress_bytes(frame, workers=threads)
    return len(frame), p, u, out == blob


def run_glyd(blob, threads, work):
    import glyd

    with Clock() as p:
        frame = glyd.compress(blob, threads=threads)
    with Clock() as u:
        out = glyd.decompress(frame)
    return len(frame), p, u, out == blob


RUNNERS = {
    "zipnn-tensor": run_zipnn_tensor,
    "zipnn-file": run_zipnn_file,
    "lmzip": run_lmzip,
    "z4ai": run_z4ai,
    "glyd": run_glyd,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("tools", nargs="+", choices=sorted(RUNNERS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", required=True)
    ap.add_argument("--no-pin", action="store_true", help="do not pin a 1-thread run to one CPU")
    args = ap.parse_args()
    if args.threads == 1 and not args.no_pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    warnings.filterwarnings("ignore")
    with open(args.file, "rb") as fh:
        blob = fh.read()
    for tool in args.tools:
        try:
            if tool == "lmzip":
                size, p, u, ok = run_lmzip(blob, args.threads, args.work, args.file)
            else:
                size, p, u, ok = RUNNERS[tool](blob, args.threads, args.work)
        except Exception as exc:  # not installed, or failed on this file
            say(f"ERROR tool={tool} threads={args.threads} reason={one_line(exc)}")
            continue
        say(f"RESULT tool={tool} threads={args.threads} orig={len(blob)} size={size} "
            f"pack_s={p.wall:.6f} unpack_s={u.wall:.6f} pack_cpu={p.cpu:.6f} unpack_cpu={u.cpu:.6f} ok={int(ok)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
