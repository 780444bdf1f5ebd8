"""Attention masks as composable predicates; each backend's renderer is found in
:data:`setllm.core.attention.renderers.RENDERERS`.

Shapes: B batch, H heads, Q query tokens, K key tokens (cache + new).
A mask function is ``fn(b, h, q, kv) -> bool`` on index tensors that broadcast
(dense rendering) or are scalars (flex attention's vmap); True means "q may attend to kv".
``q`` and ``kv`` are absolute token indices in the sequence (cache included).

Per-token facts come from a :class:`TokenLayout` (all ``[B, K]``), so one definition serves
prefill, cached scoring and decoding, and training batches with any padding side.

The Set-LLM mask for ``Q {a1 a2, b1} A`` plus a one-token response ``R``
(■ = attend, ⬚ = blocked; rows are queries)::

         Q a1 a2 b1 A  R
    Q    ■  ■  ■  ■ ■  ⬚
    a1   ■  ■  ■  ⬚ ■  ⬚
    a2   ■  ■  ■  ⬚ ■  ⬚
    b1   ■  ⬚  ⬚  ■ ■  ⬚
    A    ■  ■  ■  ■ ■  ⬚
    R    ■  ■  ■  ■ ■  ■

``prefix`` is the same without the two ⬚ blocks between elements; ``causal`` is the lower
triangle; ``sbp`` is the lower triangle without the ⬚ blocks between
elements (Set-Based Prompting, McIlroy-Young et al. 2024). Each kind is defined once, in
:data:`MASK_KINDS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from .variants import MaskKind

MaskFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class TokenLayout:
    """What each token slot is, per sequence. All tensors ``[B, K]``.

    Attributes:
        valid: a real token (False for padding).
        is_prompt: part of the prompt (bidirectional under prefix masks).
        set_ids: set index of the token, -1 outside sets.
        element_ids: element index within its set, -1 outside sets.
        positions: the position id the model reads for the token (SetPE, PE or NoPE), the
            clock of sliding windows (:func:`window_mask`).
    """

    valid: torch.Tensor
    is_prompt: torch.Tensor
    set_ids: torch.Tensor
    element_ids: torch.Tensor
    positions: torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.valid.shape)  # type: ignore[return-value]

    def index_select(self, rows: torch.Tensor) -> TokenLayout:
        """Rows picked (and repeated) by ``rows``: one per option when scoring."""
        return TokenLayout(*(t.index_select(0, rows) for t in self._fields()))

    def to(self, device) -> TokenLayout:
        return TokenLayout(*(t.to(device) for t in self._fields()))

    def cat(self, other: TokenLayout) -> TokenLayout:
        """Append ``other``'s tokens after this layout's (along K)."""
        return TokenLayout(*(torch.cat([a, b], dim=1) for a, b in zip(self._fields(), other._fields())))

    def _fields(self) -> tuple[torch.Tensor, ...]:
        return self.valid, self.is_prompt, self.set_ids, self.element_ids, self.positions


def and_masks(*fns: MaskFn) -> MaskFn:
    def fn(b, h, q, kv):
        out = fns[0](b, h, q, kv)
        for f in fns[1:]:
            out = out & f(b, h, q, kv)
        return out

    return fn


def or_masks(*fns: MaskFn) -> MaskFn:
    def fn(b, h, q, kv):
        out = fns[0](b, h, q, kv)
        for f in fns[1:]:
            out = out | f(b, h, q, kv)
        return out

    return fn


def causal_mask(b, h, q, kv):
    return kv <= q


def prefix_mask(layout: TokenLayout) -> MaskFn:
    """Every token sees every prompt token (OR it with causal for the response)."""
    return lambda b, h, q, kv: layout.is_prompt[b, kv]


def set_mask(layout: TokenLayout) -> MaskFn:
    """Tokens of different elements of the same set do not see each other."""

    def fn(b, h, q, kv):
        s_q, s_kv = layout.set_ids[b, q], layout.set_ids[b, kv]
        same_set = (s_q == s_kv) & (s_q >= 0)
        return ~same_set | (layout.element_ids[b, q] == layout.element_ids[b, kv])

    return fn


def padding_mask(layout: TokenLayout) -> MaskFn:
    """Padding is never attended to, and attends to nothing but itself: no softmax row is
    empty (an all-masked row gives NaN in some kernels, and NaN would leak through the cache
    into real tokens), and a block-sparse kernel skips every block of padding rows (a pad
    row that saw the whole prompt would make them all full; nothing reads what it computes)."""
    return lambda b, h, q, kv: (layout.valid[b, q] & layout.valid[b, kv]) | (q == kv)


def window_mask(layout: TokenLayout, window: int | torch.Tensor) -> MaskFn:
    """A sliding window counted in positions: tokens whose position ids are less than
    ``window`` apart. Under SetPE every element of a set starts at the same position, so
    where the window cuts does not depend on the order of the elements (a window counted in
    token indices would cut a later element where it spares an earlier one). Both ways, as
    transformers' bidirectional window: under a causal mask it is the usual one-sided window
    ``q - kv < window``. Under NoPE every position is 0 and nothing is cut."""
    return lambda b, h, q, kv: (layout.positions[b, q] - layout.positions[b, kv]).abs() < window


class MaskParts(NamedTuple):
    """What a mask kind adds to the causal triangle: the data every rule reads (never a kind's name)."""

    bidirectional: bool  # the prompt is read both ways: every token sees every prompt token
    sets_apart: bool  # tokens of different elements of one set do not see each other


# Each mask kind, defined once, by its parts. :func:`variant_mask` composes them; flex attention
# folds the same parts into the layout's tensors (:meth:`setllm.core.attention.flex.FlexLayout.of`), and
# every backend renders from one of these two (:data:`setllm.core.attention.renderers.RENDERERS`); the
# document cache reads a kind whose elements are apart and whose prompt is causal (an element
# then depends on nothing after it); element blocks split a bidirectional prompt whose elements
# are apart. A new kind is one line here (and its name and label in :mod:`setllm.core.layout.variants`).
MASK_KINDS: dict[MaskKind, MaskParts] = {
    "causal": MaskParts(bidirectional=False, sets_apart=False),
    "prefix": MaskParts(bidirectional=True, sets_apart=False),
    "setmask": MaskParts(bidirectional=True, sets_apart=True),
    "sbp": MaskParts(bidirectional=False, sets_apart=True),
}


def kind_parts(kind: MaskKind) -> MaskParts:
    """The :class:`MaskParts` of a mask kind (see :data:`MASK_KINDS`)."""
    try:
        return MASK_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown mask kind {kind!r}") from None


def variant_mask(kind: MaskKind, layout: TokenLayout, window: int | None = None) -> MaskFn:
    """The full mask predicate of a variant's mask kind, within a sliding ``window`` if given."""
    bidirectional, sets = kind_parts(kind)
    visible = or_masks(causal_mask, prefix_mask(layout)) if bidirectional else causal_mask
    if sets:
        visible = and_masks(visible, set_mask(layout))
    if window is not None:
        visible = and_masks(visible, window_mask(layout, window))
    return and_masks(visible, padding_mask(layout))


def render_bool(fn: MaskFn, batch: int, q_len: int, kv_len: int, q_offset: int = 0, device=None) -> torch.Tensor:
    """Dense boolean mask ``[B, 1, Q, K]`` (True = attend): ``fn`` on every (query, key) pair."""
    b = torch.arange(batch, device=device).view(-1, 1, 1, 1)
    h = torch.zeros(1, dtype=torch.long, device=device).view(1, 1, 1, 1)
    q = (torch.arange(q_len, device=device) + q_offset).view(1, 1, -1, 1)
    kv = torch.arange(kv_len, device=device).view(1, 1, 1, -1)
    return fn(b, h, q, kv).expand(batch, 1, q_len, kv_len)


def additive(allowed: torch.Tensor, dtype) -> torch.Tensor:
    """A bool mask as an additive one (0 = attend, -inf = blocked) in ``dtype``: what eager
    attention needs (it would add a bool mask as 0/1, letting masked keys through) and what
    sdpa makes of a bool mask at every layer. The one conversion; no row is empty
    (:func:`padding_mask`), so -inf never makes a NaN."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, float("-inf"))
