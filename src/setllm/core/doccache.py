"""Documents read once: exact, order-free KV caches of a set's elements under Set-Based
Prompting (``variant="sbp"``).

Under ``sbp`` attention is causal, elements of one set do not see each other, and every
element's positions start at the set's start. So an element's keys and values depend only on
the text before its set and on the element itself: computed once, they are the keys and
values it has in any set of documents, in any order, behind the same prefix. A prompt
``prefix {e1, e2, ...} suffix`` is read as: the prefix (its keys and values cached too), each
element not cached yet on the prefix's cache alone, every element's cached keys and values
laid out in the prompt's order, then the suffix on them. Generated tokens go on from there
as after a prefill (:func:`prefill`); options to score run in the suffix's own forward, and
the questions of many requests in one packed forward (:func:`score`), so a question over
cached documents costs its own tokens' share of one forward.

What is equal to what:

- a cached reading and one with the cache off: the same bits, by construction. Every reading
  that can reuse documents computes through a cache (with it off, a scratch one dropped after
  the call: :meth:`DocumentCache.scratch`), and a piece is computed one way only: the prefix
  in a forward of its own, the missing elements of a call in packed forwards
  (:func:`_compute_elements`) in which each has an attention block whose shape its prefix and
  itself fix and the linear layers multiply fixed row blocks. So an element's keys and values
  are the same bits computed alone, among others, earlier, or read back from disk;
- such a reading and the scoring driver's one forward over the whole prompt
  (:func:`setllm.core.scoring.prefill`): equal up to float rounding (other shapes, other
  kernels; within 1e-5 in fp32: tests/core/test_doccache.py);
- two cached readings of one set in any order: the same bits, as exact mode sorts the elements
  (the same pieces, the same forwards), and an element's cached keys are the same tensors
  whatever set it came in;
- a scored request alone and among others: the same bits (:func:`score` packs requests as the
  scoring driver does: fixed row blocks, an attention block per request).

Prompt-bidirectional variants (``setmask-*``, ``prefix-*``) cannot reuse a document (it sees
the question), and neither can canonical order or the causal readings (an element sees the
ones before it): those read as before (:func:`unusable` says why).

The cache is bounded by bytes (the keys and values it holds, counted exactly), least recently
used out, and keyed by the weights, the adapter, the variant, the prefix's tokens and the
element's tokens; under ``sbp`` one of :data:`DEFAULT_MB` is on by default (:func:`for_reading`).
The weights' fingerprint is taken again after any in-place write to a parameter (training).
With a folder, pieces are also kept on disk (:mod:`setllm.core.doctier`).

Shapes: Hkv key heads, n tokens, d head size; a piece's keys and values are one
``(k [1, Hkv, n, d], v)`` pair per layer.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import InputError
from . import packed_attention
from .batch import collate, continuation_layout, round_up
from .doctier import DiskTier
from .encoding import EncodedPrompt
from .fingerprint import weights_fingerprint
from .fit import sliding_window
from .kvcache import new_cache, output_cache
from .masks import TokenLayout
from .runtime import forward
from .scoring import (
    OPTION_BUCKET,
    PROMPT_BUCKET,
    fixed_rows,
    option_scores,
    packed_forward,
)
from .variants import Variant

Layers = list[tuple[torch.Tensor, torch.Tensor]]
GROUP_TOKENS = 2048  # most tokens (prefixes and elements) in one forward computing missing elements


DEFAULT_MB = 512.0  # the memory cache's size when none is asked for: ~11,000 tokens of the embedded model's keys and values
DEFAULT_DISK_MB = 2048.0  # the disk tier's bound when a folder is given without one


@dataclass(frozen=True)
class CacheStats:
    """What a :class:`DocumentCache` did: lookups that found a piece (``hits``, in memory or
    on disk) or computed it (``misses``), pieces pushed out of memory (``evictions``), and
    what memory holds now; with a disk tier, the pieces found on disk (``disk_hits``),
    written there (``disk_writes``), files refused, pushed out, and the folder's bytes."""

    hits: int
    misses: int
    evictions: int
    bytes: int
    entries: int
    max_bytes: int
    computed_tokens: int = 0  # tokens of the pieces computed (misses)
    computed_s: float = 0.0  # seconds spent computing them
    reused_tokens: int = 0  # tokens of the pieces found (hits)
    disk_hits: int = 0
    disk_writes: int = 0
    disk_refused: int = 0
    disk_evictions: int = 0
    disk_bytes: int = 0
    disk_entries: int = 0
    disk_max_bytes: int = 0

    @property
    def saved_s(self) -> float:
        """An estimate of the seconds the hits saved: their tokens at the rate the misses
        were computed (0 before any miss)."""
        return self.reused_tokens * self.computed_s / self.computed_tokens if self.computed_tokens else 0.0


def megabytes(name: str, value) -> float:
    """``value`` checked as a size in MB (a number >= 0; 0: off)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InputError(f"{name} must be a number of megabytes >= 0 (0: off), got {value!r}")
    return float(value)


class DocumentCache:
    """Keys and values of prompt pieces (a set's prefix, each element), at most ``max_mb``
    megabytes (10**6 bytes) of tensors in memory, least recently used out; with a
    ``directory``, also on disk there (:mod:`setllm.core.doctier`), at most ``disk_mb``.
    Safe to share between threads. ``warn``: say once where a reading cannot use it (a cache
    asked for by name; not the default one)."""

    def __init__(self, max_mb: float = DEFAULT_MB, directory: str | os.PathLike | None = None, disk_mb: float = DEFAULT_DISK_MB,
                 warn: bool = True):
        if megabytes("max_mb", max_mb) == 0:
            raise InputError("max_mb must be > 0 for a cache (0: no cache, as SetLLM.cache_documents(0) says)")
        self.max_bytes = int(max_mb * 1e6)
        self.warn = warn
        self.disk = DiskTier(directory, int(megabytes("disk_mb", disk_mb) * 1e6)) if directory is not None else None
        self._pieces: OrderedDict[tuple, tuple[Layers, int]] = OrderedDict()
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

    def get(self, key: tuple) -> Layers | None:
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

    def put(self, key: tuple, layers: Layers, seconds: float = 0.0) -> None:
        """Keep ``layers`` under ``key`` (``seconds``: what computing them took), in memory
        and, with a disk tier, on disk."""
        with self._lock:
            self.computed_tokens += layers[0][0].shape[2]
            self.computed_s += seconds
            self._keep(key, layers)
        if self.disk is not None:
            self.disk.put(key, layers)

    def _keep(self, key: tuple, layers: Layers) -> None:
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
            disk = (d.hits, d.writes, d.refused, d.evictions, d.bytes, d.entries, d.max_bytes) if d is not None else ()
            return CacheStats(self.hits, self.misses, self.evictions, self.bytes, len(self._pieces), self.max_bytes,
                              self.computed_tokens, self.computed_s, self.reused_tokens, *disk)


_attached: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # weights -> their cache, or None: off
_fingerprints: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


_shared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # weights -> the model whose cache they read through


def share(model, owner) -> None:
    """``model`` reads through ``owner``'s document cache from now on, whatever it is attached
    or resized to later: the documents reader :meth:`setllm.SetLLM.answer` loads beside a model
    answers through the cache its owner was given (``cache_documents``, ``--cache-dir``). A
    piece's key names the weights, adapter and variant it was computed under, so the two
    readings never read each other's pieces."""
    _shared[_weights(model)] = owner


def _cache_key(model):
    """The weights whose cache ``model`` uses: its own, or its owner's (:func:`share`)."""
    own = _weights(model)
    owner = _shared.get(own)
    return own if owner is None else _cache_key(owner)


def attach(model, max_mb: float = DEFAULT_MB, directory: str | os.PathLike | None = None, disk_mb: float = DEFAULT_DISK_MB,
           warn: bool = True) -> DocumentCache | None:
    """The document cache of ``model``'s weights (made, or resized, to ``max_mb``), shared by
    every view of them (a PEFT wrapper and the model it wraps are one); ``max_mb=0``: none,
    and none by default either (None). A ``directory`` other than the cache's makes a new
    cache with that disk tier."""
    max_mb, disk_mb = megabytes("max_mb", max_mb), megabytes("disk_mb", disk_mb)
    key = _cache_key(model)
    if max_mb == 0:
        if directory is not None:
            raise InputError("a document cache on disk needs one in memory too: max_mb > 0")
        _attached[key] = None
        return None
    cache = _attached.get(key)
    same_folder = cache is not None and (None if cache.disk is None else cache.disk.directory) == (None if directory is None else Path(directory).expanduser())
    if not same_folder:
        cache = _attached[key] = DocumentCache(max_mb, directory, disk_mb, warn)
    else:
        cache.resize(max_mb)
        cache.warn = warn
        if cache.disk is not None:
            cache.disk.max_bytes = int(disk_mb * 1e6)
    return cache


def of(model) -> DocumentCache | None:
    """``model``'s document cache, or None where none was attached (or it was switched off)."""
    return _attached.get(_cache_key(model))


def for_reading(model) -> DocumentCache:
    """The cache a reading that can reuse documents computes through: the one attached to
    ``model``'s weights; where none was ever attached, one of :data:`DEFAULT_MB` attached now
    (on by default); where it was switched off, a :meth:`DocumentCache.scratch` one."""
    key = _cache_key(model)
    if key not in _attached:
        return attach(model, DEFAULT_MB, warn=False)
    return _attached[key] or DocumentCache.scratch()


def _weights(model):
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def variant_problem(variant: Variant) -> str | None:
    """Why no prompt read under ``variant`` can reuse cached documents, or None."""
    if variant.mask != "sbp":
        return f"variant {variant.name!r} lets a document see text it cannot be cached without (only 'sbp' reads documents apart)"
    return None


def unusable(variant: Variant, enc: EncodedPrompt) -> str | None:
    """Why ``enc`` under ``variant`` cannot reuse cached documents, or None."""
    one_set = {s for s in enc.set_ids if s >= 0} == {0}
    return variant_problem(variant) or (None if one_set else "a prompt with one set is cached (this one has none or several)")


@dataclass(frozen=True)
class _Pieces:
    """Where a one-set prompt's pieces are: token index ranges of the prefix, of each element
    (in the prompt's order) and of the suffix."""

    prefix: range
    elements: list[range]
    suffix: range

    @classmethod
    def of(cls, enc: EncodedPrompt) -> _Pieces:
        inside = [i for i, s in enumerate(enc.set_ids) if s >= 0]
        start, end = inside[0], inside[-1] + 1
        elements, at = [], start
        for i in range(start + 1, end + 1):
            if i == end or enc.element_ids[i] != enc.element_ids[at]:
                elements.append(range(at, i))
                at = i
        return cls(range(start), elements, range(end, len(enc)))


def _pieces(model, variant: Variant, prompts: Sequence[tuple[EncodedPrompt, object]], store: DocumentCache,
            identity: tuple) -> list[tuple[Layers, list[int]]]:
    """For each ``(enc, batch)`` (``batch``: ``enc`` collated, or ``enc`` followed by more
    tokens: the pieces' indices are the same), the keys and values of ``enc`` up to its
    suffix (the prefix's, then each element's, joined) and the suffix's token indices. Each
    piece comes from ``store`` or is computed and kept: a prefix alone, the missing elements
    of all prompts together (:func:`_compute_elements`), each as it would be alone."""
    plans, wanted = [], {}
    for enc, batch in prompts:
        pieces = _Pieces.of(enc)
        prefix_ids = tuple(enc.input_ids[i] for i in pieces.prefix)
        prefix = _prefix(model, variant, batch, pieces.prefix, store, (*identity, prefix_ids)) if prefix_ids else []
        keys = []
        for element in pieces.elements:
            key = (*identity, prefix_ids, tuple(enc.input_ids[i] for i in element))
            keys.append(key)
            if key in wanted:  # again in this call: reused, as a later call would find it
                store.reused(len(element))
            else:
                wanted[key] = store.get(key)
                if wanted[key] is None:
                    wanted[key] = _Missing(prefix, batch, pieces.prefix, element)
        plans.append((prefix, keys, list(pieces.suffix)))
    missing = {k: m for k, m in wanted.items() if isinstance(m, _Missing)}
    if missing:
        start = time.perf_counter()
        computed = _compute_elements(model, variant, list(missing.values()))
        per_token = (time.perf_counter() - start) / sum(len(m.span) for m in missing.values())
        for (key, m), layers in zip(missing.items(), computed):
            store.put(key, layers, per_token * len(m.span))
            wanted[key] = layers
    return [(_joined(([prefix] if prefix else []) + [wanted[k] for k in keys]), suffix) for prefix, keys, suffix in plans]


@dataclass(frozen=True)
class _Missing:
    """An element not in the cache: its tokens ``span`` of a collated prompt ``batch``, read
    after ``prefix`` (the keys and values of tokens ``prefix_span``)."""

    prefix: Layers
    batch: object
    prefix_span: range
    span: range

    def tokens(self) -> tuple[list[int], list[int]]:
        cols = list(self.span)
        return self.batch.input_ids[0, cols].tolist(), self.batch.position_ids[0, cols].tolist()

    def layout(self) -> TokenLayout:
        """The layout of the prefix and this element alone: the element sees nothing of the
        other elements, as the ``sbp`` mask says."""
        index = torch.tensor([*self.prefix_span, *self.span], dtype=torch.long)
        return TokenLayout(*(t.index_select(1, index) for t in self.batch.layout._fields()))


def _groups(missing: Sequence[_Missing], budget: int) -> list[list[int]]:
    """Indices of ``missing`` in groups of at most ``budget`` tokens (prefixes and elements;
    one larger than that is a group of its own)."""
    groups, size = [[]], 0
    for i, m in enumerate(missing):
        n = len(m.span) + len(m.prefix_span)
        if groups[-1] and size + n > budget:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += n
    return groups


def _compute_elements(model, variant: Variant, missing: Sequence[_Missing]) -> list[Layers]:
    """The keys and values of each missing element, packed: one forward per group of at most
    :data:`GROUP_TOKENS` tokens, each element in an attention block of its own over its
    prefix's keys and its own (padded to buckets of their own lengths), linear layers on
    fixed row blocks (:func:`setllm.core.scoring.fixed_rows`). So an element's bits are
    those it gets alone: one element is computed by the same packed forward, a group of one."""
    out: list[Layers] = [None] * len(missing)
    for group in _groups(missing, GROUP_TOKENS):
        for i, layers in zip(group, _compute_group(model, variant, [missing[i] for i in group])):
            out[i] = layers
    return out


def _compute_group(model, variant: Variant, group: Sequence[_Missing]) -> list[Layers]:
    prefixes = {}  # id of a prefix's layers -> (its layers, where it starts in the forward's cache)
    at = 0
    for m in group:
        if m.prefix and id(m.prefix) not in prefixes:
            prefixes[id(m.prefix)] = (m.prefix, at)
            at += m.prefix[0][0].shape[2]
    n_cached = at
    blocks, ids, pos, t = [], [], [], 0
    window = sliding_window(model.config)
    pad = packed_attention.PAD
    for m in group:
        c_at = prefixes[id(m.prefix)][1] if m.prefix else 0
        c, n = len(m.prefix_span), len(m.span)
        cp, tp = round_up(c, PROMPT_BUCKET) - c, round_up(n, OPTION_BUCKET) - n
        queries = [t + j for j in range(n)] + [pad] * tp
        keys = [pad] * cp + [c_at + k for k in range(c)] + [n_cached + t + j for j in range(n)] + [pad] * tp
        layout = _padding(cp).cat(m.layout()).cat(_padding(tp))
        blocks.append(packed_attention.dense_block(queries, keys, variant.mask, layout, window))
        more_ids, more_pos = m.tokens()
        ids += more_ids
        pos += more_pos
        t += n
    plan = packed_attention.plan(blocks, t, n_cached + t)
    cache = _cache_of(_joined([p for p, _ in prefixes.values()])) if prefixes else new_cache()
    with fixed_rows(model):
        out = packed_forward(model, plan, torch.tensor(ids), torch.tensor(pos), cache, torch.tensor([t - 1]))
    layers = output_cache(out).layers
    made, t = [], 0
    for m in group:
        n = len(m.span)
        made.append([(layer.keys[:, :, n_cached + t : n_cached + t + n].clone(), layer.values[:, :, n_cached + t : n_cached + t + n].clone())
                     for layer in layers])
        t += n
    return made


def _prefix(model, variant: Variant, batch, span: range, store: DocumentCache, key: tuple) -> Layers:
    """The keys and values of the prefix, from ``store`` or computed in a forward of its own."""
    found = store.get(key)
    if found is None:
        ids, pos, layout = batch.input_ids, batch.position_ids, batch.layout
        start = time.perf_counter()
        found = _compute(model, variant, ids, pos, layout, [], span)
        store.put(key, found, time.perf_counter() - start)
    return found


@torch.no_grad()
def prefill(model, variant: Variant, enc: EncodedPrompt, store: DocumentCache, identity: tuple, batch=None):
    """``enc`` read through ``store``: the KV cache of the whole prompt and the log-probs of
    the next token ``[1, V]``, the same bits whatever ``store`` holds (module docstring; equal
    to :func:`setllm.core.scoring.prefill`'s up to rounding). ``identity`` names the weights,
    adapter and variant the pieces were computed under; ``batch``: ``enc`` collated, where
    the caller has it."""
    batch = batch or collate([enc], variant.positions, 0)
    [(parts, tail)] = _pieces(model, variant, [(enc, batch)], store, identity)
    cache = _cache_of(parts)
    out = forward(model, variant, batch.input_ids[:, tail], batch.position_ids[:, tail], batch.layout, cache=cache, logits_to_keep=1)
    return output_cache(out), out.logits[:, -1].float().log_softmax(-1)


def score(model, variant: Variant, requests: Sequence, store: DocumentCache, identity: tuple) -> list[list]:
    """Every option of every request scored after its prompt's cached reading
    (:func:`read_options`): one ``TokenScore`` list per request."""
    return [option_scores(first, rows, r.options) for (first, rows), r in zip(read_options(model, variant, requests, store, identity), requests)]


@torch.no_grad()
def read_options(model, variant: Variant, requests: Sequence, store: DocumentCache, identity: tuple) -> list[tuple]:
    """Every option of every request (:class:`setllm.core.scoring.ScoreRequest`) scored after
    its prompt's cached reading, all requests in one packed forward: each request's suffix and
    options are its tokens of that forward, and attend to its own cached pieces and to
    themselves only (:mod:`setllm.core.packed_attention`). The options follow the prompt as
    one more set, so under ``sbp`` each reads the whole prompt and none of the others, at the
    positions a response has, exactly as a response row does. Linear layers multiply fixed
    row blocks and each request's attention block has a shape of its own, as in the scoring
    driver: a request gets the same bits alone or among others. Per request, its next-token
    log-probs ``[1, V]`` (each option's first token) and the log-probs after each option's
    tokens but its last ``[sum(n - 1), V]``, options in order (the same bits whatever
    ``store`` holds, as :func:`prefill`)."""
    asked = [collate([_followed_by_set(r.prompt, r.options)], variant.positions, 0) for r in requests]
    read = _pieces(model, variant, [(r.prompt, b) for r, b in zip(requests, asked)], store, identity)
    asks = [_Ask.of(b, parts, suffix, r.options) for r, b, (parts, suffix) in zip(requests, asked, read)]
    n_cached = sum(a.n_cached for a in asks)
    blocks, ids, pos, keep, c, t = [], [], [], [], 0, 0
    for a in asks:
        blocks.append(a.block(model, variant, c, n_cached + t, t))
        ids += a.tail_ids
        pos += a.tail_positions
        keep += [t + k for k in a.keep]
        c, t = c + a.n_cached, t + len(a.tail_ids)
    plan = packed_attention.plan(blocks, t, n_cached + t)
    cache = _cache_of(_joined([a.pieces for a in asks]))
    with fixed_rows(model):
        out = packed_forward(model, plan, torch.tensor(ids), torch.tensor(pos), cache, torch.tensor(keep))
    logp = out.logits[0].float().log_softmax(-1)
    results, at = [], 0
    for a in asks:
        n = len(a.keep)
        results.append((logp[at : at + 1], logp[at + 1 : at + n]))
        at += n
    return results


@dataclass
class _Ask:
    """One scoring request over cached documents: its prompt's cached pieces (prefix and
    elements, ``n_cached`` tokens), and its tokens to compute: the suffix, then the options
    as one more set."""

    layout: TokenLayout  # of the whole prompt + options, [1, n_cached + tail]
    pieces: Layers
    tail_ids: list[int]
    tail_positions: list[int]
    keep: list[int]  # tail indices whose logits are read: the suffix's last, then each option's tokens but its last

    @classmethod
    def of(cls, batch, pieces: Layers, suffix: list[int], options) -> _Ask:
        """``batch``: the prompt followed by its options as one more set, collated; ``pieces``:
        the prompt's keys and values up to ``suffix`` (its suffix's token indices)."""
        n = suffix[0]
        starts = [len(suffix) + sum(map(len, options[:i])) for i in range(len(options))]
        keep = [len(suffix) - 1, *(s + j for s, o in zip(starts, options) for j in range(len(o) - 1))]  # token j predicts j + 1
        return cls(batch.layout, pieces, batch.input_ids[0, n:].tolist(), batch.position_ids[0, n:].tolist(), keep)

    @property
    def n_cached(self) -> int:
        return self.pieces[0][0].shape[2]

    def block(self, model, variant: Variant, cache_at: int, tail_key_at: int, tail_at: int):
        """This request's attention block: its tail's queries (at ``tail_at`` in the forward)
        over its cached keys (at ``cache_at``) and its tail's keys (at ``tail_key_at``), both
        padded to buckets of their own lengths, so the block's shape is the request's alone."""
        pad = packed_attention.PAD
        c, t = self.n_cached, len(self.tail_ids)
        cp, tp = round_up(c, PROMPT_BUCKET) - c, round_up(t, OPTION_BUCKET) - t
        queries = [tail_at + j for j in range(t)] + [pad] * tp
        keys = [pad] * cp + [cache_at + k for k in range(c)] + [tail_key_at + j for j in range(t)] + [pad] * tp
        layout = _padding(cp).cat(self.layout).cat(_padding(tp))
        return packed_attention.dense_block(queries, keys, variant.mask, layout, sliding_window(model.config))


def _padding(n: int) -> TokenLayout:
    """``n`` padding slots of a one-row layout (the driver pads its option rows alike)."""
    return continuation_layout(torch.zeros(1, n, dtype=torch.bool), torch.zeros(1, n, dtype=torch.long))


def _followed_by_set(enc: EncodedPrompt, rows: Sequence[Sequence[int]]) -> EncodedPrompt:
    """``enc`` with ``rows`` (token ids) after it as the elements of one more set."""
    new_set = max(enc.set_ids, default=-1) + 1
    sets = [new_set for r in rows for _ in r]
    elements = [i for i, r in enumerate(rows) for _ in r]
    return EncodedPrompt([*enc.input_ids, *(t for r in rows for t in r)], [*enc.set_ids, *sets], [*enc.element_ids, *elements])


def generate(model, tokenizer, variant: Variant, enc: EncodedPrompt, store: DocumentCache, identity: tuple, config,
             on_token=None) -> tuple[str, list[int]]:
    """Text and token ids generated after ``enc``'s cached reading, decoded as
    :func:`setllm.core.generation.generate_tokens` decodes a prompt alone."""
    from .generation import generate_tokens

    batch = collate([enc], variant.positions, 0)
    made = prefill(model, variant, enc, store, identity, batch)
    return generate_tokens(model, tokenizer, variant, batch, config, on_token, prefilled=made)[0]


def identity(model, adapter, variant: Variant) -> tuple:
    """What a cached piece was computed under: the weights (a sampled fingerprint, taken again
    whenever a parameter was changed in place, as an optimizer step does), the adapter and the
    variant."""
    base = _weights(model)
    version = sum(p._version for p in model.parameters())  # torch counts in-place writes to a tensor
    known = _fingerprints.get(base)
    if known is None or known[0] != version:
        known = _fingerprints[base] = (version, weights_fingerprint(model))
    active = getattr(model, "active_adapters", None)
    return (known[1], str(adapter), repr(active) if active is not None else None, variant.name)


def _compute(model, variant: Variant, ids, pos, layout: TokenLayout, before: Layers, span: range, before_span: range = range(0)) -> Layers:
    """The keys and values of tokens ``span`` of a prompt, read after ``before`` (the keys and
    values of tokens ``before_span``) alone: for an element, after its prefix, so it sees
    nothing of the other elements, as the ``sbp`` mask says."""
    index = torch.tensor([*before_span, *span], dtype=torch.long)
    sub = TokenLayout(*(t.index_select(1, index) for t in layout._fields()))
    cols = list(span)
    out = forward(model, variant, ids[:, cols], pos[:, cols], sub, cache=_cache_of(before) if before else new_cache())  # under prefill's no_grad
    cache = output_cache(out)
    n = len(before_span)
    return [(layer.keys[:, :, n:].clone(), layer.values[:, :, n:].clone()) for layer in cache.layers]


def _joined(parts: Sequence[Layers]) -> Layers:
    return [(torch.cat([p[i][0] for p in parts], 2), torch.cat([p[i][1] for p in parts], 2)) for i in range(len(parts[0]))]


def _cache_of(layers: Layers):
    cache = new_cache()
    for i, (k, v) in enumerate(layers):
        cache.update(k, v, i)
    return cache
