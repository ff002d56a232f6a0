"""The Python package against safetensors' own loaders: every corpus file, slices,
errors, and (where torch and transformers are installed) torch loading and a model
built from a state dict loaded out of an archive."""

import glob
import importlib.util
import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file as st_numpy_load, save_file as st_numpy_save

import brevis
import brevis.numpy

CORPUS = os.environ.get("BREVIS_CORPUS", os.path.expanduser("~/.cache/brevis-corpus"))
CORPUS_FILES = sorted(glob.glob(os.path.join(CORPUS, "*", "model.safetensors")))
HAS_TORCH = importlib.util.find_spec("torch") is not None
NUMPY_DTYPES = {"F64", "F32", "F16", "I64", "I32", "I16", "I8", "U8", "BOOL"}


def corpus_name(path):
    return os.path.basename(os.path.dirname(path))


def dtypes_of(path):
    import json
    import struct

    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    header.pop("__metadata__", None)
    return {t["dtype"] for t in header.values()}


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """Every corpus file packed once (level 1: these tests are about reading)."""
    assert CORPUS_FILES, f"no corpus under {CORPUS}: run scripts/fetch-corpus.sh"
    out = tmp_path_factory.mktemp("packed")
    archives = {}
    for src in CORPUS_FILES:
        dst = out / f"{corpus_name(src)}.brv"
        brevis.pack(src, dst, level=1)
        archives[src] = dst
    return archives


def test_numpy_loads_equal_safetensors_on_every_corpus_file_numpy_can_hold(packed):
    loaded = 0
    for src, brv in packed.items():
        if not dtypes_of(src) <= NUMPY_DTYPES:
            with pytest.raises(TypeError, match="numpy has no dtype"):
                brevis.numpy.load_file(brv)
            continue
        ours, theirs = brevis.numpy.load_file(brv), st_numpy_load(src)
        assert list(ours) == list(theirs)
        for name in theirs:
            assert ours[name].dtype == theirs[name].dtype, name
            assert np.array_equal(ours[name], theirs[name]), name
        loaded += 1
    assert loaded >= 2


def test_safe_open_gives_keys_metadata_tensors_and_slices(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {
        "w": rng.standard_normal((300, 40)).astype(np.float32),
        "b": np.arange(17, dtype=np.int64),
        "s": np.array(3.5, dtype=np.float16),
        "e": np.zeros((0, 4), dtype=np.float32),
    }
    src = tmp_path / "m.safetensors"
    st_numpy_save(tensors, str(src), metadata={"format": "np", "note": "test"})
    brv = tmp_path / "m.brv"
    brevis.pack(src, brv)
    with brevis.safe_open(brv, framework="numpy") as f:
        assert sorted(f.keys()) == sorted(tensors)
        assert f.metadata() == {"format": "np", "note": "test"}
        for name, want in tensors.items():
            got = f.get_tensor(name)
            assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
        w = f.get_slice("w")
        assert w.get_shape() == [300, 40] and w.get_dtype() == "F32"
        keys = [5, -1, slice(3, 10), slice(None, None, 7), slice(250, 20, -3), slice(50, 40),
                (slice(1, 4), slice(2, 5)), (7, 3), slice(-20, None)]
        for key in keys:
            assert np.array_equal(w[key], tensors["w"][key]), key
        with pytest.raises(IndexError):
            w[300]
        assert f.get_slice("s")[()] == tensors["s"]
        with pytest.raises(KeyError, match="no tensor named 'nope'"):
            f.get_tensor("nope")


def test_pack_unpack_verify_round_trip_and_refuse_overwrites(tmp_path):
    src = tmp_path / "m.safetensors"
    st_numpy_save({"w": np.arange(4096, dtype=np.float32)}, str(src))
    brv, out = tmp_path / "m.brv", tmp_path / "out.safetensors"
    assert brevis.pack(src, brv) == os.path.getsize(brv)
    brevis.verify(brv)
    assert brevis.unpack(brv, out) == os.path.getsize(src)
    assert out.read_bytes() == src.read_bytes()
    with pytest.raises(brevis.BrevisError, match="already exists"):
        brevis.pack(src, brv)
    brevis.pack(src, brv, force=True, level=9)
    with pytest.raises(ValueError, match="level 0"):
        brevis.pack(src, brv, force=True, level=0)


def test_dedup_matches_the_archives_already_in_the_store(tmp_path):
    rng = np.random.default_rng(7)
    weights = {f"w{i}": rng.standard_normal(20000).astype(np.float32) for i in range(3)}
    first, second = tmp_path / "first.safetensors", tmp_path / "second.safetensors"
    st_numpy_save(weights, str(first))
    # The same tensors under other names, as a re-upload would have them.
    st_numpy_save({f"renamed.{k}": v for k, v in weights.items()}, str(second))
    store = tmp_path / "store"
    store.mkdir()
    alone = brevis.pack(second, tmp_path / "alone.brv")
    brevis.pack(first, store / "first.brv")
    # Matched against the store beside the output (True) or named (a path).
    small = brevis.pack(second, store / "second.brv", dedup=True)
    assert small * 20 < alone
    named = brevis.pack(second, tmp_path / "elsewhere.brv", dedup=store)
    assert named * 20 < alone
    for brv in (store / "second.brv", tmp_path / "elsewhere.brv"):
        out = tmp_path / "out.safetensors"
        brevis.unpack(brv, out, force=True)
        assert out.read_bytes() == second.read_bytes()
    with pytest.raises(brevis.BrevisError, match="not a directory"):
        brevis.pack(second, tmp_path / "x.brv", dedup=tmp_path / "nothing")


def test_damaged_and_missing_archives_raise_naming_the_file(tmp_path, packed):
    src = next(s for s in CORPUS_FILES if dtypes_of(s) <= NUMPY_DTYPES)
    bad = tmp_path / "bad.brv"
    shutil.copy(packed[src], bad)
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0x55
    bad.write_bytes(bytes(data))
    with pytest.raises(brevis.BrevisError, match="bad.brv: corrupt archive at byte"):
        brevis.numpy.load_file(bad)
    with pytest.raises(brevis.BrevisError, match="bad.brv"):
        brevis.verify(bad)
    with pytest.raises(brevis.BrevisError, match="missing.brv"):
        brevis.safe_open(tmp_path / "missing.brv")
    text = tmp_path / "text.brv"
    text.write_text('{"not": "an archive"}')
    with pytest.raises(brevis.BrevisError, match="not a brevis archive"):
        brevis.Archive(text)


def test_read_into_checks_buffers_and_spans(packed):
    archive = brevis.Archive(next(iter(packed.values())))
    with pytest.raises(ValueError, match="read-only"):
        archive.read_into(0, bytes(8))
    with pytest.raises(ValueError, match="beyond the original"):
        archive.read_into(archive.source_len - 4, bytearray(8))
    with pytest.raises(ValueError, match="not C-contiguous"):
        archive.read_into(0, np.zeros((8, 8), dtype=np.uint8)[:, ::2])
    head = bytearray(8)
    archive.read_into(0, head)
    assert int.from_bytes(head, "little") < archive.source_len


torch_only = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed in this venv")


@torch_only
def test_torch_loads_equal_safetensors_on_every_corpus_file(packed):
    import torch
    from safetensors.torch import load_file as st_torch_load

    import brevis.torch

    for src, brv in packed.items():
        ours, theirs = brevis.torch.load_file(brv), st_torch_load(src)
        assert list(ours) == list(theirs)
        for name in theirs:
            assert ours[name].dtype == theirs[name].dtype, name
            # Bitwise, so that NaNs and -0.0 count too.
            a = ours[name].contiguous().reshape(-1).view(torch.uint8)
            b = theirs[name].contiguous().reshape(-1).view(torch.uint8)
            assert torch.equal(a, b), (corpus_name(src), name)


@torch_only
def test_a_transformers_model_from_an_archived_state_dict_gives_identical_outputs(tmp_path):
    transformers = pytest.importorskip("transformers")
    import torch

    import brevis.torch

    model_dir = os.path.join(CORPUS, "minilm-f32")
    config = transformers.AutoConfig.from_pretrained(model_dir)
    brv = tmp_path / "model.brv"
    brevis.pack(os.path.join(model_dir, "model.safetensors"), brv, level=1)
    reference = transformers.AutoModel.from_pretrained(model_dir).eval()
    state = brevis.torch.load_file(brv)
    ours = transformers.AutoModel.from_config(config)
    missing, _ = ours.load_state_dict(state, strict=False)
    assert not missing, missing
    ours.eval()
    ids = torch.randint(0, config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a = reference(input_ids=ids).last_hidden_state
        b = ours(input_ids=ids).last_hidden_state
    assert torch.equal(a, b)
