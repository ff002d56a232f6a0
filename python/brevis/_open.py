"""``safe_open``: a safetensors-like view of an archive, tensor by tensor."""

import json
import struct

from ._brevis import Archive, BrevisError

# safetensors dtype -> (numpy dtype name or None, torch dtype name, bytes per element)
DTYPES = {
    "F64": ("float64", "float64", 8),
    "F32": ("float32", "float32", 4),
    "F16": ("float16", "float16", 2),
    "BF16": (None, "bfloat16", 2),
    "I64": ("int64", "int64", 8),
    "I32": ("int32", "int32", 4),
    "I16": ("int16", "int16", 2),
    "I8": ("int8", "int8", 1),
    "U64": ("uint64", "uint64", 8),
    "U32": ("uint32", "uint32", 4),
    "U16": ("uint16", "uint16", 2),
    "U8": ("uint8", "uint8", 1),
    "BOOL": ("bool", "bool", 1),
    "F8_E4M3": (None, "float8_e4m3fn", 1),
    "F8_E5M2": (None, "float8_e5m2", 1),
}


class _Info:
    __slots__ = ("dtype", "shape", "start", "end")

    def __init__(self, dtype, shape, start, end):
        self.dtype, self.shape, self.start, self.end = dtype, shape, start, end


def _read_header(archive):
    head = bytearray(8)
    archive.read_into(0, head)
    (n,) = struct.unpack("<Q", head)
    if n > archive.source_len - 8:
        raise BrevisError(f"{archive.path}: its original is not a safetensors file")
    raw = bytearray(n)
    archive.read_into(8, raw)
    header = json.loads(bytes(raw))
    metadata = header.pop("__metadata__", None)
    tensors = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        tensors[name] = _Info(t["dtype"], list(t["shape"]), 8 + n + a, 8 + n + b)
    return metadata, tensors


class _Framework:
    """How one framework allocates a tensor's memory and views it."""

    def __init__(self, name, device="cpu"):
        if name in ("np", "numpy"):
            import numpy

            self.np, self.torch = numpy, None
        elif name in ("pt", "torch"):
            import numpy
            import torch

            self.np, self.torch = numpy, torch
        else:
            raise ValueError(f"framework {name!r} is not 'pt' or 'numpy'")
        self.device = device

    def empty(self, info, nbytes):
        """A fresh tensor of `nbytes` bytes and a writable uint8 numpy view of it."""
        if self.torch is None:
            flat = self.np.empty(nbytes, dtype=self.np.uint8)
            return flat, flat
        flat = self.torch.empty(nbytes, dtype=self.torch.uint8)
        return flat, flat.numpy()

    def view(self, info, flat, shape):
        numpy_name, torch_name, _ = _dtype(info.dtype)
        if self.torch is None:
            if numpy_name is None:
                raise TypeError(f"numpy has no dtype for {info.dtype}: load it with brevis.torch")
            return flat.view(numpy_name).reshape(shape)
        t = flat.view(getattr(self.torch, torch_name)).reshape(shape)
        return t if self.device == "cpu" else t.to(self.device)


def _dtype(name):
    try:
        return DTYPES[name]
    except KeyError:
        raise TypeError(f"dtype {name} is not supported") from None


class safe_open:
    """An archive opened like ``safetensors.safe_open``: ``keys()``, ``metadata()``,
    ``get_tensor(name)`` and ``get_slice(name)[...]``, each decoding only the chunks
    its bytes lie in."""

    def __init__(self, path, framework="pt", device="cpu"):
        self._archive = Archive(str(path))
        self._framework = _Framework(framework, device)
        self._metadata, self._tensors = _read_header(self._archive)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def keys(self):
        """Tensor names, in the header's order."""
        return list(self._tensors)

    def metadata(self):
        """The header's ``__metadata__`` (a dict of strings), or None."""
        return self._metadata

    def _info(self, name):
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(f"{self._archive.path}: no tensor named {name!r}") from None

    def get_tensor(self, name):
        """The whole tensor `name`."""
        info = self._info(name)
        flat, out = self._framework.empty(info, info.end - info.start)
        if info.end > info.start:
            self._archive.read_into(info.start, out)
        return self._framework.view(info, flat, info.shape)

    def get_slice(self, name):
        """A lazy view of tensor `name`: indexing it decodes only the rows it needs."""
        return _Slice(self, self._info(name))

    def _rows(self, info, first, stop):
        """Rows `first..stop` (along the first dimension) of `info`."""
        row = _dtype(info.dtype)[2]
        for d in info.shape[1:]:
            row *= d
        flat, out = self._framework.empty(info, (stop - first) * row)
        if stop > first and row:
            self._archive.read_into(info.start + first * row, out)
        return self._framework.view(info, flat, [stop - first] + info.shape[1:])

    def _load_all(self):
        """Every tensor, decoded in parallel, then the whole original's SHA-256 checked."""
        allocated = {}
        targets = []
        for name, info in self._tensors.items():
            flat, out = self._framework.empty(info, info.end - info.start)
            allocated[name] = flat
            if info.end > info.start:
                targets.append((info.start, out))
        self._archive.read_all_into(targets)
        return {n: self._framework.view(self._tensors[n], f, self._tensors[n].shape)
                for n, f in allocated.items()}


class _Slice:
    """``get_slice``'s result: shape, dtype, and indexing that decodes only the rows needed."""

    def __init__(self, opened, info):
        self._opened, self._info = opened, info

    def get_shape(self):
        return list(self._info.shape)

    def get_dtype(self):
        return self._info.dtype

    def __getitem__(self, key):
        info = self._info
        if not info.shape:
            return self._opened._rows(info, 0, 1).reshape([])[key]
        key = key if isinstance(key, tuple) else (key,)
        first, rest = (key[0], key[1:]) if key else (slice(None), ())
        rows = info.shape[0]
        if isinstance(first, int):
            i = first + rows if first < 0 else first
            if not 0 <= i < rows:
                raise IndexError(f"index {first} is out of range for {rows} rows")
            return self._opened._rows(info, i, i + 1)[(0,) + tuple(rest)]
        if isinstance(first, slice):
            picked = range(*first.indices(rows))
            if not picked:
                return self._opened._rows(info, 0, 0)[(slice(None),) + tuple(rest)]
            lo, hi = min(picked), max(picked) + 1
            part = self._opened._rows(info, lo, hi)
            stop = picked.stop - lo
            local = slice(picked.start - lo, stop if stop >= 0 else None, picked.step)
            return part[(local,) + tuple(rest)]
        # Anything else (lists, arrays, Ellipsis): the whole tensor, indexed.
        return self._opened._rows(info, 0, rows)[key]
