"""Load ``.brv`` archives of ML checkpoints like ``.safetensors`` files, without FUSE.

An archive made by ``brevis pack`` stores a safetensors file losslessly; this package
reads tensors straight out of it, decoding only the chunks they lie in (in parallel,
with the GIL released, each chunk checked against its checksum), and packs, unpacks and
verifies archives:

    >>> import brevis.numpy, brevis.torch
    >>> weights = brevis.torch.load_file("model.brv")          # like safetensors.torch
    >>> with brevis.safe_open("model.brv", framework="pt") as f:
    ...     rows = f.get_slice("embed.weight")[:16]            # decodes only those rows
    >>> brevis.pack("model.safetensors", "model.brv")

Errors are raised as :class:`BrevisError` naming the file and the reason.
"""

from ._brevis import Archive, BrevisError, pack, unpack, verify
from ._open import safe_open

__all__ = ["Archive", "BrevisError", "pack", "unpack", "verify", "safe_open"]
