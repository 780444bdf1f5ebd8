"""Pad encoded prompts (and optional responses) into model-ready tensors.

Shapes: B prompts, N tokens after padding. Positions are passed explicitly and the mask
hides padding, so either padding side gives the same result: inference pads on the left
(every row's next token lands at the same index), training on the right.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from ..layout.masks import TokenLayout
from ..layout.positions import NOT_IN_SET, response_position, response_positions
from ..layout.variants import PositionKind
from .encoding import EncodedPrompt


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, N]
    position_ids: torch.Tensor  # [B, N]
    layout: TokenLayout  # [B, N]
    next_positions: torch.Tensor  # [B] position of the first token after what is encoded

    def to(self, device) -> Batch:
        return Batch(self.input_ids.to(device), self.position_ids.to(device), self.layout.to(device), self.next_positions.to(device))


def collate(
    prompts: Sequence[EncodedPrompt],
    positions: PositionKind,
    pad_id: int,
    responses: Sequence[Sequence[int]] | None = None,
    padding_side: Literal["left", "right"] = "left",
    length: int = 0,
) -> Batch:
    """Build a padded :class:`Batch`; ``responses[i]`` follows prompt ``i`` causally. Rows are
    padded to the longest row, or to ``length`` if that is longer (a fixed shape, see
    :mod:`setllm.core.forward.scoring`)."""
    responses = responses if responses is not None else [[] for _ in prompts]
    rows, next_pos = zip(*(_row(p, r, positions) for p, r in zip(prompts, responses)))
    n = max(length, max(len(r[0]) for r in rows))
    fields = [[], [], [], [], [], []]
    for ids, pos, valid, is_prompt, sets, elems in rows:
        pad = n - len(ids)
        for out, values, fill in zip(fields, (ids, pos, valid, is_prompt, sets, elems), (pad_id, 0, False, False, NOT_IN_SET, NOT_IN_SET)):
            out.append([fill] * pad + values if padding_side == "left" else values + [fill] * pad)
    ids, pos, valid, is_prompt, sets, elems = (torch.tensor(f) for f in fields)
    return Batch(ids, pos, TokenLayout(valid, is_prompt, sets, elems, pos), torch.tensor(next_pos))


def _row(prompt: EncodedPrompt, response: Sequence[int], scheme: PositionKind):
    """One row's fields (ids, positions, valid, is_prompt, set ids, element ids) and next position."""
    pos, start = prompt.positions(scheme)
    n_p, n_r = len(prompt), len(response)
    resp_pos = response_positions(scheme, start, n_r)
    next_pos = response_position(scheme, start, n_r)
    fields = (
        prompt.input_ids + list(response),
        pos + resp_pos,
        [True] * (n_p + n_r),
        [True] * n_p + [False] * n_r,
        prompt.set_ids + [NOT_IN_SET] * n_r,
        prompt.element_ids + [NOT_IN_SET] * n_r,
    )
    return fields, next_pos


# A padding slot's layout fields (valid, is_prompt, set_ids, element_ids, positions).
PAD_SLOT = (False, False, NOT_IN_SET, NOT_IN_SET, 0)


def round_up(n: int, step: int) -> int:
    return -(-n // step) * step


def padded_layout(prompt: EncodedPrompt, scheme: PositionKind, length: int) -> tuple[tuple[list, ...], int]:
    """One prompt's layout fields (``valid, is_prompt, set_ids, element_ids, positions``, as
    :class:`TokenLayout` orders them) left-padded to ``length``, in lists, and the position
    after it: what :func:`collate` makes of it alone, before any tensor."""
    (ids, pos, valid, is_prompt, sets, elems), next_position = _row(prompt, [], scheme)
    pad = length - len(ids)
    return tuple([fill] * pad + values for values, fill in zip((valid, is_prompt, sets, elems, pos), PAD_SLOT)), next_position


def continuation_layout(valid: torch.Tensor, positions: torch.Tensor) -> TokenLayout:
    """Layout of response tokens appended after a prompt: causal, outside any set."""
    none = torch.full(valid.shape, NOT_IN_SET, dtype=torch.long, device=valid.device)
    return TokenLayout(valid, torch.zeros_like(valid), none, none.clone(), positions.expand(valid.shape))
