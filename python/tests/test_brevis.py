"""The Python package against safetensors' own loaders: every corpus file, slices,
errors, and (where torch and transformers are installed) torch loading and a model
built from a state dict loaded out of an archive."""

import json
import math
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
from safetensors import SafetensorError, safe_open as st_safe_open
from safetensors.numpy import load_file as st_numpy_load, save_file as st_numpy_save

import brevis
import brevis.numpy
from brevis._brevis import _store_unchecked
from brevis._open import DTYPES
from corpus import CORPUS, CORPUS_FILES, HAS_TORCH, NUMPY_DTYPES, corpus_name, dtypes_of

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
    # first.brv is second.brv's base now: replacing it with another source
    # is refused unless asked for; the same source again is fine.
    with pytest.raises(brevis.BrevisError, match="is the base of 1 other archive"):
        brevis.pack(second, store / "first.brv", force=True)
    brevis.pack(first, store / "first.brv", force=True, level=1)
    brevis.verify(store / "second.brv")
    brevis.pack(second, store / "first.brv", force=True, break_dependants=True)
    with pytest.raises(brevis.BrevisError, match="holds another source"):
        brevis.verify(store / "second.brv")


def test_a_vocabulary_extended_or_reordered_loads_from_its_row_maps(tmp_path):
    rng = np.random.default_rng(11)
    embed = (rng.standard_normal((3000, 64)) * 0.02).astype(np.float16)
    base = tmp_path / "base.safetensors"
    st_numpy_save({"embed": embed}, str(base))
    brevis.pack(base, tmp_path / "base.brv")
    new_rows = (rng.standard_normal((100, 64)) * 0.02).astype(np.float16)
    tunes = {
        "extended": np.concatenate([embed, new_rows]),
        "pruned": embed[rng.permutation(3000)[:2000]],
    }
    for name, rows in tunes.items():
        src = tmp_path / f"{name}.safetensors"
        st_numpy_save({"embed": rows}, str(src))
        alone = brevis.pack(src, tmp_path / f"{name}.alone.brv")
        based = brevis.pack(src, tmp_path / f"{name}.brv", base=tmp_path / "base.brv")
        # The old rows are references to the base's: a small part of alone.
        assert based * 4 < alone, name
        loaded = brevis.numpy.load_file(tmp_path / f"{name}.brv")
        assert loaded["embed"].tobytes() == rows.tobytes(), name
    (tmp_path / "base.brv").unlink()
    with pytest.raises(brevis.BrevisError, match="base.brv"):
        brevis.numpy.load_file(tmp_path / "pruned.brv")


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
    with pytest.raises(ValueError, match="numpy array or a bytearray"):
        archive.read_into(0, 12345)
    head = bytearray(8)
    archive.read_into(0, head)
    assert int.from_bytes(head, "little") < archive.source_len
    twice = np.zeros(16, dtype=np.uint8)
    with pytest.raises(ValueError, match="share memory"):
        archive.read_all_into([(0, twice[:8]), (8, twice[4:12])])


def original(header, data=b""):
    """A safetensors file's bytes: `header` (a dict, or its JSON's bytes) and `data`."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


F32 = np.arange(8, dtype=np.float32).tobytes()

# Headers the packer refuses (so archives of them are made by hand): each one's
# original, and what the refusal says.
BAD_HEADERS = {
    "shape-larger-than-its-bytes": (original({
        "a": {"dtype": "F32", "shape": [1000, 4], "data_offsets": [0, 16]},
        "b": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}}, F32),
        r"tensor 'a': 16 bytes do not hold shape \[1000, 4\] of F32"),
    "negative-dimension": (original({
        "a": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 64]}}, F32 * 2),
        "tensor 'a': shape is not a list of sizes"),
    "offsets-beyond-the-file": (original({
        "a": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]}}, F32),
        r"tensor 'a': data_offsets \[0, 64\] do not fit"),
    "overlapping-tensors": (original({
        "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
        "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, F32),
        "tensors 'a' and 'b' overlap"),
    "name-given-twice": (original(
        b'{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},'
        b'"a":{"dtype":"F32","shape":[4],"data_offsets":[16,32]}}', F32),
        "tensor 'a' appears twice"),
    "missing-offsets": (original({"a": {"dtype": "F32", "shape": [4]}}, F32),
                        "tensor 'a': data_offsets is not a pair"),
    "metadata-not-strings": (original({"__metadata__": {"step": 1}}),
                             "__metadata__ is not an object of strings"),
    "a-list-not-an-object": (original(b"[1, 2]"), "header does not start with '{'"),
    "header-size-0": (struct.pack("<Q", 0) + F32, "header size 0 does not fit"),
    "not-json": (original(b'{"a": nope}'), "header is not valid JSON"),
    "not-utf-8": (original(b'{"\xff": 1}'), "header is not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(BAD_HEADERS))
def test_archives_of_headers_the_packer_refuses_are_refused_by_the_reader(tmp_path, case):
    """Such archives verify (their chunks and SHA-256 are intact): only a check of
    the header stops a reader taking, say, the next tensor's bytes as rows of `a`.
    The reader's check is the packer's (and refuses what safetensors refuses)."""
    data, reason = BAD_HEADERS[case]
    src, brv = tmp_path / "m.safetensors", tmp_path / "m.brv"
    src.write_bytes(data)
    _store_unchecked(brv, data)
    brevis.verify(brv)
    with pytest.raises(brevis.BrevisError, match=f"m.safetensors.*{reason}"):
        brevis.pack(src, tmp_path / "packed.brv")
    with pytest.raises(SafetensorError):
        st_safe_open(str(src), framework="numpy")
    refused = f"m.brv: its original is not a safetensors file: {reason}"
    with pytest.raises(brevis.BrevisError, match=refused):
        brevis.safe_open(brv, framework="numpy")
    with pytest.raises(brevis.BrevisError, match=refused):
        brevis.numpy.load_file(brv)


def test_the_whole_original_s_sha256_is_checked_when_asked(tmp_path):
    """An archive whose chunks are intact but whose recorded SHA-256 is not its
    original's: a load checks every chunk and gives the tensors; with
    ``check_sha256`` it is refused naming the file, as ``brevis verify`` refuses it."""
    tensors = {"a": np.arange(50_000, dtype=np.float32), "b": np.ones((300, 7), np.int16)}
    src, brv = tmp_path / "m.safetensors", tmp_path / "m.brv"
    st_numpy_save(tensors, str(src))
    _store_unchecked(brv, src.read_bytes(), sha256=bytes(32))
    loaded = brevis.numpy.load_file(brv)
    assert all(np.array_equal(loaded[k], v) for k, v in tensors.items())
    with pytest.raises(brevis.BrevisError, match="m.brv.*SHA-256"):
        brevis.numpy.load_file(brv, check_sha256=True)
    with pytest.raises(brevis.BrevisError, match="m.brv.*SHA-256"):
        brevis.verify(brv)
    _store_unchecked(brv, src.read_bytes())
    loaded = brevis.numpy.load_file(brv, check_sha256=True)
    assert all(np.array_equal(loaded[k], v) for k, v in tensors.items())


def test_a_header_size_beyond_the_limit_is_refused_before_anything_is_allocated(tmp_path):
    """The original declares a 512 MiB header and is 512 MiB long (all zeros after the
    size), so the header fits the file; its archive is a few hundred bytes. The
    limit is the packer's (100 MB): the reader refuses it at once, in a process of
    its own whose peak memory is measured."""
    brv = tmp_path / "bomb.brv"
    _store_unchecked(brv, struct.pack("<Q", 512 << 20), (512 << 20) + 8)
    assert os.path.getsize(brv) < 4096
    probe = (
        "import resource, sys, time, numpy, brevis\n"
        "peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "before, start = peak(), time.monotonic()\n"
        "try:\n"
        "    brevis.safe_open(sys.argv[1], framework='numpy')\n"
        "except brevis.BrevisError as e:\n"
        "    print(e)\n"
        "print(peak() - before, time.monotonic() - start)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(brv)], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[0] == (f"{brv}: its original is not a safetensors file: header size "
                      f"{512 << 20} exceeds the limit of {100 << 20} bytes"), out
    grown_kib, seconds = out[1].split()
    assert int(grown_kib) < 16 << 10 and float(seconds) < 2, out


def test_dtypes_a_framework_lacks_are_refused_naming_the_file_and_tensor(tmp_path):
    """The packer keeps unknown dtypes' bytes (the file is valid safetensors): the
    reader gives the other tensors and refuses the unknown one by name."""
    src, brv = tmp_path / "m.safetensors", tmp_path / "m.brv"
    src.write_bytes(original({
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "h": {"dtype": "BF16", "shape": [2], "data_offsets": [8, 12]},
        "g": {"dtype": "X9", "shape": [3], "data_offsets": [12, 17]}}, F32[:17]))
    brevis.pack(src, brv)
    with brevis.safe_open(brv, framework="numpy") as f:
        assert f.keys() == ["a", "g", "h"]
        assert np.array_equal(f.get_tensor("a"), [0, 1])
        with pytest.raises(brevis.BrevisError, match="m.brv: tensor 'g': dtype X9 is not supported"):
            f.get_tensor("g")
        with pytest.raises(brevis.BrevisError, match="m.brv: tensor 'g': dtype X9"):
            f.get_slice("g")[1:]
        with pytest.raises(TypeError, match="m.brv: tensor 'h': numpy has no dtype for BF16"):
            f.get_tensor("h")
    # The first refused in the order of their bytes.
    with pytest.raises(TypeError, match="m.brv: tensor 'h': numpy has no dtype for BF16"):
        brevis.numpy.load_file(brv)


def random_index(rng, size):
    """One index of an axis of `size` as numpy takes them, in range or not."""
    n = size + 2
    pick = int(rng.integers(9))
    if pick == 0:
        return int(rng.integers(-n, n))
    if pick == 1:
        return np.int64(rng.integers(-n, n))
    if pick <= 4:
        bound = lambda: None if rng.integers(4) == 0 else int(rng.integers(-n, n))
        step = [None, 1, 2, 3, -1, -2, -5][int(rng.integers(7))]
        return slice(bound(), bound(), step)
    if pick == 5:
        return [None, Ellipsis][int(rng.integers(2))]
    if pick == 6:
        return [True, False, np.True_][int(rng.integers(3))]
    if pick == 7:
        return [int(i) for i in rng.integers(-n, n, int(rng.integers(0, 3)))]
    return np.array(rng.integers(-n, n))


def outcome(index):
    """`index()`'s array, or the type of what it raised."""
    try:
        return index()
    except (IndexError, TypeError, ValueError) as e:
        return type(e)


def test_get_slice_indexes_as_numpy_indexes_the_whole_tensor(tmp_path):
    """A seeded random walk over keys of every kind numpy takes (integers, numpy
    integers, slices with negative steps, None, Ellipsis, bools, lists, 0-d arrays,
    up to one index more than the tensor has axes)."""
    rng = np.random.default_rng(11)
    tensors = {
        "v": np.arange(7, dtype=np.int16),
        "m": rng.standard_normal((9, 5)).astype(np.float32),
        "c": np.arange(4 * 3 * 5, dtype=np.int64).reshape(4, 3, 5),
        "e": np.zeros((0, 3), dtype=np.float64),
        "s": np.array(2.5, dtype=np.float32),
    }
    src, brv = tmp_path / "m.safetensors", tmp_path / "m.brv"
    st_numpy_save(tensors, str(src))
    brevis.pack(src, brv, level=1)
    with brevis.safe_open(brv, framework="numpy") as f:
        assert f.get_slice("m")[True].shape == (1, 9, 5)
        for name, want in tensors.items():
            whole, lazy = f.get_tensor(name), f.get_slice(name)
            assert np.array_equal(whole, want)
            for _ in range(400):
                axes = want.shape + (3,)
                key = tuple(random_index(rng, axes[i]) for i in range(int(rng.integers(len(axes) + 1))))
                key = key[0] if len(key) == 1 and rng.integers(2) else key
                expected, got = outcome(lambda: whole[key]), outcome(lambda: lazy[key])
                if isinstance(expected, type):
                    assert got is expected, (name, key)
                else:
                    assert isinstance(got, np.ndarray) or np.isscalar(got), (name, key)
                    assert got.dtype == expected.dtype and got.shape == expected.shape, (name, key)
                    assert np.array_equal(got, expected), (name, key)


def mutated_header(rng):
    """A header, as JSON-ready objects, that is valid or damaged in one of many ways;
    and the data it describes."""
    header = {"__metadata__": {"format": "np"}}
    at = 0
    for i in range(int(rng.integers(0, 4))):
        dtype = list(DTYPES)[int(rng.integers(len(DTYPES)))]
        shape = [int(d) for d in rng.integers(0, 4, int(rng.integers(0, 3)))]
        end = at + math.prod(shape) * DTYPES[dtype][2]
        header[f"t{i}"] = {"dtype": dtype, "shape": shape, "data_offsets": [at, end]}
        at = end + int(rng.integers(0, 2))
    data = bytes(rng.integers(0, 256, at + int(rng.integers(0, 3)), dtype=np.uint8))
    odd = [-1, 0, 1, 3, 2**64, 2**63, 1.5, "4", None, [], {}, True]
    for _ in range(int(rng.integers(0, 3))):
        names = list(header)
        if not names:
            break
        entry = header[names[int(rng.integers(len(names)))]]
        fields = list(entry)
        if fields and rng.integers(4):
            field = fields[int(rng.integers(len(fields)))]
            value = entry[field]
            if isinstance(value, list) and value and rng.integers(2):
                value[int(rng.integers(len(value)))] = odd[int(rng.integers(len(odd)))]
            elif rng.integers(2):
                entry[field] = odd[int(rng.integers(len(odd)))]
            else:
                del entry[field]
        else:
            entry["dtype"] = "X9"
    return header, data


def mutated_bytes(rng, raw):
    """`raw` with a few bytes changed, dropped or doubled."""
    raw = bytearray(raw)
    for _ in range(int(rng.integers(1, 4))):
        if not raw:
            break
        i = int(rng.integers(len(raw)))
        how = int(rng.integers(3))
        if how == 0:
            raw[i] = int(rng.integers(256))
        elif how == 1:
            del raw[i]
        else:
            raw.insert(i, raw[i])
    return bytes(raw)


def test_random_and_mutated_headers_are_refused_or_describe_their_bytes(tmp_path):
    """A seeded fuzz of the reader's header check (the packer's): every header is
    refused with a BrevisError, never another exception, or each tensor lies inside
    the file, after the header, apart from the others, holds its shape's bytes, and
    reads back as them. The packer accepts exactly the headers the reader does."""
    rng = np.random.default_rng(5)
    accepted = 0
    for case in range(300):
        header, data = mutated_header(rng)
        raw = json.dumps(header).encode()
        if case % 2:
            raw = mutated_bytes(rng, raw)
        whole = original(raw, data)
        if case % 7 == 0:
            whole = mutated_bytes(rng, whole[:8]) + whole[8:]
        src, brv = tmp_path / f"{case}.safetensors", tmp_path / f"{case}.brv"
        src.write_bytes(whole)
        _store_unchecked(brv, whole)
        try:
            f = brevis.safe_open(brv, framework="numpy")
        except brevis.BrevisError as e:
            prefix = f"{brv}: its original is not a safetensors file: "
            assert str(e).startswith(prefix), e
            with pytest.raises(brevis.BrevisError) as packer:
                brevis.pack(src, tmp_path / f"{case}-packed.brv", level=1)
            assert str(packer.value).endswith(str(e)[len(prefix):]), (packer.value, e)
            continue
        accepted += 1
        header_end = 8 + struct.unpack("<Q", whole[:8])[0]
        spans = sorted((t.start, t.end) for t in f._tensors.values())
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), header
        for name in f.keys():
            t = f._tensors[name]
            assert header_end <= t.start <= t.end <= len(whole), (header, name)
            if t.dtype not in DTYPES:
                continue
            assert t.end - t.start == math.prod(t.shape) * DTYPES[t.dtype][2], (header, name)
            if DTYPES[t.dtype][0] is not None:
                got = f.get_tensor(name)
                assert list(got.shape) == t.shape and got.tobytes() == whole[t.start:t.end]
        brevis.pack(src, tmp_path / f"{case}-packed.brv", level=1)
    assert 30 < accepted < 270, accepted


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
