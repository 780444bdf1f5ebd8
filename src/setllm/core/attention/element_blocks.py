"""A long prompt's attention split by set element: each element of a large set on a block of
the keys it sees, the rest of the prompt on one block of every key.

Under ``setmask`` a token of a set's element sees the whole prompt but the set's other
elements. A prompt of 20 documents as one set is then mostly masked: each document's rows
see the text around the set and themselves, about a twentieth of the keys. One dense block
of the whole prompt computes every masked pair and throws it away, where plain transformers'
causal kernel skips the upper half; on a CPU attention's time is its area, so after a
2.1k-token set the dense block took half of scoring's time (docs/experiments/core-speed.md).
Here each such element gets a block of its own: its keys are the prompt's keys it may see,
the other elements of its set left out, with its own tokens last and its rows the queries.
Every other row of the prompt (the text, the elements of small sets) is a query of blocks
over all the prompt's keys, shaped as scoring's option rows so that they share the options'
attention call (a call more per layer would be ops more than plain transformers dispatches). The masks are still the kind's predicate, read off
the block's own layout (:func:`setllm.core.attention.packed_attention.dense_block`).

Why the order of the keys may change: under ``setmask`` every prompt token sees every prompt
token it may see at all whatever their order (the prompt is read both ways; the causal part
of the predicate only matters for the response), so a block's keys can list the others first
and the queries last, as a dense block's mask expects. Why the bits stay a request's own:
which elements are split, each block's keys and its padded shape come from the prompt's
layout alone, never from the batch; an element's keys are the same whatever order the set's
other elements come in, so its rows are the same bits in any order of the set.

Only on the CPU (:data:`SPLIT_DEVICES`): a block is a few more ops per layer, which a GPU pays
in launches where its attention is cheap, and a long prompt there runs on flex attention,
which skips masked blocks by itself.
"""

from __future__ import annotations

from collections import Counter

from ..layout.masks import kind_parts
from ..layout.positions import NOT_IN_SET
from ..tokens.batch import PAD_SLOT, round_up
from .packed_attention import PAD

SPLIT_DEVICES = {"cpu"}
MIN_TOKENS = 512  # shorter prompts: the attention saved is less than a block's host work
MAX_AREA = 0.5  # split only where the blocks cover at most this share of the dense block's area

Block = tuple[list[int], list[int], tuple[list, ...]]  # queries, keys (packed indices or PAD), layout fields


def split(kind: str, layout: tuple[list, ...], keys: list[int], bucket: int, window: int | None, device_type: str,
          rest: tuple[int, int] | None = None) -> list[Block] | None:
    """A prompt's own attention as blocks (queries, keys, layout over the keys, queries its
    last slots), or None where one dense block is the better reading: ``layout`` the prompt's
    fields (``valid, is_prompt, set_ids, element_ids, positions``, as lists) over its slots,
    ``keys`` each slot's packed index (PAD: padding), elements' blocks in multiples of
    ``bucket``. The other rows go in blocks of ``rest = (rows, keys)`` (default: one block):
    scoring gives them its option rows' shape, so that they join the options' attention call
    instead of making one more per layer."""
    parts = kind_parts(kind)  # a bidirectional prompt whose elements are apart (setmask): each element sees the rest, not its set
    if not (parts.bidirectional and parts.sets_apart) or window is not None or device_type not in SPLIT_DEVICES:
        return None
    valid, _, set_ids, element_ids, _ = layout
    real = [j for j, v in enumerate(valid) if v]
    if len(real) < MIN_TOKENS:
        return None
    elements: dict[tuple[int, int], list[int]] = {}
    for j in real:
        if set_ids[j] != NOT_IN_SET:
            elements.setdefault((set_ids[j], element_ids[j]), []).append(j)
    set_tokens: Counter[int] = Counter()
    for (s, _), own in elements.items():
        set_tokens[s] += len(own)

    def seen(s: int, own: list[int]) -> int:  # how many keys an element of set s sees
        return len(real) - set_tokens[s] + len(own)

    apart = {e: own for e, own in elements.items() if seen(e[0], own) <= len(real) // 2}
    if not apart:
        return None
    q_apart = round_up(max(map(len, apart.values())), bucket)
    k_apart = round_up(max(seen(e[0], own) for e, own in apart.items()), bucket)
    in_apart = {j for own in apart.values() for j in own}
    others = [j for j in real if j not in in_apart]
    q_rest, k_rest = rest or (round_up(len(others), bucket), round_up(len(real), bucket))
    chunks = [others[i : i + q_rest] for i in range(0, len(others), q_rest)]
    if len(apart) * q_apart * k_apart + len(chunks) * q_rest * k_rest > MAX_AREA * len(keys) ** 2:
        return None
    blocks = []
    for (s, e), own in apart.items():
        outside = [j for j in real if set_ids[j] != s]  # the set's other elements are left out, its own go last
        blocks.append(_block(outside + own, own, q_apart, k_apart, layout, keys))
    for chunk in chunks:
        rows = set(chunk)
        blocks.append(_block([j for j in real if j not in rows] + chunk, chunk, q_rest, k_rest, layout, keys))
    return blocks


def _block(order: list[int], rows: list[int], q: int, k: int, layout: tuple[list, ...], keys: list[int]) -> Block:
    """The block whose keys are the slots ``order`` (left-padded to ``k``) and whose queries
    are its last ``q`` slots, of which ``rows`` are read (the others, PAD, are not)."""
    pad = k - len(order)
    fields = tuple([fill] * pad + [f[j] for j in order] for f, fill in zip(layout, PAD_SLOT))
    key_index = [PAD] * pad + [keys[j] for j in order]
    wanted = set(rows)
    slots = ([None] * pad + order)[k - q :]
    return [keys[j] if j in wanted else PAD for j in slots], key_index, fields
