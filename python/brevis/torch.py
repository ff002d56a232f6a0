"""Loading archives as torch tensors, like ``safetensors.torch``."""

from ._open import safe_open


def load_file(filename, device="cpu", *, timeout=60.0):
    """Every tensor of the archive `filename` (a path, or an ``s3://``/``https://``
    URL: see ``safe_open``) as a dict of torch tensors on `device`,
    decoded in parallel straight into the tensors' memory and checked (every chunk,
    and the SHA-256 of the whole original). BF16 and F8 tensors keep their dtypes."""
    return safe_open(filename, framework="pt", device=device, timeout=timeout)._load_all()
