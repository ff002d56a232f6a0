#!/usr/bin/env python3
"""Loads a whole checkpoint one way and prints what it cost: wall seconds to
every tensor in memory with every page touched (loaders may map the file
lazily), CPU seconds (user + system, this process), and peak RSS (MB).

    bench_model_load.py WAY PATH  ->  prints "<wall> <cpu> <peak_rss_mb> <tensors>"

WAY: safetensors-torch, safetensors-numpy (PATH a .safetensors file, local or
through a mount), brevis-torch, brevis-numpy (PATH a .brv archive),
transformers (PATH a model folder: AutoModelForCausalLM.from_pretrained in
BF16, every parameter touched). Python's start-up and imports are not timed."""
import resource
import sys
import time


def loader(way):
    if way == "transformers":
        import torch
        from transformers import AutoModelForCausalLM

        def load_model(path):
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
            return dict(model.named_parameters())

        return load_model, lambda t: int(t.detach().reshape(-1).view(torch.uint8)[::4096].sum())
    framework = way.split("-")[1]
    if way.startswith("safetensors-"):
        module = __import__(f"safetensors.{framework}", fromlist=["load_file"])
    else:
        module = __import__(f"brevis.{framework}", fromlist=["load_file"])
    if framework == "torch":
        import torch

        def touch(t):
            return int(t.reshape(-1).view(torch.uint8)[::4096].sum())
    else:
        import numpy as np

        def touch(a):
            return int(a.reshape(-1).view(np.uint8)[::4096].sum())

    return module.load_file, touch


def main():
    way, path = sys.argv[1], sys.argv[2]
    load_file, touch = loader(way)
    cpu = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    start, cpu0 = time.perf_counter(), cpu()
    tensors = load_file(path)
    for t in tensors.values():
        touch(t)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{wall:.3f} {cpu() - cpu0:.3f} {peak:.0f} {len(tensors)}")


if __name__ == "__main__":
    main()
