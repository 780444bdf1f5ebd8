"""SetPE and its kin: the position of every token of a prompt with sets, and of its response.

The positions are a function of the tokens' set and element ids alone (no tokenizer, no
torch): :class:`setllm.core.tokens.encoding.EncodedPrompt` reads them for each scheme of
:class:`setllm.core.layout.variants.Variant`, and every reader of a response (the batch, the
scoring driver, decoding, the fit rule) places response tokens by :func:`response_position`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .variants import PositionKind

NOT_IN_SET = -1  # the set and element id of a token outside every set


def response_position(scheme: PositionKind, start: int, step: int) -> int:
    """The position of a prompt's ``step``-th response token (from 0), the prompt's next
    position being ``start`` (:meth:`EncodedPrompt.positions`): the response continues after
    the prompt, causally, except under NoPE, where every position is 0. The one rule every
    reader of a response applies (the batch, the scoring driver, decoding, the fit rule)."""
    return start if scheme == "nope" else start + step


def response_positions(scheme: PositionKind, start: int, n: int) -> list[int]:
    """The positions of ``n`` response tokens after a prompt whose next position is ``start``."""
    return [response_position(scheme, start, j) for j in range(n)]


def setpe_positions(set_ids: Sequence[int], element_ids: Sequence[int]) -> tuple[list[int], int]:
    """SetPE: consecutive positions, but every element of a set starts at the set's start.

    After a set, numbering resumes at ``start + total tokens of the set``: the text after
    the set then sits exactly where it would after reading all elements one after another,
    so its distance to the text before the set is what the pretrained model is used to.

    >>> # "Q" {"a b", "c"} "A"   ->   Q:0  a:1 b:2  c:1  A:4
    >>> setpe_positions([-1, 0, 0, 0, -1], [-1, 0, 0, 1, -1])
    ([0, 1, 2, 1, 4], 5)
    """
    return _set_positions(set_ids, element_ids, longest=False)


def sbp_positions(set_ids: Sequence[int], element_ids: Sequence[int]) -> tuple[list[int], int]:
    """Set-Based Prompting's positions (McIlroy-Young et al. 2024): as SetPE, every element of a
    set starts at the set's start, but after the set numbering resumes at ``start + the
    longest element's length``, as if the elements had been read side by side.

    >>> # "Q" {"a b", "c"} "A"   ->   Q:0  a:1 b:2  c:1  A:3
    >>> sbp_positions([-1, 0, 0, 0, -1], [-1, 0, 0, 1, -1])
    ([0, 1, 2, 1, 3], 4)
    >>> # {"x", "y1 y2 y3", "z1 z2"} "A": the longest element (3 tokens) sets where A stands
    >>> sbp_positions([0, 0, 0, 0, 0, 0, -1], [0, 1, 1, 1, 2, 2, -1])
    ([0, 0, 1, 2, 0, 1, 3], 4)
    """
    return _set_positions(set_ids, element_ids, longest=True)


def _set_positions(set_ids: Sequence[int], element_ids: Sequence[int], longest: bool) -> tuple[list[int], int]:
    """Every element of a set starts at the set's start; after the set, numbering resumes at
    the start + the set's extent: its total tokens, or (``longest``) its longest element's."""
    out: list[int] = []
    pos = start = extent = offset = 0
    cur_set = cur_elem = NOT_IN_SET
    for s, e in zip(set_ids, element_ids):
        if s != cur_set:
            if cur_set != NOT_IN_SET:
                pos = start + extent
            start, extent, cur_set, cur_elem, offset = pos, 0, s, e, 0
        if s == NOT_IN_SET:
            out.append(pos)
            pos += 1
            continue
        if e != cur_elem:
            cur_elem, offset = e, 0
        out.append(start + offset)
        offset += 1
        extent = max(extent, offset) if longest else extent + 1
    if cur_set != NOT_IN_SET:
        pos = start + extent
    return out, pos
