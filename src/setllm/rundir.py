"""A run directory (``setllm eval --out``, ``setllm train --out``): created and checked
writable before any work, and locked for the run so that two processes never write one."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import InputError

LOCK_FILE = ".lock"


def prepare_dir(out: str | Path) -> Path:
    """``--out`` created if need be, and writable, or one line saying why not."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"--out {out}: cannot create it ({e.strerror})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise InputError(f"--out {out}: not writable")
    return out


@contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold ``out``'s lock for the run: a second process writing the same ``--out`` is
    refused instead of interleaving its predictions with ours."""
    f = (out / LOCK_FILE).open("a")
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"--out {out}: another setllm process is writing there (lock {out / LOCK_FILE})") from None
        yield
    finally:
        f.close()  # closing releases the lock
