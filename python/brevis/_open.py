"""``safe_open``: a safetensors-like view of an archive, tensor by tensor."""

import math
import operator

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
    __slots__ = ("name", "dtype", "shape", "start", "end")

    def __init__(self, name, dtype, shape, start, end):
        self.name, self.dtype, self.shape, self.start, self.end = name, dtype, shape, start, end


def _read_header(archive):
    """The original's metadata and tensors by name, in the order of their bytes (as
    safetensors' load_file gives them). The header is parsed and checked by the
    packer's own code, with its size limit: a tensor lies inside the original and
    holds exactly its shape's bytes, or the archive is refused."""
    tensors, metadata = archive.header()
    infos = {t[0]: _Info(*t) for t in sorted(tensors, key=lambda t: (t[3], t[4], t[0]))}
    return (None if metadata is None else dict(metadata)), infos


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

    def empty(self, nbytes):
        """A fresh tensor of `nbytes` bytes and a writable uint8 numpy view of it."""
        if self.torch is None:
            flat = self.np.empty(nbytes, dtype=self.np.uint8)
            return flat, flat
        flat = self.torch.empty(nbytes, dtype=self.torch.uint8)
        return flat, flat.numpy()

    def view(self, dtype, flat, shape):
        """`flat` as a tensor of `dtype` (this framework's name of it) and `shape`."""
        if self.torch is None:
            return flat.view(dtype).reshape(shape)
        t = flat.view(getattr(self.torch, dtype)).reshape(shape)
        return t if self.device == "cpu" else t.to(self.device)


class safe_open:
    """An archive opened like ``safetensors.safe_open``: ``keys()``, ``metadata()``,
    ``get_tensor(name)`` and ``get_slice(name)[...]``, each decoding only the chunks
    its bytes lie in. `path` is a local path or the URL of an archive in object
    storage (``s3://bucket/key.brv``, ``https://host/path.brv``), read by ranged
    requests, with credentials and endpoint from the AWS environment variables
    (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
    ``AWS_ENDPOINT_URL``); a request taking longer than `timeout` seconds, retries
    included, raises BrevisError naming the URL."""

    def __init__(self, path, framework="pt", device="cpu", *, timeout=60.0):
        self._archive = Archive(str(path), timeout)
        self._framework = _Framework(framework, device)
        self._metadata, self._tensors = _read_header(self._archive)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def keys(self):
        """Tensor names, sorted (as safetensors gives them)."""
        return sorted(self._tensors)

    def metadata(self):
        """The header's ``__metadata__`` (a dict of strings), or None."""
        return self._metadata

    def _info(self, name):
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(f"{self._archive.path}: no tensor named {name!r}") from None

    def _dtype(self, info):
        """This framework's name of `info`'s dtype, and its bytes per element."""
        where = f"{self._archive.path}: tensor {info.name!r}"
        try:
            numpy_name, torch_name, size = DTYPES[info.dtype]
        except KeyError:
            raise BrevisError(f"{where}: dtype {info.dtype} is not supported") from None
        if self._framework.torch is not None:
            return torch_name, size
        if numpy_name is None:
            raise TypeError(f"{where}: numpy has no dtype for {info.dtype}: load it with brevis.torch")
        return numpy_name, size

    def _read(self, info, first, shape):
        """The elements of `info` from element `first` on, as a tensor of `shape`."""
        dtype, size = self._dtype(info)
        nbytes = math.prod(shape) * size
        flat, out = self._framework.empty(nbytes)
        if nbytes:
            self._archive.read_into(info.start + first * size, out)
        return self._framework.view(dtype, flat, shape)

    def get_tensor(self, name):
        """The whole tensor `name`."""
        info = self._info(name)
        return self._read(info, 0, info.shape)

    def get_slice(self, name):
        """A lazy view of tensor `name`: indexing it decodes only the rows it needs."""
        return _Slice(self, self._info(name))

    def _rows(self, info, first, stop):
        """Rows `first..stop` (along the first dimension) of `info`."""
        rest = info.shape[1:]
        return self._read(info, first * math.prod(rest), [stop - first] + rest)

    def _load_all(self, check_sha256=False):
        """Every tensor, decoded in parallel, every chunk checked; with `check_sha256`
        the whole original's SHA-256 too."""
        # Every dtype is checked before anything is decoded.
        dtypes = {name: self._dtype(info)[0] for name, info in self._tensors.items()}
        allocated = {}
        targets = []
        for name, info in self._tensors.items():
            allocated[name], out = self._framework.empty(info.end - info.start)
            if info.end > info.start:
                targets.append((info.start, out))
        self._archive.read_all_into(targets, check_sha256)
        return {n: self._framework.view(dtypes[n], f, self._tensors[n].shape)
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
        """The tensor indexed by `key` as numpy indexes it. Where the first index is an
        integer or a slice, only the rows it picks are decoded, and indexed by the same
        key with that index moved onto them; other keys decode the whole tensor."""
        info = self._info
        keys = key if isinstance(key, tuple) else (key,)
        picked = _rows_picked(keys[0], info.shape[0]) if info.shape and keys else None
        if picked is None:
            return self._opened._read(info, 0, info.shape)[key]
        first, stop, local = picked
        return self._opened._rows(info, first, stop)[(local,) + keys[1:]]


def _rows_picked(index, rows):
    """The rows `first..stop` that `index` picks of `rows` and the index that picks
    the same of those rows alone; None where `index` is not an integer or a slice
    (None, Ellipsis, a bool, an array, a list)."""
    if isinstance(index, slice):
        picked = range(*index.indices(rows))
        if not picked:
            return 0, 0, slice(0, 0)
        first = min(picked)
        # Up from their row 0, or down to it: the picked rows end where these do.
        return first, max(picked) + 1, slice(picked.start - first, None, picked.step)
    if isinstance(index, bool):
        return None
    try:
        i = operator.index(index)
    except TypeError:
        return None
    if not -rows <= i < rows:
        raise IndexError(f"index {i} is out of bounds for axis 0 with size {rows}")
    i %= rows
    return i, i + 1, 0
