"""The document cache's bounds in megabytes (10**6 bytes): the defaults and the one check of a
size, shared by the store and a command's flags (:mod:`.options`). No torch here, so the
server's config and the Ray ingress check ``--cache-mb`` without loading it."""

from __future__ import annotations

import math

from ...errors import InputError

DEFAULT_MB = 512.0  # the memory cache's size when none is asked for: ~11,000 tokens of the embedded model's keys and values
DEFAULT_DISK_MB = 2048.0  # the disk tier's bound when a folder is given without one


def megabytes(name: str, value) -> float:
    """``value`` checked as a size in MB (a number >= 0; 0: off)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InputError(f"{name} must be a number of megabytes >= 0 (0: off), got {value!r}")
    return float(value)
