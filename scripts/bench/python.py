#!/usr/bin/env python3
"""Times loading each corpus checkpoint into torch: `brevis.torch.load_file` of its
archive against `safetensors.torch.load_file` of the original and of the file shown
through `brevis-mount`, with the page cache warm and dropped (cold). Prints a markdown
table; medians of --runs runs, milliseconds of wall time to load and read a byte of
every page of every tensor (safetensors maps the file and reads it lazily).

usage: bench_python.py [--runs 3] [--corpus DIR] [--brevis target/release]
Needs torch, safetensors and the brevis package (scripts/test/python.sh builds it into
a venv); the cold and mount columns need root (drop_caches) and /dev/fuse.
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import time

import brevis.torch
import torch
from safetensors.torch import load_file as st_load


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3\n")


def touched(tensors):
    """Reads a byte of every page of every tensor: safetensors maps the file and
    faults pages in lazily, so a load is only done once its tensors are read."""
    for t in tensors.values():
        t.reshape(-1).view(torch.uint8)[::4096].sum()


def timed(fn, cold):
    if cold:
        drop_caches()
    start = time.perf_counter()
    touched(fn())
    return (time.perf_counter() - start) * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--corpus", default=os.environ.get(
        "BREVIS_CORPUS", os.path.expanduser("~/.cache/brevis-corpus")))
    ap.add_argument("--brevis", default=os.path.join(
        os.path.dirname(__file__), "..", "..", "target", "release"))
    args = ap.parse_args()
    root = os.geteuid() == 0
    names = sorted(os.listdir(args.corpus))
    work = tempfile.mkdtemp()
    archives, point = os.path.join(work, "archives"), os.path.join(work, "mnt")
    os.makedirs(archives), os.makedirs(point)
    print("| file | MB | safetensors warm | brevis warm | safetensors cold | brevis cold "
          "| safetensors through a fresh mount (cold) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in names:
        src = os.path.join(args.corpus, name, "model.safetensors")
        if not os.path.exists(src):
            continue
        brv = os.path.join(archives, f"{name}.brv")
        brevis.pack(src, brv, force=True)
        mb = os.path.getsize(src) / 1e6
        cols = {k: [] for k in ("sw", "bw", "sc", "bc", "mc")}
        for _ in range(args.runs):
            st_load(src), brevis.torch.load_file(brv)  # warm both
            cols["sw"].append(timed(lambda: st_load(src), False))
            cols["bw"].append(timed(lambda: brevis.torch.load_file(brv), False))
            if root:
                cols["sc"].append(timed(lambda: st_load(src), True))
                cols["bc"].append(timed(lambda: brevis.torch.load_file(brv), True))
                subprocess.run([os.path.join(args.brevis, "brevis-mount"), archives, point],
                               check=True)
                try:
                    shown = os.path.join(point, f"{name}.safetensors")
                    cols["mc"].append(timed(lambda: st_load(shown), True))
                finally:
                    subprocess.run(["umount", point], check=True)
        med = {k: (f"{statistics.median(v):.0f}" if v else "n/a") for k, v in cols.items()}
        print(f"| {name} | {mb:.1f} | {med['sw']} | {med['bw']} | {med['sc']} | {med['bc']} "
              f"| {med['mc']} |")


if __name__ == "__main__":
    main()
