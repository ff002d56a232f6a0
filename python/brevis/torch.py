"""Loading archives as torch tensors, like ``safetensors.torch``."""

from ._open import safe_open


def load_file(filename, device="cpu", *, timeout=60.0, check_sha256=False):
    """Every tensor of the archive `filename` (a path, or an ``s3://``/``https://``
    URL: see ``safe_open``) as a dict of torch tensors on `device`, decoded in
    parallel straight into the tensors' memory, every chunk checked against its
    checksum first (as the mount checks it). With `check_sha256`, the SHA-256 of
    the whole original is checked too, as ``brevis verify`` does (one core hashes
    at about 1.7 GB/s beside the decoding). BF16 and F8 tensors keep their dtypes."""
    opened = safe_open(filename, framework="pt", device=device, timeout=timeout)
    return opened._load_all(check_sha256)
