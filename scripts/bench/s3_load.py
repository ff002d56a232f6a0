"""One timed load of a checkpoint from object storage into torch tensors in
memory, for scripts/bench/s3_load.sh. Prints `seconds tensors bytes digest`:
the wall time to every tensor in memory, how many, their bytes, and a digest
of their names and bytes (taken after the clock stops) that every loader of
the same checkpoint must agree on. Every 4 KiB page of every tensor is read
before the clock stops, so that a tensor mapped from a file counts as loaded
only once its bytes are in memory.

    s3_load.py runai URL            runai-model-streamer, the raw .safetensors
    s3_load.py boto3 URL DIR        download (boto3) into DIR, then safetensors.torch.load_file
    s3_load.py file PATH            safetensors.torch.load_file (of a file in a brevis mount)
    s3_load.py brevis URL           brevis.torch.load_file of the .brv archive
"""

import hashlib
import os
import sys
import time


def load(how, where, scratch=None):
    if how == "runai":
        from runai_model_streamer import SafetensorsStreamer

        with SafetensorsStreamer() as streamer:
            streamer.stream_file(where)
            return dict(streamer.get_tensors())
    if how == "boto3":
        import boto3
        from safetensors.torch import load_file

        bucket, key = where.removeprefix("s3://").split("/", 1)
        local = os.path.join(scratch, os.path.basename(key))
        boto3.client("s3").download_file(bucket, key, local)
        try:
            return load_file(local)
        finally:
            os.remove(local)
    if how == "file":
        from safetensors.torch import load_file

        return load_file(where)
    if how == "brevis":
        import brevis.torch

        return brevis.torch.load_file(where)
    raise SystemExit(f"s3_load.py: unknown loader {how!r}")


def touch(tensors):
    """Reads a byte of every 4 KiB page of every tensor: a tensor mapped from a
    file (safetensors through the mount) is in memory only once it is read."""
    import torch

    for t in tensors.values():
        t.reshape(-1).view(torch.uint8)[::4096].sum()


def digest(tensors):
    import torch

    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(name.encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    import torch  # noqa: F401  (imported before the clock starts, by every loader)

    how, where = sys.argv[1], sys.argv[2]
    scratch = sys.argv[3] if len(sys.argv) > 3 else None
    start = time.perf_counter()
    tensors = load(how, where, scratch)
    touch(tensors)
    seconds = time.perf_counter() - start
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    print(f"{seconds:.3f} {len(tensors)} {nbytes} {digest(tensors)}")


if __name__ == "__main__":
    main()
