"""Set masks on flex attention that compile once, not once per prompt.

Flex attention compiles its kernel around the ``mask_mod`` it is given, and dynamo guards
the compiled kernel on that function: on its code, on the Python values it captured
(specialised as constants) and on the shapes of the tensors it captured. A mask composed
per variant (``and_masks(or_masks(...))``) with a query offset captured as an int gives
each variant, window and offset its own code or constants, and a long-running server soon
hits dynamo's recompile limit and falls back to an unfused kernel that materialises the
full score matrix. So here:

- **one predicate for every mask kind** (:func:`mask_mod`): the kind is folded into the
  layout's tensors instead of the code, by its parts as :data:`setllm.core.layout.masks.MASK_KINDS`
  defines them (a kind without a bidirectional prompt sees no prompt token as one; a kind
  that keeps no sets apart sees no sets), the window and the query offset are 0-dim
  tensors. Every variant, window and offset runs the same code with tensors of the same
  dtypes: one compilation per shape;
- **lengths in buckets** (:func:`bucket`) where shapes are static (the CPU: torch 2.13's
  dynamic-shape CPU kernel fails to compile), dynamic shapes on CUDA;
- the BlockMask is built by a compiled ``create_block_mask`` (``_compile=True``: block by
  block, never over the full ``N x N`` grid) once per forward, and shared by every layer.

The predicate is still the composition of :mod:`setllm.core.layout.masks`' predicates (tested
equal to :func:`setllm.core.layout.masks.variant_mask` for every kind); only its inputs changed.

Shapes: B rows, H heads, Q queries, K keys, d head size.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ..layout.masks import TokenLayout, and_masks, causal_mask, kind_parts, or_masks, padding_mask, prefix_mask, set_mask, window_mask
from ..layout.variants import MaskKind

BLOCK = 128  # flex attention's block size: lengths are padded to multiples of it
NO_WINDOW = 2**30  # a window wider than any context: the predicate stays the same code


@dataclass(frozen=True)
class FlexLayout:
    """A :class:`TokenLayout` with its mask kind folded into the tensors (all ``[B, K]``),
    plus the window and the query offset as 0-dim tensors."""

    layout: TokenLayout
    window: torch.Tensor
    q_offset: torch.Tensor

    @classmethod
    def of(cls, kind: MaskKind, layout: TokenLayout, window: int | None = None, q_offset: int = 0) -> FlexLayout:
        bidirectional, sets = kind_parts(kind)  # the kind's definition, as variant_mask composes it
        none = torch.full_like(layout.set_ids, -1)
        folded = TokenLayout(layout.valid, layout.is_prompt & bidirectional, layout.set_ids if sets else none,
                             layout.element_ids if sets else none, layout.positions)
        device = layout.valid.device
        return cls(folded, torch.tensor(window or NO_WINDOW, device=device), torch.tensor(q_offset, device=device))


def mask_mod(f: FlexLayout):
    """The mask predicate of every kind, reading ``f``'s tensors (see the module docstring)."""
    layout = f.layout
    # The window is a tensor here (masks.window_mask compares with it as with an int): one compilation.
    visible = and_masks(or_masks(causal_mask, prefix_mask(layout)), set_mask(layout), window_mask(layout, f.window), padding_mask(layout))
    return lambda b, h, q, kv: visible(b, h, q + f.q_offset, kv)


def block_mask(f: FlexLayout, q_len: int, kv_len: int):
    """The BlockMask of ``f`` for ``q_len`` queries over ``kv_len`` keys (multiples of
    :data:`BLOCK`), built by a compiled ``create_block_mask``."""
    from torch.nn.attention.flex_attention import create_block_mask

    batch = f.layout.valid.shape[0]
    configure_compiler(f.layout.valid.device.type)
    return create_block_mask(mask_mod(f), batch, None, q_len, kv_len, device=f.layout.valid.device, _compile=True)


def attend(q, k, v, mask, scale=None, softcap=None) -> torch.Tensor:
    """Flex attention of ``q [B, H, Q, d]`` over ``k, v [B, Hkv, K, d]`` under BlockMask
    ``mask`` (soft-capped logits as Gemma 2's), through the one compiled kernel."""
    score_mod = None
    if softcap is not None:
        def score_mod(score, b, h, q_idx, kv_idx):
            return softcap * torch.tanh(score / softcap)
    enable_gqa = q.shape[1] != k.shape[1]
    configure_compiler(q.device.type)
    return _compiled()(q, k, v, score_mod=score_mod, block_mask=mask, scale=scale, enable_gqa=enable_gqa)


@functools.cache
def _compiled():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, fullgraph=True)


RECOMPILE_LIMIT = 64  # room for the handful of shapes, dtypes and score mods a process meets


@functools.cache
def configure_compiler(device_type: str) -> None:
    """torch's compiler set for flex attention once per process, at the first flex attention
    on ``device_type``, never per call (a per-call patch of the global config races between
    threads): static shapes where a CPU reads flex attention (its dynamic-shape kernel fails to
    compile in torch 2.13; lengths come in :func:`bucket` sizes instead), and room for
    :data:`RECOMPILE_LIMIT` compilations. CUDA keeps torch's dynamic shapes unless a CPU flex
    read came first in the same process (then it compiles per bucketed length too)."""
    config = torch._dynamo.config
    if device_type == "cpu":
        config.automatic_dynamic_shapes = False
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)


def padded_length(n: int, device) -> int:
    """The length a block of ``n`` tokens is read at on flex attention: a :func:`bucket` size
    where shapes are static (the CPU), else the next multiple of :data:`BLOCK` (dynamic
    shapes compile once for every length, and padding costs every layer's linear work
    where the padding goes through the layers, as in a batch for generation)."""
    return bucket(n) if torch.device(device).type == "cpu" else -(-n // BLOCK) * BLOCK


def bucket(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`BLOCK` with at most three significant bits
    (128, 256, 384, 512, 640, 768, 896, 1024, 1280, ...): at most 1/8 of padding past 1k
    tokens, and a few dozen shapes up to 64k, so a stream of prompts of new lengths stays
    within a bounded number of compilations where shapes are static."""
    blocks = -(-n // BLOCK)
    step = 1 << max(0, blocks.bit_length() - 3)
    return -(-blocks // step) * step * BLOCK
