#!/usr/bin/env python3
"""Vocabulary fine-tunes against their base: sizes and decode speed.

    scripts/bench/rows.py BREVIS WORKDIR [MODEL.safetensors ...]

For each model (by default minilm-bf16 and wordllama-f16 of the corpus,
and a 250,000 x 1024 BF16 embedding made here), writes two fine-tunes of it
into WORKDIR: `extended` (5% new rows appended to its largest matrix, the
embedding, and 1% of the words of its next largest moved by one unit) and
`pruned` (60% of the embedding's rows, shuffled). Each is packed alone and
against the base's archive (`brevis pack --base`); prints the sizes, the
embedding's share, and the seconds of `brevis pack --base` and of `brevis
unpack` of both archives (the best of three), with the commands.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

RAW = {"BF16": np.uint16, "F16": np.uint16, "F32": np.uint32, "F64": np.uint64}


def read(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", None)
    tensors = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        raw = np.frombuffer(data[a:b], dtype=RAW.get(t["dtype"], np.uint8)).copy()
        tensors[name] = (t["dtype"], t["shape"], raw)
    return meta, tensors


def write(path, meta, tensors):
    header, blobs, at = {}, [], 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, (dtype, shape, raw) in tensors.items():
        b = raw.tobytes()
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def new_rows(dtype, rows, cols, rng, scale):
    """Weights like an embedding's, as the raw words of `dtype`."""
    w = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    if dtype == "BF16":
        return (w.view(np.uint32) >> 16).astype(np.uint16).ravel()
    if dtype == "F16":
        return w.astype(np.float16).view(np.uint16).ravel()
    return w.view(np.uint32).ravel()


def synthetic(path):
    rng = np.random.default_rng(1)
    emb = new_rows("BF16", 250_000, 1024, rng, 0.02)
    norm = new_rows("BF16", 1, 1024, rng, 1.0)
    write(path, None, {
        "model.embed_tokens.weight": ("BF16", [250_000, 1024], emb),
        "model.norm.weight": ("BF16", [1024], norm),
    })


def fine_tunes(base, workdir, stem):
    meta, tensors = read(base)
    mats = sorted((t[2].size, n) for n, t in tensors.items() if len(t[1]) == 2)
    embed = mats[-1][1]
    dtype, shape, raw = tensors[embed]
    rows, cols = shape
    rng = np.random.default_rng(2)
    grid = raw.reshape(rows, cols)
    added = new_rows(dtype, rows // 20, cols, rng, 0.02).reshape(-1, cols)
    extended = dict(tensors)
    extended[embed] = (dtype, [rows + len(added), cols], np.concatenate([grid, added]).ravel())
    others = sorted((t[2].size, n) for n, t in tensors.items() if n != embed and t[0] in RAW)
    if others:
        dt, sh, r = tensors[others[-1][1]]
        moved = r.copy()
        pick = rng.random(moved.size) < 0.01
        moved[pick] += 1
        extended[others[-1][1]] = (dt, sh, moved)
    keep = rng.permutation(rows)[: rows * 3 // 5]
    pruned = dict(tensors)
    pruned[embed] = (dtype, [len(keep), cols], grid[keep].ravel())
    out = {}
    for name, t in [("extended", extended), ("pruned", pruned)]:
        out[name] = os.path.join(workdir, f"{stem}-{name}.safetensors")
        write(out[name], meta, t)
    return embed, out


def run(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    brevis, workdir = sys.argv[1], sys.argv[2]
    models = sys.argv[3:]
    os.makedirs(workdir, exist_ok=True)
    if not models:
        corpus = os.environ.get("BREVIS_CORPUS", os.path.expanduser("~/.cache/brevis-corpus"))
        models = [os.path.join(corpus, m, "model.safetensors") for m in ("minilm-bf16", "wordllama-f16")]
        models.append(os.path.join(workdir, "synthetic-250k.safetensors"))
        synthetic(models[-1])
    print("| model | fine-tune | original | alone | against base | of it the embedding | pack --base s | unpack alone s | unpack s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for model in models:
        stem = os.path.basename(os.path.dirname(model)) if model.endswith("/model.safetensors") else os.path.basename(model)[:-12]
        base_brv = os.path.join(workdir, f"{stem}-base.brv")
        run([brevis, "pack", "-q", "--force", model, base_brv])
        embed, tunes = fine_tunes(model, workdir, stem)
        for name, src in tunes.items():
            alone = src[:-12] + ".alone.brv"
            based = src[:-12] + ".brv"
            run([brevis, "pack", "-q", "--force", src, alone])
            packed = run([brevis, "pack", "-q", "--force", "--base", base_brv, src, based])
            out = src[:-12] + ".out"
            best = lambda brv: min(run([brevis, "unpack", "-q", "--force", brv, out]) for _ in range(3))
            t_alone, t_based = best(alone), best(based)
            subprocess.run(["cmp", src, out], check=True)
            os.remove(out)
            inspect = json.loads(subprocess.run([brevis, "inspect", "--json", based], check=True, capture_output=True).stdout)
            emb = next(t for t in inspect["tensors"] if t["name"] == embed)
            size = lambda p: os.path.getsize(p)
            print(f"| {stem} | {name} | {size(src):,} | {size(alone):,} | {size(based):,} | "
                  f"{emb['bytes_out']:,} of {emb['bytes_in']:,} | {packed:.1f} | {t_alone:.2f} | {t_based:.2f} |")
            os.remove(alone)
    shutil.rmtree(workdir) if os.environ.get("ROWS_CLEAN") else None


if __name__ == "__main__":
    main()
