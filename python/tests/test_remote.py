"""Archives read straight from object storage (moto's S3 server on loopback):
loads equal safetensors' loads of the originals on every corpus file, a base
archive is found beside its fine-tune in the store, and faults (a stalled,
failing or dropped connection, a replaced object, a missing one, a bad URL)
raise BrevisError naming the URL in bounded time, never wrong bytes."""

import os
import socket
import threading
import time

import numpy as np
import pytest
from safetensors.numpy import load_file as st_numpy_load, save_file as st_numpy_save

import brevis
import brevis.numpy
import brevis.torch
from corpus import HAS_TORCH, NUMPY_DTYPES, corpus_name, dtypes_of

boto3 = pytest.importorskip("boto3", reason="the tests' venv has boto3 (scripts/test/pyenv.sh)")
moto_server = pytest.importorskip("moto.server", reason="the tests' venv has moto[server]")

BUCKET = "models"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def moto():
    """Moto's S3 server on loopback with one bucket; yields its port and a client."""
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    yield port, client
    server.stop()


def use_endpoint(monkeypatch, port):
    """Points the Rust client (the AWS environment) at `port` on loopback."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")


@pytest.fixture(scope="module")
def uploaded(moto, packed):
    """Every corpus archive in the bucket, as {original path: URL}."""
    _, client = moto
    urls = {}
    for src, brv in packed.items():
        key = f"corpus/{corpus_name(src)}.brv"
        client.upload_file(str(brv), BUCKET, key)
        urls[src] = f"s3://{BUCKET}/{key}"
    return urls


def test_loads_from_s3_equal_safetensors_on_every_corpus_file(moto, uploaded, monkeypatch):
    use_endpoint(monkeypatch, moto[0])
    compared = 0
    for src, url in uploaded.items():
        if HAS_TORCH:
            import torch
            from safetensors.torch import load_file as st_torch_load

            ours, theirs = brevis.torch.load_file(url), st_torch_load(src)
            assert list(ours) == list(theirs), url
            for name in theirs:
                assert ours[name].dtype == theirs[name].dtype, (url, name)
                as_bytes = [t.reshape(-1).view(torch.uint8) for t in (ours[name], theirs[name])]
                assert torch.equal(*as_bytes), (url, name)
            compared += 1
        if dtypes_of(src) <= NUMPY_DTYPES:
            ours, theirs = brevis.numpy.load_file(url), st_numpy_load(src)
            assert list(ours) == list(theirs), url
            for name in theirs:
                assert ours[name].dtype == theirs[name].dtype, (url, name)
                assert np.array_equal(ours[name], theirs[name]), (url, name)
            compared += 1
    assert compared >= len(uploaded) // 2


def test_safe_open_from_s3_reads_slices(moto, uploaded, monkeypatch):
    use_endpoint(monkeypatch, moto[0])
    src = next(s for s in uploaded if dtypes_of(s) <= {"F32"})
    theirs = st_numpy_load(src)
    with brevis.safe_open(uploaded[src], framework="numpy") as f:
        assert f.keys() == sorted(theirs)
        name = max(theirs, key=lambda n: theirs[n].size)
        assert np.array_equal(f.get_slice(name)[3:7], theirs[name][3:7])
        assert np.array_equal(f.get_tensor(name), theirs[name])


def test_a_base_is_found_beside_its_fine_tune_in_the_store(moto, tmp_path, monkeypatch):
    port, client = moto
    rng = np.random.default_rng(7)
    base = {"w": rng.standard_normal((512, 256)).astype(np.float32)}
    tuned = {"w": base["w"] + rng.standard_normal((512, 256)).astype(np.float32) * 1e-3}
    for name, tensors in (("base", base), ("tuned", tuned)):
        (tmp_path / name).mkdir()
        st_numpy_save(tensors, str(tmp_path / name / "model.safetensors"))
    brevis.pack(tmp_path / "base", tmp_path / "store" / "base")
    brevis.pack(tmp_path / "tuned", tmp_path / "store" / "tuned", base=tmp_path / "store" / "base")
    for name in ("base", "tuned"):
        client.upload_file(str(tmp_path / "store" / name / "model.brv"), BUCKET, f"ft/{name}/model.brv")
    use_endpoint(monkeypatch, port)
    loaded = brevis.numpy.load_file(f"s3://{BUCKET}/ft/tuned/model.brv")
    assert np.array_equal(loaded["w"], tuned["w"])
    # Without its base the fine-tune does not open, naming what is missing.
    client.delete_object(Bucket=BUCKET, Key="ft/base/model.brv")
    with pytest.raises(brevis.BrevisError, match="base"):
        brevis.numpy.load_file(f"s3://{BUCKET}/ft/tuned/model.brv")


def test_missing_objects_and_bad_urls_raise_naming_the_url(moto, monkeypatch):
    use_endpoint(monkeypatch, moto[0])
    for url in (f"s3://{BUCKET}/no/such.brv", "s3://no-such-bucket/x.brv"):
        with pytest.raises(brevis.BrevisError, match=url.replace(".", r"\.")):
            brevis.safe_open(url, framework="numpy")
    with pytest.raises(brevis.BrevisError, match="s3:///x.brv"):
        brevis.safe_open("s3:///x.brv", framework="numpy")


class Proxy:
    """A TCP proxy to moto that, while `fault` is set, stalls requests
    ("stall"), answers them 500 ("500") or drops their connection ("drop")."""

    def __init__(self, upstream):
        self.upstream, self.fault = upstream, None
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client):
        try:
            server = socket.create_connection(("127.0.0.1", self.upstream))
        except OSError:
            client.close()
            return

        def back():
            try:
                while data := server.recv(1 << 16):
                    client.sendall(data)
            except OSError:
                pass
            client.close()

        threading.Thread(target=back, daemon=True).start()
        try:
            while data := client.recv(1 << 16):
                fault = self.fault
                if fault == "stall":
                    deadline = time.monotonic() + 120
                    while self.fault == "stall" and time.monotonic() < deadline:
                        time.sleep(0.02)
                    break
                if fault == "500":
                    client.sendall(b"HTTP/1.1 500 Internal Server Error\r\n"
                                   b"Content-Length: 0\r\nConnection: close\r\n\r\n")
                    break
                if fault == "drop":
                    break
                server.sendall(data)
        except OSError:
            pass
        for s in (client, server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def test_network_faults_raise_in_bounded_time_never_wrong_bytes(moto, tmp_path, monkeypatch):
    port, client = moto
    rng = np.random.default_rng(3)
    # 4 MiB tensors, read out of order: each read fetches records no earlier
    # read brought in.
    tensors = {f"t{i}": rng.standard_normal((1024, 1024)).astype(np.float32) for i in range(8)}
    st_numpy_save(tensors, str(tmp_path / "m.safetensors"))
    brevis.pack(tmp_path / "m.safetensors", tmp_path / "m.brv", level=1)
    client.upload_file(str(tmp_path / "m.brv"), BUCKET, "faults/m.brv")
    proxy = Proxy(port)
    use_endpoint(monkeypatch, proxy.port)
    url = f"s3://{BUCKET}/faults/m.brv"
    f = brevis.safe_open(url, framework="numpy", timeout=3)
    assert np.array_equal(f.get_tensor("t0"), tensors["t0"])
    for fault, name in (("stall", "t6"), ("500", "t3"), ("drop", "t5")):
        proxy.fault = fault
        start = time.monotonic()
        with pytest.raises(brevis.BrevisError, match=url.replace(".", r"\.")):
            f.get_tensor(name)
        took = time.monotonic() - start
        proxy.fault = None
        assert took < 20, f"{fault}: took {took:.1f} s"
        # Once the store answers again, the same read gives the right bytes.
        assert np.array_equal(f.get_tensor(name), tensors[name]), fault


def test_a_replaced_object_raises_rather_than_mixing_versions(moto, tmp_path, monkeypatch):
    port, client = moto
    rng = np.random.default_rng(5)
    old = {"w": rng.standard_normal((8192, 256)).astype(np.float32)}
    new = {"w": rng.standard_normal((8192, 256)).astype(np.float32)}
    for name, tensors in (("old", old), ("new", new)):
        st_numpy_save(tensors, str(tmp_path / f"{name}.safetensors"))
        brevis.pack(tmp_path / f"{name}.safetensors", tmp_path / f"{name}.brv", level=1)
    client.upload_file(str(tmp_path / "old.brv"), BUCKET, "replaced/m.brv")
    use_endpoint(monkeypatch, port)
    url = f"s3://{BUCKET}/replaced/m.brv"
    f = brevis.safe_open(url, framework="numpy", timeout=5)
    assert np.array_equal(f.get_slice("w")[:8], old["w"][:8])
    client.upload_file(str(tmp_path / "new.brv"), BUCKET, "replaced/m.brv")
    with pytest.raises(brevis.BrevisError, match="changed"):
        f.get_tensor("w")
    # Opened again: the new version, whole.
    assert np.array_equal(brevis.numpy.load_file(url)["w"], new["w"])
