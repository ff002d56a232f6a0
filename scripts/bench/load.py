"""Times loading a safetensors file with the unmodified loader and touching every
page of every tensor (one byte per 4 KiB), and prints the seconds: `safetensors.torch.load_file`
when torch is installed, else `safetensors.numpy.load_file` (which cannot load
BF16 or FP8 files). Loaders may map the file lazily, so touching the pages is timed
too; Python's start-up and imports are not.

usage: python3 bench_load.py FILE [N]  ->  prints "<framework> <seconds> <tensors>"
                                           or "none <reason>"
With N, the file is loaded once untimed (so that nothing of the loader or the
file is read from disk inside the timing), then N times, and the median printed.
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


def timed_load(path, load_file, touch):
    """Seconds to load `path` and touch every page, and the tensor count."""
    start = time.perf_counter()
    tensors = load_file(path)
    for t in tensors.values():
        touch(t)
    return time.perf_counter() - start, len(tensors)


def main():
    path = sys.argv[1]
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    framework, load_file, touch = loader()
    try:
        seconds, count = timed_load(path, load_file, touch)
    except Exception as e:  # numpy has no bfloat16 or float8
        print(f"none {framework} cannot load it: {e}".replace("\n", " "))
        return 0
    if repeat > 0:
        times = sorted(timed_load(path, load_file, touch)[0] for _ in range(repeat))
        seconds = times[len(times) // 2]
    print(f"{framework} {seconds:.6f} {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
