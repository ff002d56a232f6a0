"""Loading archives as numpy arrays, like ``safetensors.numpy``."""

from ._open import safe_open


def load_file(filename, *, timeout=60.0, check_sha256=False):
    """Every tensor of the archive `filename` (a path, or an ``s3://``/``https://``
    URL: see ``safe_open``) as a dict of numpy arrays, decoded in parallel, every
    chunk checked against its checksum first; with `check_sha256`, the SHA-256 of
    the whole original too (see ``brevis.torch.load_file``). Raises TypeError for
    dtypes numpy lacks (BF16, F8): use ``brevis.torch.load_file``."""
    return safe_open(filename, framework="numpy", timeout=timeout)._load_all(check_sha256)
