"""Loads every .safetensors file under ORIGINALS from the originals and from the
same path under MOUNT, with the unmodified safetensors loaders: for numpy,
load_file (reads the file) and safe_open (memory-maps it); for torch too when
it is installed. Times each first load through the mount (which decodes) next
to the original's. With transformers installed and a config.json beside the
weights, also runs the model loaded from the mount and from the original on
the same input. Exits non-zero on any difference.

usage: python3 load_through_mount.py MOUNT ORIGINALS
"""
import importlib.util
import pathlib
import sys
import time

from safetensors import safe_open
from safetensors.numpy import load_file


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def timed(load, path):
    start = time.perf_counter()
    result = load(path)
    return result, (time.perf_counter() - start) * 1000


def check_numpy(shown, original):
    loaded, mount_ms = timed(load_file, shown)
    expected, original_ms = timed(load_file, original)
    assert loaded.keys() == expected.keys(), f"{shown}: tensor names differ"
    for name, value in expected.items():
        assert same(loaded[name], value), f"{shown}: {name} differs (load_file)"
    with safe_open(shown, framework="np") as mapped:
        assert set(mapped.keys()) == set(expected), f"{shown}: names differ (safe_open)"
        for name in mapped.keys():
            assert same(mapped.get_tensor(name), expected[name]), f"{shown}: {name} (safe_open)"
    params = sum(v.size for v in expected.values())
    print(f"{shown}: {len(expected)} tensors, {params:,} parameters, identical to the original "
          f"(numpy load: {mount_ms:.0f} ms through the mount, first read; "
          f"{original_ms:.0f} ms from the original)")
    return len(expected)


def check_torch(shown, original):
    import torch
    from safetensors.torch import load_file as load_torch

    def bits(t):
        # Bytes, not values: NaN != NaN, and -0.0 == 0.0.
        return (t.dtype, t.shape, t.reshape(-1).view(torch.uint8))

    loaded = load_torch(shown)
    expected = load_torch(original)
    for name, value in expected.items():
        (dtype, shape, got), (want_dtype, want_shape, want) = bits(loaded[name]), bits(value)
        same = dtype == want_dtype and shape == want_shape and torch.equal(got, want)
        assert same, f"{shown}: {name} differs (torch)"
    print(f"{shown}: identical in torch too ({len(expected)} tensors)")


def check_transformers(mount, originals):
    import torch
    from transformers import AutoModel

    inputs = {"input_ids": torch.tensor([[101, 7592, 2088, 102]]),
              "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    outputs = []
    for where in (mount, originals):
        model = AutoModel.from_pretrained(where).eval()
        with torch.no_grad():
            outputs.append(model(**inputs).last_hidden_state)
    assert torch.equal(*outputs), "transformers outputs differ"
    print(f"transformers: AutoModel.from_pretrained({mount}) gives the original's outputs exactly")


def main():
    mount, originals = map(pathlib.Path, sys.argv[1:3])
    files = sorted(originals.rglob("*.safetensors"))
    has_torch = importlib.util.find_spec("torch") is not None
    tensors = 0
    for original in files:
        shown = mount / original.relative_to(originals)
        tensors += check_numpy(shown, original)
        if has_torch:
            check_torch(shown, original)
    print(f"checked {len(files)} files, {tensors} tensors: identical through the mount")
    wants_model = (originals / "config.json").is_file()
    if has_torch and wants_model and importlib.util.find_spec("transformers"):
        check_transformers(mount, originals)
    elif not has_torch:
        print("(torch is not installed: loaded with numpy only)")
    return 0 if files else 1


if __name__ == "__main__":
    sys.exit(main())
