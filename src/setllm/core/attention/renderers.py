"""One mask renderer per attention backend, all in one registry: :data:`RENDERERS`.

A mask is defined once, as a predicate: a kind's parts composed over a layout
(:func:`setllm.core.layout.masks.variant_mask`). A :class:`MaskSpec` names the mask one forward
needs; each backend's renderer makes of it what that backend reads:

    backend          renders                                            from
    eager, sdpa      additive [B, 1, Q, K] in the model's dtype         masks.render_bool, masks.additive
    flex_attention   a BlockMask over the kind folded into the layout   flex.block_mask
    packed           bool [G, 1, Q, K], made additive on the device     masks.render_bool
                     at a forward's first layer (packed attention's
                     groups, a cached question's pieces)

So a new mask kind renders on every backend from its parts (:data:`setllm.core.layout.masks.MASK_KINDS`)
and a new backend is one renderer here. Element blocks (:mod:`setllm.core.attention.element_blocks`) are
no backend: they choose the blocks a long prompt's attention is read in, and each block's mask
renders as ``packed``.

Every renderer allows the same pairs as the predicate: for the example drawn in
:mod:`setllm.core.layout.masks`, tested for every kind and backend (tests/core/test_masks.py).

Shapes: B rows, Q queries (the layout's last Q tokens), K keys (cache + new).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...errors import InputError
from ..layout.masks import TokenLayout, additive, render_bool, variant_mask
from ..layout.variants import MaskKind
from .flex import FlexLayout, block_mask


@dataclass(frozen=True)
class MaskSpec:
    """The mask one forward reads, before any backend renders it: ``kind``'s predicate over
    ``layout [B, K]`` for its last ``q_len`` tokens (the others are cache), within a sliding
    ``window`` (None: no window)."""

    kind: MaskKind
    layout: TokenLayout
    q_len: int
    window: int | None = None

    @property
    def q_offset(self) -> int:
        return self.layout.shape[1] - self.q_len

    def allowed(self) -> torch.Tensor:
        """``[B, 1, Q, K]`` bool, True = attend: the predicate on every (query, key) pair."""
        batch, kv_len = self.layout.shape
        fn = variant_mask(self.kind, self.layout, self.window)
        return render_bool(fn, batch, self.q_len, kv_len, self.q_offset, self.layout.valid.device)


Renderer = Callable[[MaskSpec, torch.dtype], object]


def _additive(spec: MaskSpec, dtype: torch.dtype) -> torch.Tensor:
    allowed = spec.allowed()
    return additive(allowed, dtype)


def _block_mask(spec: MaskSpec, dtype: torch.dtype):
    # The kind folded into the layout's tensors: one compiled predicate for every kind (core/attention/flex.py).
    return block_mask(FlexLayout.of(spec.kind, spec.layout, spec.window, spec.q_offset), spec.q_len, spec.layout.shape[1])


def _allowed(spec: MaskSpec, dtype: torch.dtype) -> torch.Tensor:
    return spec.allowed()


RENDERERS: dict[str, Renderer] = {
    # eager adds the mask to its scores: a bool mask would add 0/1 and let blocked keys through.
    "eager": _additive,
    # sdpa would make this of a bool mask at every layer: made once per forward, the same
    # values (the same attention) with 3 ops fewer per layer.
    "sdpa": _additive,
    "flex_attention": _block_mask,
    # A packed plan is made on the host before the forward's device and dtype are known: bool
    # now, additive at the first layer (packed_attention._Group.dense_mask).
    "packed": _allowed,
}


def render(backend: str, spec: MaskSpec, dtype: torch.dtype = torch.float32):
    """``spec`` as attention ``backend`` reads it (:data:`RENDERERS`)."""
    renderer = RENDERERS.get(backend)
    if renderer is None:
        raise InputError(f"no mask renderer for attention {backend!r}; one of: {', '.join(RENDERERS)}")
    return renderer(spec, dtype)
