"""The document cache's options as a command takes them (``--cache-mb``, ``--cache-dir``,
``--cache-dir-mb``), declared once with their help and checks (the field makers below, which
answer's :class:`CacheOptions`, ``setllm eval``'s and ``setllm serve``'s configs share), and
the one line a command prints on what the cache reused."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import InputError
from .sizes import DEFAULT_DISK_MB, DEFAULT_MB, megabytes
from .stats import CacheStats


def cache_mb_field(default: float | None = DEFAULT_MB):
    """``--cache-mb``, declared here for every command that takes it (answer, eval, serve and
    its replicas); ``default`` None: the command's own default, :data:`DEFAULT_MB` (the
    server tells a size asked for from none)."""
    return field(default=default, metadata={
        "help": f"keep the keys and values of documents read under --variant sbp (the default reading of documents) in at most this "
                f"many MB and reuse them in any order, across questions, orderings and requests (default: {DEFAULT_MB:g}); "
                "0: read every document afresh", "metavar": "MB"})


def cache_dir_field():
    """``--cache-dir``, declared here for every command that takes it."""
    return field(default=None, metadata={
        "help": "also keep them in this folder (safetensors, every byte checked when read), where a later run, a restarted server "
                "or another one sharing the folder finds them; at most --cache-dir-mb", "metavar": "DIR"})


def cache_dir_mb_field():
    """``--cache-dir-mb``, declared here for every command that takes it."""
    return field(default=DEFAULT_DISK_MB, metadata={"help": "most MB of document keys and values in --cache-dir, least recently used out",
                                                    "metavar": "MB"})


@dataclass
class CacheOptions:
    """Where documents read under ``sbp`` are kept (:mod:`setllm.core.doccache`)."""

    cache_mb: float = cache_mb_field()
    cache_dir: str | None = cache_dir_field()
    cache_dir_mb: float = cache_dir_mb_field()

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
