"""A question's attention over its cached pieces where they lie: no copy per question.

A question over cached documents (the text after the set, then the options) attends to its
prompt's pieces (the prefix, each document: the store's tensors) and to its own tokens.
Joining the pieces into one tensor per layer copied every key and value of the prompt at
every question (and a KV cache and a gather copied them again). Here each piece is attended
where it lies, one call a piece returning its log-sum-exp, and the parts are put together::

    out = sum_p softmax_p(lse)_p * out_p      p: the pieces in the prompt's order, then the question's own keys

which is softmax attention over all the keys, regrouped (equal to one call over the joined
keys up to rounding). The order of operations is fixed by the prompt alone: one call per
piece at the piece's shape, the pieces in the prompt's order (exact mode sorts a set's
elements), one stack and one weighted sum over them. So a question gets the same bits
whatever the cache holds (a piece computed now or read back from memory or disk is the same
values; where a tensor lies in memory changes nothing: tested), whatever requests share its
forward (each request's calls are its own) and in any order of its set under exact mode.

On the CPU a piece's call is the CPU's flash kernel, which returns the log-sum-exp (for
soft-capped logits, Gemma 2's, the formula in a few ops). That is a device type's choice
(:data:`PER_PIECE`): on a GPU a call is a kernel launch, a few microseconds whatever its size,
while a copy runs at the memory's speed (an H200 copies a 13k-token prompt's 0.6 GB of keys
and values in about 0.3 ms and launches 65 calls a layer in about 10 ms), so there each layer
joins the question's pieces and its own keys once and makes one call. Either way the choice
is the device's, never the batch's or the cache's.

Shapes: H query heads, Hkv key heads (r = H / Hkv query heads share one), t a question's
tokens, n a piece's tokens, N a question's keys (its pieces' and its own), d head size.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..attention.renderers import MaskSpec, render
from ..layout.masks import TokenLayout, additive
from ..layout.variants import MaskKind
from ..model import install

Layers = list[tuple[torch.Tensor, torch.Tensor]]

# A piece no query of the question sees in a layer (outside a sliding window): no call.
UNSEEN = "unseen"
# Device types whose attention makes one call per piece where it lies (module docstring);
# elsewhere each layer joins a question's keys and makes one call.
PER_PIECE = {"cpu"}


@dataclass
class Question:
    """One question of a forward: its tokens ``rows`` of the packed row, its cached pieces in
    the prompt's order (each ``Layers``: keys and values per layer), and the layout of its
    prompt followed by its own tokens ``[1, N]`` that its masks are read off."""

    rows: range
    pieces: Sequence[Layers]
    layout: TokenLayout
    kind: MaskKind
    window: int | None
    _masks: dict = field(default_factory=dict)  # (sliding, r, dtype, device) -> each part's mask, made at the first layer

    def attend(self, query, key, value, layer: int, sliding: bool, scaling, softcap) -> torch.Tensor:
        """This question's rows of the attention output ``[1, t, H, d]``, from the packed row's
        ``query [1, H, S, d]``, ``key/value [1, Hkv, S, d]`` and its pieces at ``layer``."""
        h, hkv, t, d = query.shape[1], key.shape[1], len(self.rows), query.shape[3]
        a, r = self.rows.start, h // hkv
        q = query[:, :, a : a + t].reshape(1, hkv, r * t, d)  # [1, Hkv, r*t, d]: heads sharing a key head side by side
        own = key[:, :, a : a + t], value[:, :, a : a + t]
        per_piece = query.device.type in PER_PIECE
        masks = self._masks_for(sliding, r, query.dtype, query.device, per_piece)
        if per_piece:
            parts = [_attend(q, *piece[layer], m, scaling, softcap) for piece, m in zip(self.pieces, masks) if m is not UNSEEN]
            out = _combined([*parts, _attend(q, *own, masks[-1], scaling, softcap)])  # [1, Hkv, r*t, d]
        else:
            k, v = (torch.cat([*(piece[layer][j] for piece in self.pieces), own[j]], 2) for j in (0, 1))
            out = _attend_all(q, k, v, masks[0], scaling, softcap)
        return out.view(1, h, t, d).transpose(1, 2)

    def _masks_for(self, sliding: bool, r: int, dtype, device, per_piece: bool) -> list:
        """Per piece and then for the question's own keys (or, not ``per_piece``, one for all its
        keys): None (every query sees every key), :data:`UNSEEN`, or ``(additive mask [1, 1,
        r*t, n], rows that see none of it [1, 1, r*t] or None)``; made at the first layer."""
        at = (sliding, r, dtype, str(device), per_piece)
        if at not in self._masks:
            self._masks[at] = _part_masks(self, sliding, r, dtype, device, per_piece)
        return self._masks[at]


def _part_masks(qn: Question, sliding: bool, r: int, dtype, device, per_piece: bool) -> list:
    n, t = qn.layout.shape[1], len(qn.rows)
    allowed = render("packed", MaskSpec(qn.kind, qn.layout, t, qn.window if sliding else None))[0, 0]  # [t, N], cut per piece below
    spans, at = [], 0
    for piece in qn.pieces if per_piece else ():
        size = piece[0][0].shape[2]
        spans.append(range(at, at + size))
        at += size
    spans.append(range(at, n))
    out = []
    for span in spans:
        seen = allowed[:, span.start : span.stop]  # [t, n]
        if bool(seen.all()):
            out.append(None)
        elif not bool(seen.any()) and span.stop != n:
            out.append(UNSEEN)
        else:
            rows = seen.repeat(r, 1)  # [r*t, n]: the question's rows once per query head of a key head
            none = ~rows.any(-1)
            out.append((additive(rows, dtype)[None, None].to(device), none[None, None].to(device) if bool(none.any()) else None))
    return out


def _attend(q, k, v, mask, scaling, softcap) -> tuple[torch.Tensor, torch.Tensor]:
    """``q [1, Hkv, R, d]`` over ``k, v [1, Hkv, n, d]``: the output ``[1, Hkv, R, d]`` and its
    log-sum-exp ``[1, Hkv, R]`` (-inf where a row sees none of the keys)."""
    bias, unseen = mask if mask is not None else (None, None)
    if softcap is None and q.device.type == "cpu":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=bias, scale=scaling)
    else:
        scores = (q @ k.transpose(-1, -2)) * (scaling if scaling is not None else q.shape[-1] ** -0.5)
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        if bias is not None:
            scores = scores + bias
        lse = scores.float().logsumexp(-1)
        out = (scores.float() - lse[..., None]).exp().to(q.dtype) @ v
    if unseen is not None:  # the CPU kernel says 0 for a row that sees nothing, the formula NaN: it weighs nothing
        lse = lse.masked_fill(unseen, float("-inf"))
        out = out.masked_fill(unseen[..., None], 0.0)
    return out, lse


def _attend_all(q, k, v, mask, scaling, softcap) -> torch.Tensor:
    """``q [1, Hkv, R, d]`` over all of a question's keys ``k, v [1, Hkv, N, d]`` in one call
    (no row sees nothing: its own token)."""
    if softcap is None:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask[0], scale=scaling)
    return _attend(q, k, v, mask, scaling, softcap)[0]


def _combined(parts: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """The parts' outputs weighed by their share of the softmax, added in the parts' order:
    ``[1, Hkv, R, d]``. (A row sees at least its own token, so no row's weights are all 0.)
    One product added in place a part: stacking the parts made two temporaries of all of them
    at every layer, 8x the time at 65 pieces on this CPU."""
    weights = torch.softmax(torch.stack([lse for _, lse in parts]), 0).unsqueeze(-1).unbind(0)  # P x [1, Hkv, R, 1]
    wide = parts[0][0].dtype != torch.float32
    out = parts[0][0].float() * weights[0] if wide else parts[0][0] * weights[0]
    for (o, _), w in zip(parts[1:], weights[1:]):
        out.addcmul_(o.float() if wide else o, w)
    return out.to(parts[0][0].dtype) if wide else out


@dataclass(frozen=True)
class Plan:
    """The questions of one forward, in the packed row's order (their rows consecutive from
    row 0; rows after the last question are padding)."""

    questions: Sequence[Question]


_PLAN: contextvars.ContextVar[Plan] = contextvars.ContextVar("setllm_piece_plan")


def piece_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kwargs):
    """Attention of a packed row of questions, each over its own cached pieces and its own
    tokens (:class:`Question`), as transformers' attention functions are called: ``query [1,
    H, S, d]``, ``key/value [1, Hkv, S, d]`` (the row's own, no cache); returns ``[1, S, H,
    d]``. The padding rows after the last question get zeros (nothing reads them)."""
    p, sliding = _PLAN.get(), kwargs.get("sliding_window") is not None
    outs = [qn.attend(query, key, value, module.layer_idx, sliding, scaling, softcap) for qn in p.questions]
    pad = query.shape[2] - sum(len(qn.rows) for qn in p.questions)
    if pad:
        outs.append(query.new_zeros(1, pad, query.shape[1], query.shape[3]))
    return torch.cat(outs, 1), None


def pieces_on(model, p: Plan):
    """Inside (this thread only), ``model``'s attention runs :func:`piece_attention` under plan
    ``p``; the model itself is not changed (:mod:`setllm.core.model.install`)."""
    return install.planned_attention(model, piece_attention, _PLAN, p)
