"""The document cache's options as a command takes them (``--cache-mb``, ``--cache-dir``,
``--cache-dir-mb``), declared once with their help and checks, and the one line a command
prints on what the cache reused."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...errors import InputError
from .sizes import DEFAULT_DISK_MB, DEFAULT_MB, megabytes

if TYPE_CHECKING:  # the store imports torch; the server's config and the Ray ingress read these flags without it
    from .store import CacheStats


@dataclass
class CacheOptions:
    """Where documents read under ``sbp`` are kept (:mod:`setllm.core.doccache`)."""

    cache_mb: float = field(default=DEFAULT_MB, metadata={
        "help": f"keep the keys and values of documents read under --variant sbp (the default reading of documents) in at most this "
                f"many MB and reuse them in any order (default: {DEFAULT_MB:g}); 0: read every document afresh", "metavar": "MB"})
    cache_dir: str | None = field(default=None, metadata={
        "help": "also keep them in this folder (safetensors, every byte checked when read), where a later run or a server finds "
                "them; at most --cache-dir-mb", "metavar": "DIR"})
    cache_dir_mb: float = field(default=DEFAULT_DISK_MB, metadata={
        "help": "most MB of document keys and values in --cache-dir, least recently used out", "metavar": "MB"})

    def __post_init__(self) -> None:
        check_flags(self.cache_mb, self.cache_dir, self.cache_dir_mb)

    def attach(self, lm):
        """``lm``'s document cache as these options say (None: off)."""
        return lm.cache_documents(self.cache_mb, self.cache_dir, self.cache_dir_mb)


def check_flags(cache_mb: float | None, cache_dir: str | None, cache_dir_mb: float) -> None:
    """The checks of a command's cache flags, in its flags' names (``cache_mb`` None: the
    command's default), as answer, eval and serve take them."""
    if cache_mb is not None:
        megabytes("--cache-mb", cache_mb)
    megabytes("--cache-dir-mb", cache_dir_mb)
    if cache_dir is not None and cache_mb == 0:
        raise InputError("--cache-dir keeps the document cache on disk: it needs --cache-mb > 0")


def reuse_line(s: CacheStats) -> str:
    """One line on what a cache reused and computed (and, with a folder, what it read, wrote and refused there)."""
    line = (f"document cache: reused {s.hits} piece{'s' * (s.hits != 1)} ({s.reused_tokens} tokens), "
            f"computed {s.misses} ({s.computed_tokens} tokens in {s.computed_s:.2f} s)")
    if s.disk_max_bytes:
        line += f"; on disk {s.disk_hits} read, {s.disk_writes} written, {s.disk_refused} refused"
    return line
