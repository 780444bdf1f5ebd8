"""Packed forwards: the tokens of many requests in one row, attention per request.

Scoring runs many prompts (and then many option rows) in one forward. Every layer but
attention works token by token, so their tokens are packed into one row of real tokens
only, and the linear layers multiply that row in fixed blocks (see :mod:`setllm.core.forward.scoring`).
Attention is the one place where tokens meet: :func:`block_attention` runs each request
on a block of its own, its queries and keys gathered out of the packed row and padded to a
shape fixed by the request alone (:class:`AttentionBlock`), with the request's own mask (rendered
by :data:`setllm.core.attention.renderers.RENDERERS`: ``packed``, or ``flex_attention`` below). Requests whose
blocks have the same shape are stacked into one attention call; a block's result does not
depend on the others stacked with it, as a row of a fixed-shape product does not.

A long prompt's block runs on flex attention instead (:mod:`setllm.core.attention.flex`): its mask
stays a predicate over the request's layout, the BlockMask is built once per forward (at the
first layer) and shared by every layer, and the block runs alone, so its shape (a
:func:`setllm.core.attention.flex.bucket` size) is still fixed by the request alone. Whether a block
runs on flex is decided by its length and the device (:func:`setllm.core.forward.runtime.uses_flex`),
never by what else is in the batch.

The model's attention is installed once (:mod:`setllm.core.model.install`, through transformers'
``AttentionInterface``); :func:`blocks_on` selects :func:`block_attention` for one call.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from ..layout.masks import TokenLayout, additive
from ..layout.variants import MaskKind
from ..model import install
from . import flex
from .renderers import MaskSpec, render

PAD = -1  # a gathered position that is padding (reads packed row 0, masked or never read)


@dataclass(frozen=True)
class FlexMask:
    """A block's mask for flex attention: its kind, its layout ``[1, K]`` and the model's
    sliding window (None: the model has no window)."""

    kind: MaskKind
    layout: TokenLayout
    window: int | None = None


@dataclass(frozen=True)
class DenseMask:
    """A block's dense mask, still a predicate: its kind over its layout ``[1, K]`` (the
    queries its last slots), within the model's sliding window on the layers that slide
    (None: the model has no window). Rendered once per group of blocks (:func:`plan`)."""

    kind: MaskKind
    layout: TokenLayout | tuple[list, ...]  # or its fields in lists (valid, is_prompt, set_ids, element_ids, positions)
    window: int | None = None


@dataclass(frozen=True)
class AttentionBlock:
    """One request's attention block: the packed query and key index of each of its rows and
    keys (``PAD`` for padding), and its mask: given ``[Q, K]`` (True = attend; ``windowed``
    the same within the model's sliding window, None: the model has no window), a
    :class:`DenseMask` predicate (``dense``), or a :class:`FlexMask` (the block runs on flex)."""

    queries: Sequence[int]
    keys: Sequence[int]
    mask: torch.Tensor | None = None
    windowed: torch.Tensor | None = None
    flex: FlexMask | None = None
    dense: DenseMask | None = None


def dense_block(queries: Sequence[int], keys: Sequence[int], kind: MaskKind, layout: TokenLayout | tuple[list, ...], window: int | None) -> AttentionBlock:
    """A block with a dense mask: ``kind``'s mask over ``layout [1, K]`` (one slot per key; or
    its fields in lists, :class:`DenseMask`),
    the queries being its last ``len(queries)`` slots, and the same within the model's
    sliding ``window`` (None: no window). Rendered with the other blocks of its shape, in
    one computation for the group (a mask is booleans: the same whichever way it is made)."""
    return AttentionBlock(queries, keys, dense=DenseMask(kind, layout, window))


@dataclass(frozen=True)
class _Group:
    """Attention blocks of one shape, stacked: gather indices ``[G, Q]``/``[G, K]`` (padding
    points at packed row 0, a real token: a padded key is masked, so its value adds exactly 0,
    and a padded query's output is never read), masks ``[G, 1, Q, K]``, and where real query
    rows go (``rows``: packed index; ``block``/``row``: its place in ``[G, Q]``)."""

    queries: torch.Tensor
    keys: torch.Tensor
    mask: torch.Tensor | None
    windowed: torch.Tensor | None
    rows: torch.Tensor
    block: torch.Tensor
    row: torch.Tensor
    flex: FlexMask | None = None  # one block on flex attention (G = 1)
    on_device: dict = field(default_factory=dict)  # index tensors and masks on the device, made at the first layer

    def gather(self, x: torch.Tensor, heads: tuple[torch.Tensor, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
        """``x [1, Hx, S, d]`` gathered to ``[G, Hx, T, d]`` at packed ``tokens [G, T]``
        (``heads``: the batch index ``[1, 1, 1]`` and every head ``[1, Hx, 1]``), in one
        indexing op; ``tokens`` is moved to the device once per forward."""
        return x[(*heads, self.tokens_on(tokens, x.device))]

    def tokens_on(self, tokens: torch.Tensor, device) -> torch.Tensor:
        """``tokens [G, T]`` as ``[G, 1, T]`` on ``device``, made once per forward."""
        key = ("tokens", id(tokens), str(device))
        if key not in self.on_device:
            self.on_device[key] = tokens[:, None, :].to(device)
        return self.on_device[key]

    def all_rows(self, n: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """For every one of ``n`` packed rows, its own ``(block, row)`` in this group, or
        ``(0, 0)``: two ``[1, n]`` index tensors on ``device``, made once per forward."""
        key = ("all", n, str(device))
        if key not in self.on_device:
            b, r = [0] * n, [0] * n
            for i, gb, gr in zip(self.rows.tolist(), self.block.tolist(), self.row.tolist()):
                b[i], r[i] = gb, gr
            self.on_device[key] = (torch.tensor([b], device=device), torch.tensor([r], device=device))
        return self.on_device[key]

    def index(self, device) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor, torch.Tensor]:
        """Where the real rows go in ``[1, S]`` (the batch index and ``rows``) and where they
        are in ``[G, Q]`` (``block``, ``row``), on ``device``, made once per forward."""
        key = ("index", str(device))
        if key not in self.on_device:
            rows, block, row = (t.to(device) for t in (self.rows, self.block, self.row))
            self.on_device[key] = (torch.zeros_like(rows), rows), block, row
        return self.on_device[key]

    def dense_mask(self, sliding: bool, dtype, device) -> torch.Tensor:
        """This group's mask on ``device``, made once per forward (not once per layer): additive
        (0 / -inf) in ``dtype``, the form sdpa would make of a bool mask at every layer and the
        one the eager formula adds."""
        key = ("dense", sliding, dtype, str(device))
        if key not in self.on_device:
            mask = self.windowed if sliding else self.mask
            if mask is None:
                raise RuntimeError("a sliding layer, but the plan has no windowed masks (built for a model without a window?)")
            self.on_device[key] = additive(mask.to(device), dtype)
        return self.on_device[key]

    def block_mask(self, sliding: bool, device):
        """The flex BlockMask of this one-block group, built once per forward (every layer shares it)."""
        if sliding not in self.on_device:
            f = self.flex
            spec = MaskSpec(f.kind, f.layout.to(device), self.queries.shape[1], f.window if sliding else None)
            self.on_device[sliding] = render("flex_attention", spec)
        return self.on_device[sliding]


@dataclass(frozen=True)
class Plan:
    """Every attention block of one forward, grouped by shape."""

    groups: list[_Group]
    n_queries: int
    n_keys: int
    on_device: dict = field(default_factory=dict)

    def heads(self, heads: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Gather indices of ``heads`` heads (batch ``[1, 1, 1]``, heads ``[1, H, 1]``), made once per forward."""
        key = (heads, str(device))
        if key not in self.on_device:
            self.on_device[key] = torch.zeros(1, 1, 1, dtype=torch.long, device=device), torch.arange(heads, device=device)[None, :, None]
        return self.on_device[key]


def plan(blocks: Sequence[AttentionBlock], n_queries: int, n_keys: int) -> Plan:
    by_shape: dict[tuple, list[AttentionBlock]] = {}
    for i, s in enumerate(blocks):  # a flex block is a group of its own
        kind = None if s.dense is None else (s.dense.kind, s.dense.window)
        by_shape.setdefault((len(s.queries), len(s.keys), kind) if s.flex is None else ("flex", i), []).append(s)
    return Plan([_group(members) for members in by_shape.values()], n_queries, n_keys)


def _group(members: Sequence[AttentionBlock]) -> _Group:
    queries = torch.tensor([list(s.queries) for s in members])
    keys = torch.tensor([list(s.keys) for s in members])
    real = (queries != PAD).nonzero()  # [R, 2]: (block, row) of each real query
    rows = queries[real[:, 0], real[:, 1]]
    queries, keys = queries.clamp(min=0), keys.clamp(min=0)  # PAD -> packed row 0 (see _Group)
    if members[0].flex is not None:
        return _Group(queries, keys, None, None, rows, real[:, 0], real[:, 1], flex=members[0].flex)
    if members[0].dense is not None:
        mask, windowed = _render_group([s.dense for s in members], queries.shape[1])
    else:
        mask = torch.stack([s.mask for s in members])[:, None]
        windowed = torch.stack([s.windowed for s in members])[:, None] if members[0].windowed is not None else None
    return _Group(queries, keys, mask, windowed, rows, real[:, 0], real[:, 1])


def _render_group(masks: Sequence[DenseMask], q_len: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The masks ``[G, 1, Q, K]`` of blocks of one shape, kind and window, rendered at once
    over their stacked layouts (and within the window, or None)."""
    first = masks[0]
    if isinstance(first.layout, TokenLayout):
        layout = TokenLayout(*(torch.cat(f) for f in zip(*(m.layout._fields() for m in masks))))  # [G, K]
    else:  # fields in lists: one tensor per field for the group
        layout = TokenLayout(*(torch.tensor(f) for f in zip(*(m.layout for m in masks))))

    def rendered(w):
        return render("packed", MaskSpec(first.kind, layout, q_len, w))

    return rendered(None), rendered(first.window) if first.window is not None else None


_PLAN: contextvars.ContextVar[Plan] = contextvars.ContextVar("setllm_attention_plan")


def block_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kwargs):
    """Attention of a packed row ``query [1, H, Sq, d]``, ``key/value [1, Hkv, Sk, d]``,
    block by block as the current :class:`Plan` says. The ``attention_mask`` transformers
    passes is a placeholder; a layer that slides says so by its ``sliding_window`` argument
    and gets the blocks' windowed masks. Returns ``[1, Sq, H, d]`` as transformers'
    attention functions do. A packed row no block queries (the padding after the last
    block's tokens) gets some row's output: nothing reads it."""
    p = _PLAN.get()
    sliding = kwargs.get("sliding_window") is not None
    heads = p.heads(query.shape[1], query.device)  # the query heads' index: [1, H, 1]
    kv_heads = p.heads(key.shape[1], query.device)  # the key heads', [1, Hkv, 1]: attention shares them (grouped-query)
    out = None
    for g in p.groups:
        qg = g.gather(query, heads, g.queries)  # [G, H, Q, d]
        kg, vg = g.gather(key, kv_heads, g.keys), g.gather(value, kv_heads, g.keys)  # [G, Hkv, K, d]
        if g.flex is not None:
            og = flex.attend(qg, kg, vg, g.block_mask(sliding, qg.device), scaling, softcap)
        else:
            og = _attend(qg, kg, vg, g, sliding, scaling, softcap)  # [G, H, Q, d]
        out = _place(out, og, g, query.shape[2])
    return out, None


def _place(out, og: torch.Tensor, g: _Group, n: int) -> torch.Tensor:
    """``out [1, S, H, d]`` with group ``g``'s real rows written at their packed places: the
    first group's output gathered to every packed row at once (one op), the next written in."""
    if out is None:
        b, r = g.all_rows(n, og.device)  # [1, S]
        return og[b, :, r]
    rows, block, row = g.index(og.device)
    return out.index_put_(rows, og[block, :, row])


def _attend(q, k, v, g: _Group, sliding: bool, scaling, softcap):
    """``q [G, H, Q, d]`` over ``k, v [G, Hkv, K, d]`` (each key head shared by ``H / Hkv`` query heads)."""
    mask = g.dense_mask(sliding, q.dtype, q.device)
    if softcap is None:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling, enable_gqa=q.shape[1] != k.shape[1])
    # Soft-capped logits (Gemma 2) have no sdpa kernel: the eager formula. Adding 0 leaves a
    # capped (finite) score as it is, adding -inf blocks it: the bits of a masked_fill.
    k, v = (x.repeat_interleave(q.shape[1] // k.shape[1], dim=1) for x in (k, v))
    scores = (q @ k.transpose(-1, -2)) * (scaling if scaling is not None else q.shape[-1] ** -0.5)
    scores = torch.tanh(scores / softcap) * softcap
    weights = (scores + mask).float().softmax(-1).to(q.dtype)
    return weights.nan_to_num(0.0) @ v  # a padding row masks every key: 0, not NaN


def blocks_on(model, p: Plan):
    """Inside (this thread only), ``model``'s attention runs :func:`block_attention` under plan
    ``p``; the model itself is not changed (:mod:`setllm.core.model.install`)."""
    return install.planned_attention(model, block_attention, _PLAN, p)


def placeholder_mask(device) -> torch.Tensor:
    """A 4D mask transformers passes through untouched (the real masks are in the plan)."""
    return torch.ones(1, 1, 1, 1, dtype=torch.bool, device=device)


# Capturing a forward in a CUDA graph (:mod:`setllm.core.forward.graphs`): the plan's device tensors
# are made before the forward, and a replay copies another plan's into them.


def capturable(p: Plan) -> bool:
    """Whether a forward under ``p`` can be captured: no flex group (its BlockMask is made of
    values the host reads)."""
    return all(g.flex is None for g in p.groups)


def prime(p: Plan, device, dtype, heads: int, kv_heads: int, n: int) -> None:
    """Make every device tensor :func:`block_attention` reads under ``p`` for a packed row of
    ``n`` tokens (``heads`` query heads, ``kv_heads`` key heads), before the forward: the
    masks a layer may ask for (sliding where the plan has windowed masks)."""
    p.heads(heads, device)
    p.heads(kv_heads, device)
    for i, g in enumerate(p.groups):
        g.tokens_on(g.queries, device)
        g.tokens_on(g.keys, device)
        if i:
            g.index(device)
        else:
            g.all_rows(n, device)
        for sliding in (False, True) if g.windowed is not None else (False,):
            g.dense_mask(sliding, dtype, device)


def _dicts(p: Plan) -> list[dict]:
    return [p.on_device, *(g.on_device for g in p.groups)]


def leaves(p: Plan) -> list[torch.Tensor]:
    """Every device tensor of ``p`` (after :func:`prime`), in a fixed order: the plans of one
    structure list tensors of the same shapes in the same order."""
    return [t for d in _dicts(p) for v in d.values() for t in _flat(v)]


def _flat(v) -> list[torch.Tensor]:
    return [v] if isinstance(v, torch.Tensor) else [t for part in v for t in _flat(part)]


def with_leaves(p: Plan, tensors: list[torch.Tensor]) -> Plan:
    """``p`` with its device tensors replaced, in :func:`leaves` order, by ``tensors``."""
    it = iter(tensors)

    def take(v):
        if isinstance(v, torch.Tensor):
            return next(it)
        return tuple(take(part) for part in v)

    own = {k: take(v) for k, v in p.on_device.items()}  # the order of _dicts
    groups = [replace(g, on_device={k: take(v) for k, v in g.on_device.items()}) for g in p.groups]
    plan_ = Plan(groups, p.n_queries, p.n_keys, own)
    if next(it, None) is not None:
        raise ValueError("more tensors than the plan has")
    return plan_


def device_tensor_count(p: Plan) -> int:
    """How many device tensors ``p`` holds: a forward under a primed plan adds none."""
    return sum(len(d) for d in _dicts(p))
