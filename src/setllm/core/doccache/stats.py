"""What a document cache did (:class:`CacheStats`), and the gauges every server shows of it,
derived from its fields: the single server's ``/metrics``, each Ray replica's stats and the
Ray endpoint's ``/metrics`` read the one list :func:`gauges` gives. No torch: the Ray ingress
reads it without loading a model. A new count is one field here, with its gauge's help."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

PREFIX = "setllm_document_cache_"


def gauge(help_: str, metric: str | None = None, disk: bool = False) -> dict:
    """A field's gauge: its help, its metric's name after :data:`PREFIX` (default: the
    field's name) and whether only a cache with a folder (``--cache-dir``) has it."""
    return {"gauge": help_, "metric": metric, "disk": disk}


@dataclass(frozen=True)
class CacheStats:
    """What a :class:`setllm.core.doccache.DocumentCache` did: lookups that found a piece
    (``hits``, in memory or on disk) or computed it (``misses``), pieces pushed out of memory
    (``evictions``), and what memory holds now; with a disk tier, the pieces found on disk
    (``disk_hits``), written there (``disk_writes``), files refused, pushed out, the folder's
    bytes, and the seconds spent verifying the files read (``disk_check_s``)."""

    hits: int = field(metadata=gauge("Document pieces found in the cache."))
    misses: int = field(metadata=gauge("Document pieces computed (not in the cache)."))
    evictions: int = field(metadata=gauge("Document pieces pushed out by newer ones."))
    bytes: int = field(metadata=gauge("Bytes of keys and values the cache holds."))
    entries: int
    max_bytes: int = field(metadata=gauge("The cache's bound in bytes (--cache-mb)."))
    computed_tokens: int = 0  # tokens of the pieces computed (misses)
    computed_s: float = 0.0  # seconds spent computing them
    reused_tokens: int = 0  # tokens of the pieces found (hits)
    disk_hits: int = field(default=0, metadata=gauge("Document pieces found on disk (--cache-dir, shared by every replica).", disk=True))
    disk_writes: int = field(default=0, metadata=gauge("Document pieces written to disk.", disk=True))
    disk_refused: int = field(default=0, metadata=gauge("Damaged or foreign files refused (and computed again).", disk=True))
    disk_evictions: int = field(default=0, metadata=gauge("Files pushed out of the folder by newer ones.", disk=True))
    disk_bytes: int = field(default=0, metadata=gauge("Bytes of the files the folder holds.", disk=True))
    disk_entries: int = field(default=0, metadata=gauge("Files of the folder this cache knows of (its writes and reads, and the "
                                                        "folder at its start).", disk=True))
    disk_max_bytes: int = field(default=0, metadata=gauge("The folder's bound in bytes (--cache-dir-mb).", disk=True))
    disk_check_s: float = field(default=0.0, metadata=gauge("Seconds spent verifying the files read (checksums).", "disk_check_seconds", disk=True))

    @property
    def saved_s(self) -> float:
        """An estimate of the seconds the hits saved: their tokens at the rate the misses
        were computed (0 before any miss)."""
        return self.reused_tokens * self.computed_s / self.computed_tokens if self.computed_tokens else 0.0

    def gauged(self, disk: bool) -> dict[str, float]:
        """The values of :func:`gauges` (``disk``: a cache with a folder), by field name."""
        return {name: getattr(self, name) for name in gauges(disk)}


def gauges(disk: bool) -> dict[str, tuple[str, str]]:
    """Field name -> (metric name, help) of the gauges a cache shows (``disk``: one with a folder)."""
    return {f.name: (PREFIX + (f.metadata["metric"] or f.name), f.metadata["gauge"]) for f in fields(CacheStats)
            if "gauge" in f.metadata and (disk or not f.metadata["disk"])}
