"""A short hash of a model's weights: what names a reading's weights where a cache of its
documents is kept (in memory or on disk) or a server says which model it runs."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import torch


def weights_fingerprint(model, stride: int = 4099, include: Callable[[str], bool] | None = None,
                        rename: Callable[[str], str] | None = None) -> str:
    """A short hash of a model's weights: names, shapes, and every ``stride``-th value of each
    tensor (a retrained adapter, merged in, moves nearly every value of the matrices it
    touches, so a sample is enough, and hashing stays fast for large models). ``include``:
    which tensors, by name (default: all); ``rename``: the name hashed for each (default: its own)."""
    h = hashlib.sha256()
    with torch.no_grad():
        for name, p in model.state_dict().items():
            if include is not None and not include(name):
                continue
            h.update(f"{rename(name) if rename else name}:{tuple(p.shape)}:{p.dtype}".encode())
            h.update(p.detach().reshape(-1)[::stride].float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]
