"""Packed forwards: the tokens of many requests in one row, attention per request.

Scoring runs many prompts (and then many option rows) in one forward. Every layer but
attention works token by token, so their tokens are packed into one row of real tokens
only, and the linear layers multiply that row in fixed blocks (see :mod:`setllm.core.scoring`).
Attention is the one place where tokens meet: :func:`block_attention` runs each request
on a block of its own, its queries and keys gathered out of the packed row and padded to a
shape fixed by the request alone (:class:`AttentionBlock`), with the request's own mask. Requests whose
blocks have the same shape are stacked into one attention call; a block's result does not
depend on the others stacked with it, as a row of a fixed-shape product does not.

A long prompt's block runs on flex attention instead (:mod:`setllm.core.flex`): its mask
stays a predicate over the request's layout, the BlockMask is built once per forward (at the
first layer) and shared by every layer, and the block runs alone, so its shape (a
:func:`setllm.core.flex.bucket` size) is still fixed by the request alone. Whether a block
runs on flex is decided by its length and the device (:func:`setllm.core.runtime.uses_flex`),
never by what else is in the batch.

The attention implementation is registered with transformers' ``AttentionInterface``
(its public hook for custom attention) and switched on only inside :func:`blocks_on`.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from . import flex
from .masks import TokenLayout, render_bool, variant_mask
from .runtime import attention_implementation
from .variants import MaskKind

NAME = "setllm_packed_attention"
PAD = -1  # a gathered position that is padding (reads a zero vector)


@dataclass(frozen=True)
class FlexMask:
    """A block's mask for flex attention: its kind, its layout ``[1, K]`` and the model's
    sliding window (None: the model has no window)."""

    kind: MaskKind
    layout: TokenLayout
    window: int | None = None


@dataclass(frozen=True)
class AttentionBlock:
    """One request's attention block: the packed query and key index of each of its rows and
    keys (``PAD`` for padding), its mask ``[Q, K]`` (True = attend), and the same mask within
    the model's sliding window for the layers that slide (None: the model has no window).
    A block with a :class:`FlexMask` instead runs on flex attention (its dense masks unused)."""

    queries: Sequence[int]
    keys: Sequence[int]
    mask: torch.Tensor | None
    windowed: torch.Tensor | None = None
    flex: FlexMask | None = None


def dense_block(queries: Sequence[int], keys: Sequence[int], kind: MaskKind, layout: TokenLayout, window: int | None) -> AttentionBlock:
    """A block with dense masks: ``kind``'s mask over ``layout [1, K]`` (one slot per key),
    the queries being its last ``len(queries)`` slots, and the same within the model's
    sliding ``window`` (None: no window)."""
    q_len, n = len(queries), layout.shape[1]

    def mask(w):
        return render_bool(variant_mask(kind, layout, w), 1, q_len, n, q_offset=n - q_len)[0, 0]

    return AttentionBlock(queries, keys, mask(None), mask(window) if window is not None else None)


@dataclass(frozen=True)
class _Group:
    """Attention blocks of one shape, stacked: gather indices ``[G, Q]``/``[G, K]`` (padding points
    one past the end, at a zero row), masks ``[G, 1, Q, K]``, and where real query rows go."""

    queries: torch.Tensor
    keys: torch.Tensor
    mask: torch.Tensor
    windowed: torch.Tensor | None
    rows: torch.Tensor  # packed query index of each real row
    picks: torch.Tensor  # flat index into G * Q of the same rows
    flex: FlexMask | None = None  # one block on flex attention (G = 1)
    on_device: dict = field(default_factory=dict)  # masks and indices on the device, made at the first layer

    def on(self, device) -> _Group:
        """This group's index tensors on ``device``, moved there once per forward (every layer reads them)."""
        key = ("index", str(device))
        if key not in self.on_device:
            moved = (self.queries, self.keys, self.rows, self.picks)
            self.on_device[key] = _Group(*(t.to(device) for t in moved[:2]), None, None, *(t.to(device) for t in moved[2:]))
        return self.on_device[key]

    def dense_mask(self, sliding: bool, device) -> torch.Tensor:
        """This group's dense mask on ``device``, moved there once per forward (not once per layer)."""
        key = ("dense", sliding)
        if key not in self.on_device:
            mask = self.windowed if sliding else self.mask
            if mask is None:
                raise RuntimeError("a sliding layer, but the plan has no windowed masks (built for a model without a window?)")
            self.on_device[key] = mask.to(device)
        return self.on_device[key]

    def block_mask(self, sliding: bool, device):
        """The flex BlockMask of this one-block group, built once per forward (every layer shares it)."""
        if sliding not in self.on_device:
            f = self.flex
            layout = flex.FlexLayout.of(f.kind, f.layout.to(device), f.window if sliding else None)
            self.on_device[sliding] = flex.block_mask(layout, self.queries.shape[1], self.keys.shape[1])
        return self.on_device[sliding]


@dataclass(frozen=True)
class Plan:
    """Every attention block of one forward, grouped by shape."""

    groups: list[_Group]
    n_queries: int
    n_keys: int


def plan(blocks: Sequence[AttentionBlock], n_queries: int, n_keys: int) -> Plan:
    by_shape: dict[tuple, list[AttentionBlock]] = {}
    for i, s in enumerate(blocks):  # a flex block is a group of its own
        by_shape.setdefault((len(s.queries), len(s.keys)) if s.flex is None else ("flex", i), []).append(s)
    return Plan([_group(members, n_queries, n_keys) for members in by_shape.values()], n_queries, n_keys)


def _group(members: Sequence[AttentionBlock], n_queries: int, n_keys: int) -> _Group:
    queries = torch.tensor([[n_queries if i == PAD else i for i in s.queries] for s in members])
    keys = torch.tensor([[n_keys if i == PAD else i for i in s.keys] for s in members])
    flat = queries.reshape(-1)
    real = (flat != n_queries).nonzero().squeeze(1)
    if members[0].flex is not None:
        return _Group(queries, keys, None, None, flat[real], real, flex=members[0].flex)
    mask = torch.stack([s.mask for s in members])[:, None]
    windowed = torch.stack([s.windowed for s in members])[:, None] if members[0].windowed is not None else None
    return _Group(queries, keys, mask, windowed, flat[real], real)


_PLAN: contextvars.ContextVar[Plan] = contextvars.ContextVar("setllm_attention_plan")


def block_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kwargs):
    """Attention of a packed row ``query [1, H, Sq, d]``, ``key/value [1, Hkv, Sk, d]``,
    block by block as the current :class:`Plan` says. The ``attention_mask`` transformers
    passes is a placeholder; a layer that slides says so by its ``sliding_window`` argument
    and gets the blocks' windowed masks. Returns ``[1, Sq, H, d]`` as transformers'
    attention functions do."""
    p = _PLAN.get()
    sliding = kwargs.get("sliding_window") is not None
    heads, n_rep = query.shape[1], query.shape[1] // key.shape[1]
    q, k, v = (_with_zero_row(x[0]) for x in (query, key, value))  # [H, S + 1, d]
    out = query.new_zeros(heads, query.shape[2], value.shape[-1])
    for g in p.groups:
        index = g.on(q.device)
        qg = q[:, index.queries].transpose(0, 1)  # [G, H, Q, d]
        if g.flex is not None:  # flex takes the key heads as they are (grouped-query attention)
            kg, vg = k[:, index.keys].transpose(0, 1), v[:, index.keys].transpose(0, 1)
            og = flex.attend(qg, kg, vg, g.block_mask(sliding, qg.device), scaling, softcap)
        else:
            og = _dense(g, sliding, qg, k[:, index.keys], v[:, index.keys], n_rep, scaling, softcap)  # [G, H, Q, d]
        out[:, index.rows] = og.transpose(0, 1).reshape(heads, -1, og.shape[-1])[:, index.picks]
    return out.transpose(0, 1)[None], None


def _dense(g: _Group, sliding: bool, qg, k, v, n_rep: int, scaling, softcap):
    """Attention of a group's blocks with their dense masks; ``k``, ``v``: ``[Hkv, G, K, d]``."""
    kg = k.transpose(0, 1).repeat_interleave(n_rep, dim=1)
    vg = v.transpose(0, 1).repeat_interleave(n_rep, dim=1)
    return _attend(qg, kg, vg, g.dense_mask(sliding, qg.device), scaling, softcap)


def _with_zero_row(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, x.new_zeros(x.shape[0], 1, x.shape[2])], 1)


def _attend(q, k, v, mask, scaling, softcap):
    if softcap is None:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling)
    # Soft-capped logits (Gemma 2) have no sdpa kernel: the eager formula.
    scores = (q @ k.transpose(-1, -2)) * (scaling if scaling is not None else q.shape[-1] ** -0.5)
    scores = torch.tanh(scores / softcap) * softcap
    weights = scores.masked_fill(~mask, float("-inf")).float().softmax(-1).to(q.dtype)
    return weights.nan_to_num(0.0) @ v  # a padding row masks every key: 0, not NaN


@contextmanager
def blocks_on(model, p: Plan):
    """Inside, ``model``'s attention runs :func:`block_attention` under plan ``p``."""
    _register()
    token = _PLAN.set(p)
    try:
        with attention_implementation(model, NAME):
            yield
    finally:
        _PLAN.reset(token)


_registered = False


def _register() -> None:
    global _registered
    if not _registered:
        from transformers import AttentionInterface

        AttentionInterface.register(NAME, block_attention)
        _registered = True


def placeholder_mask(device) -> torch.Tensor:
    """A 4D mask transformers passes through untouched (the real masks are in the plan)."""
    return torch.ones(1, 1, 1, 1, dtype=torch.bool, device=device)
