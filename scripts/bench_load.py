"""Times loading a safetensors file with the unmodified loader and touching every
page of every tensor (one byte per 4 KiB), and prints the seconds: `safetensors.torch.load_file`
when torch is installed, else `safetensors.numpy.load_file` (which cannot load
BF16 or FP8 files). Loaders may map the file lazily, so touching the pages is timed
too; Python's start-up and imports are not.

usage: python3 bench_load.py FILE  ->  prints "<framework> <seconds> <tensors>"
                                       or "none <reason>"
"""
import sys
import time


def loader():
    try:
        import torch
        from safetensors.torch import load_file

        def touch(t):
            return int(t.reshape(-1).view(torch.uint8)[::4096].sum())

        return "torch", load_file, touch
    except ImportError:
        import numpy as np
        from safetensors.numpy import load_file

        def touch(a):
            return int(a.reshape(-1).view(np.uint8)[::4096].sum())

        return "numpy", load_file, touch


def main():
    path = sys.argv[1]
    framework, load_file, touch = loader()
    start = time.perf_counter()
    try:
        tensors = load_file(path)
    except Exception as e:  # numpy has no bfloat16 or float8
        print(f"none {framework} cannot load it: {e}".replace("\n", " "))
        return 0
    for t in tensors.values():
        touch(t)
    seconds = time.perf_counter() - start
    print(f"{framework} {seconds:.6f} {len(tensors)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
