#!/usr/bin/env python3
"""Tests scripts/corpus/torch_to_safetensors.py without torch: writes a checkpoint in
torch.save's zip layout (data.pkl naming torch's rebuild function and storage
classes, a file per storage), converts it, and checks every tensor's dtype,
shape and values, including a transposed view, a tensor at an offset in a
shared storage and an empty one; and that a pickle naming any other callable
cannot run it. Needs numpy.

    python3 scripts/corpus/torch_to_safetensors_test.py
"""

import collections
import io
import json
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import types
import zipfile

import numpy as np

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_to_safetensors.py")


def fake_torch():
    """Modules named as torch's, so that pickle writes torch's global names."""
    torch = types.ModuleType("torch")
    utils = types.ModuleType("torch._utils")
    for name in ("HalfStorage", "FloatStorage", "LongStorage"):
        setattr(torch, name, type(name, (), {"__module__": "torch"}))

    def _rebuild_tensor_v2(*args):
        raise AssertionError("never called when writing")

    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    sys.modules["torch"], sys.modules["torch._utils"] = torch, utils
    return torch, utils


class View:
    """A tensor as torch pickles it: a storage, an offset, a shape, strides."""

    def __init__(self, storage, offset, shape, stride):
        self.args = (storage, offset, shape, stride, False, collections.OrderedDict())

    def __reduce__(self):
        return (sys.modules["torch._utils"]._rebuild_tensor_v2, self.args)


class Storage:
    def __init__(self, kind, key, values):
        self.kind, self.key, self.values = kind, key, values


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", obj.kind, obj.key, "cpu", obj.values.size)
        return None


def checkpoint(path, obj, storages, extra=None):
    buffer = io.BytesIO()
    Pickler(buffer, protocol=2).dump(obj)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", extra if extra is not None else buffer.getvalue())
        for s in storages:
            z.writestr(f"archive/data/{s.key}", s.values.tobytes())


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    kinds = {"F16": np.float16, "F32": np.float32, "I64": np.int64}
    out = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=kinds[t["dtype"]]).reshape(t["shape"])
    return list(header), out


def main():
    torch, _ = fake_torch()
    rng = np.random.default_rng(7)
    weights = rng.standard_normal(6 * 4).astype(np.float16)
    shared = rng.standard_normal(10).astype(np.float32)
    steps = np.array([1, 2, 3], dtype=np.int64)
    s_w = Storage(torch.HalfStorage, "0", weights)
    s_shared = Storage(torch.FloatStorage, "1", shared)
    s_steps = Storage(torch.LongStorage, "2", steps)
    state = collections.OrderedDict(
        [
            ("layer.weight", View(s_w, 0, (6, 4), (4, 1))),
            ("layer.weight_t", View(s_w, 0, (4, 6), (1, 4))),
            ("tail", View(s_shared, 3, (2, 3), (3, 1))),
            ("empty", View(s_shared, 0, (5, 0), (1, 1))),
            ("steps", View(s_steps, 0, (3,), (1,))),
        ]
    )
    expected = {
        "layer.weight": weights.reshape(6, 4),
        "layer.weight_t": weights.reshape(6, 4).T,
        "tail": shared[3:9].reshape(2, 3),
        "empty": np.zeros((5, 0), dtype=np.float32),
        "steps": steps,
    }
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, out = os.path.join(tmp, "model.pt"), os.path.join(tmp, "model.safetensors")
        checkpoint(ckpt, {"state_dict": state, "config": {"layers": 1}}, [s_w, s_shared, s_steps])
        subprocess.run([sys.executable, SCRIPT, ckpt, out], check=True)
        names, tensors = read_safetensors(out)
        assert names == list(expected), names
        for name, want in expected.items():
            got = tensors[name]
            assert got.dtype == want.dtype and got.shape == want.shape, name
            assert np.array_equal(got, want), name

        # A pickle calling anything else (here os.system) gets an inert
        # placeholder: the command never runs.
        marker = os.path.join(tmp, "ran")
        evil = b"cos\nsystem\n(V" + f"touch {marker}".encode() + b"\ntR."
        bad = os.path.join(tmp, "bad.pt")
        checkpoint(bad, None, [], extra=evil)
        result = subprocess.run([sys.executable, SCRIPT, bad, out], capture_output=True)
        assert result.returncode != 0, "a pickle without tensors is refused"
        assert not os.path.exists(marker), "the pickle ran a command"
    print("torch_to_safetensors: ok")


if __name__ == "__main__":
    main()
