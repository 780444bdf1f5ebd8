"""The document cache's memory store: pieces' keys and values bounded by bytes, least recently
used out, optionally over a disk tier (:mod:`.tier`); one store per model's weights, kept by
their owner (:mod:`setllm.core.model.owner`): made when setllm wraps the weights under a reading that
caches (:func:`on_by_default`) or by :func:`attach`, shared by every view of the weights.

Shapes: a piece's keys and values are one ``(k [1, Hkv, n, d], v)`` pair per layer.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

import torch

from ...errors import InputError
from ..model.owner import UNSET, owner
from .keys import PieceKey
from .sizes import DEFAULT_DISK_MB, DEFAULT_MB, megabytes
from .stats import CacheStats
from .tier import DiskTier

Layers = list[tuple[torch.Tensor, torch.Tensor]]


class DocumentCache:
    """Keys and values of prompt pieces (a set's prefix, each element), at most ``max_mb``
    megabytes (10**6 bytes) of tensors in memory, least recently used out; with a
    ``directory``, also on disk there (:mod:`.tier`), at most ``disk_mb``.
    Safe to share between threads. ``warn``: say once where a reading cannot use it (a cache
    asked for by name; not the default one)."""

    def __init__(self, max_mb: float = DEFAULT_MB, directory: str | os.PathLike | None = None, disk_mb: float = DEFAULT_DISK_MB,
                 warn: bool = True):
        if megabytes("max_mb", max_mb) == 0:
            raise InputError("max_mb must be > 0 for a cache (0: no cache, as SetLLM.cache_documents(0) says)")
        self.max_bytes = int(max_mb * 1e6)
        self.warn = warn
        self.disk = DiskTier(directory, int(megabytes("disk_mb", disk_mb) * 1e6)) if directory is not None else None
        self._pieces: OrderedDict[PieceKey, tuple[Layers, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = self.evictions = self.bytes = 0
        self.computed_tokens = self.reused_tokens = 0
        self.computed_s = 0.0

    @classmethod
    def scratch(cls) -> DocumentCache:
        """A cache for one call, dropped after it: what a reading with the cache off computes
        through, so that it is the cached reading's computation (module docstring)."""
        cache = cls(warn=False)
        cache.max_bytes = sys.maxsize
        return cache

    def get(self, key: PieceKey) -> Layers | None:
        with self._lock:
            found = self._pieces.get(key)
            if found is not None:
                self._pieces.move_to_end(key)
                self.hits += 1
                self.reused_tokens += found[0][0][0].shape[2]
                return found[0]
        layers = self.disk.get(key) if self.disk is not None else None
        with self._lock:
            if layers is None:
                self.misses += 1
                return None
            self.hits += 1
            self.reused_tokens += layers[0][0].shape[2]
            self._keep(key, layers)
            return layers

    def reused(self, n_tokens: int) -> None:
        """Count a hit of ``n_tokens`` not looked up again (a piece twice in one call)."""
        with self._lock:
            self.hits += 1
            self.reused_tokens += n_tokens

    def put(self, key: PieceKey, layers: Layers, seconds: float = 0.0) -> None:
        """Keep ``layers`` under ``key`` (``seconds``: what computing them took), in memory
        and, with a disk tier, on disk."""
        with self._lock:
            self.computed_tokens += layers[0][0].shape[2]
            self.computed_s += seconds
            self._keep(key, layers)
        if self.disk is not None:
            self.disk.put(key, layers)

    def _keep(self, key: PieceKey, layers: Layers) -> None:
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        if key in self._pieces or size > self.max_bytes:
            return  # a piece larger than the whole cache is computed, used and not kept
        self._pieces[key] = (layers, size)
        self.bytes += size
        self._evict()

    def _evict(self) -> None:
        while self.bytes > self.max_bytes:
            _, (_, dropped) = self._pieces.popitem(last=False)
            self.bytes -= dropped
            self.evictions += 1

    def resize(self, max_mb: float) -> None:
        """A new bound in memory, least recently used out down to it."""
        with self._lock:
            self.max_bytes = int(max_mb * 1e6)
            self._evict()

    def clear(self) -> None:
        """Forget every piece in memory (and on disk, with a disk tier)."""
        with self._lock:
            self._pieces.clear()
            self.bytes = 0
        if self.disk is not None:
            self.disk.clear()

    def stats(self) -> CacheStats:
        with self._lock:
            d = self.disk
            disk = (d.hits, d.writes, d.refused, d.evictions, d.bytes, d.entries, d.max_bytes, d.check_s) if d is not None else ()
            return CacheStats(self.hits, self.misses, self.evictions, self.bytes, len(self._pieces), self.max_bytes,
                              self.computed_tokens, self.computed_s, self.reused_tokens, *disk)


def share(model, reader_of) -> None:
    """``model`` reads through ``reader_of``'s document cache from now on, whatever it is
    attached or resized to later: the documents reader :meth:`setllm.SetLLM.answer` loads beside
    a model answers through the cache that model was given (``cache_documents``,
    ``--cache-dir``). A piece's key names the weights, adapters and variant it was computed
    under, so the two readings never read each other's pieces."""
    owner(model).reads_through = owner(reader_of)
    on_by_default(model)  # the reading that shares it caches: the cache it reads through is on by default, as its own would be


def attach(model, max_mb: float = DEFAULT_MB, directory: str | os.PathLike | None = None, disk_mb: float = DEFAULT_DISK_MB,
           warn: bool = True) -> DocumentCache | None:
    """The document cache of ``model``'s weights (made, or resized, to ``max_mb``), kept by
    their owner (:mod:`setllm.core.model.owner`), so every view of them shares it; ``max_mb=0``: none,
    and none by default either (None). A ``directory`` other than the cache's makes a new
    cache with that disk tier."""
    max_mb, disk_mb = megabytes("max_mb", max_mb), megabytes("disk_mb", disk_mb)
    state = owner(model).documents_owner()
    if max_mb == 0:
        if directory is not None:
            raise InputError("a document cache on disk needs one in memory too: max_mb > 0")
        state.documents = None
        return None
    cache = of(model)
    same_folder = cache is not None and (None if cache.disk is None else cache.disk.directory) == (None if directory is None else Path(directory).expanduser())
    if not same_folder:
        cache = state.documents = DocumentCache(max_mb, directory, disk_mb, warn)
    else:
        cache.resize(max_mb)
        cache.warn = warn
        if cache.disk is not None:
            cache.disk.max_bytes = int(disk_mb * 1e6)
    return cache


def of(model) -> DocumentCache | None:
    """``model``'s document cache, or None where none was attached (or it was switched off)."""
    found = owner(model).documents_owner().documents
    return None if found is UNSET else found


def on_by_default(model) -> None:
    """The cache ``model``'s weights get when setllm wraps them, or makes a view of them, under
    a reading that caches documents (:class:`setllm.reader.Reader`): :data:`DEFAULT_MB` in
    memory, made once; weights wrapped again keep what they have (a cache asked for, or
    switched off)."""
    state = owner(model).documents_owner()
    if state.documents is UNSET:
        state.documents = DocumentCache(DEFAULT_MB, warn=False)


_apart: ContextVar[bool] = ContextVar("setllm_documents_apart", default=False)


@contextlib.contextmanager
def apart() -> Iterator[None]:
    """Readings in this context (this thread's call) compute through a scratch cache: they
    neither find nor leave pieces, in memory or in the folder, and give the cached reading's
    bits all the same. For reads of no user's documents: the server's batching check."""
    token = _apart.set(True)
    try:
        yield
    finally:
        _apart.reset(token)


def for_reading(model) -> DocumentCache:
    """The cache a reading that can reuse documents computes through: the one attached to
    ``model``'s weights (by default since they were wrapped: :func:`on_by_default`); where it
    was switched off (or the weights were never wrapped), or inside :func:`apart`, a
    :meth:`DocumentCache.scratch` one, so the reading is the cached one's computation."""
    return (None if _apart.get() else of(model)) or DocumentCache.scratch()


def forget(model) -> None:
    """Drop ``model``'s document cache for a new default one, as a restarted process has (tests)."""
    owner(model).documents_owner().documents = UNSET
    on_by_default(model)
