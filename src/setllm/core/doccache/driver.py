"""A prompt with one set read through the document cache under ``sbp``: each piece (the text
before the set, each element) from the store or computed once, as it would be alone, then the
text after the set, the options and generated tokens on those pieces (the package docstring
says what is equal to what).

Shapes: Hkv key heads, n tokens, d head size; a piece's keys and values are one
``(k [1, Hkv, n, d], v)`` pair per layer.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..attention import packed_attention
from ..forward.runtime import forward
from ..forward.scoring import OPTION_BUCKET, PROMPT_BUCKET, fixed_rows, matmul_rows, option_scores, packed_forward, row_plan
from ..layout.masks import TokenLayout, kind_parts
from ..layout.variants import ORDER_FREE_POSITIONS, Variant
from ..model.fit import sliding_window
from ..model.install import fixed_row_linears
from ..model.kvcache import cache_kwarg, holding, new_cache, output_cache
from ..tokens.batch import collate, continuation_layout, round_up
from ..tokens.encoding import EncodedPrompt
from . import attention
from .keys import PieceKey, ReadingKey
from .store import DocumentCache, Layers

GROUP_TOKENS = 2048  # most tokens (prefixes and elements) in one forward computing missing elements


def variant_problem(variant: Variant) -> str | None:
    """Why no prompt read under ``variant`` can reuse cached documents, or None."""
    parts = kind_parts(variant.mask)
    if parts.bidirectional or not parts.sets_apart:  # an element must depend on nothing after it nor on its set's others
        return f"variant {variant.name!r} lets a document see text it cannot be cached without (only 'sbp' reads documents apart)"
    if variant.positions not in ORDER_FREE_POSITIONS:  # its keys would carry the positions of one order
        return f"variant {variant.name!r} numbers a document's tokens after the documents before it: its keys hold where it sat"
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
            reading: ReadingKey) -> list[tuple[Layers, list[int]]]:
    """:func:`_piece_lists` with each prompt's pieces joined: its keys and values up to its
    suffix ``(k [1, Hkv, n, d], v)`` per layer (what a KV cache of the prompt holds)."""
    return [(_joined(parts), suffix) for parts, suffix in _piece_lists(model, variant, prompts, store, reading)]


def _piece_lists(model, variant: Variant, prompts: Sequence[tuple[EncodedPrompt, object]], store: DocumentCache,
                 reading: ReadingKey) -> list[tuple[list[Layers], list[int]]]:
    """For each ``(enc, batch)`` (``batch``: ``enc`` collated, or ``enc`` followed by more
    tokens: the pieces' indices are the same), the pieces of ``enc`` up to its suffix (the
    prefix's keys and values, then each element's, in the prompt's order: the store's own
    tensors, not copied) and the suffix's token indices. Each piece comes from ``store`` or
    is computed and kept: a prefix alone, the missing elements of all prompts together
    (:func:`_compute_elements`), each as it would be alone."""
    plans, wanted = [], {}
    for enc, batch in prompts:
        pieces = _Pieces.of(enc)
        prefix_ids = tuple(enc.input_ids[i] for i in pieces.prefix)
        prefix = _prefix(model, variant, batch, pieces.prefix, store, PieceKey(reading, prefix_ids)) if prefix_ids else []
        keys = []
        for element in pieces.elements:
            key = PieceKey(reading, prefix_ids, tuple(enc.input_ids[i] for i in element))
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
    return [(([prefix] if prefix else []) + [wanted[k] for k in keys], suffix) for prefix, keys, suffix in plans]


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
    fixed row blocks (:func:`setllm.core.forward.scoring.fixed_rows`). So an element's bits are
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
    cache = holding(_joined([p for p, _ in prefixes.values()])) if prefixes else new_cache()
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


def _prefix(model, variant: Variant, batch, span: range, store: DocumentCache, key: PieceKey) -> Layers:
    """The keys and values of the prefix, from ``store`` or computed in a forward of its own."""
    found = store.get(key)
    if found is None:
        ids, pos, layout = batch.input_ids, batch.position_ids, batch.layout
        start = time.perf_counter()
        found = _compute(model, variant, ids, pos, layout, [], span)
        store.put(key, found, time.perf_counter() - start)
    return found


@torch.no_grad()
def prefill(model, variant: Variant, enc: EncodedPrompt, store: DocumentCache, reading: ReadingKey, batch=None):
    """``enc`` read through ``store``: the KV cache of the whole prompt and the log-probs of
    the next token ``[1, V]``, the same bits whatever ``store`` holds (module docstring; equal
    to :func:`setllm.core.forward.scoring.prefill`'s up to rounding). The suffix is read as a question
    is (:func:`read_options`: its attention over the pieces where they lie), then the pieces
    and the suffix's keys and values are joined once, into the cache decoding goes on from.
    ``reading`` names the weights, adapter and variant the pieces were computed under;
    ``batch``: ``enc`` collated, where the caller has it."""
    batch = batch or collate([enc], variant.positions, 0)
    [(parts, tail)] = _piece_lists(model, variant, [(enc, batch)], store, reading)
    question = attention.Question(range(len(tail)), parts, batch.layout, variant.mask, sliding_window(model.config))
    own = new_cache()
    ids, pos = batch.input_ids[0, tail].tolist(), batch.position_ids[0, tail].tolist()
    logits = _question_forward(model, attention.Plan([question]), ids, pos, [len(tail) - 1], own)
    n = len(tail)  # the cache holds the row's padding too: cut
    cache = holding([tuple(torch.cat([*(p[i][j] for p in parts), mine[:, :, :n]], 2) for j, mine in enumerate((layer.keys, layer.values)))
                     for i, layer in enumerate(own.layers)])
    return cache, logits.float().log_softmax(-1)


def score(model, variant: Variant, requests: Sequence, store: DocumentCache, reading: ReadingKey) -> list[list]:
    """Every option of every request scored after its prompt's cached reading
    (:func:`read_options`): one ``TokenScore`` list per request."""
    return [option_scores(first, rows, r.options) for (first, rows), r in zip(read_options(model, variant, requests, store, reading), requests)]


# The row block of a question's forward on the CPU (the scoring driver's elsewhere): a question
# (its text after the set and its options) is about 20 tokens, a third of the driver's 64.
# Measured warm (docs/documents.md, benchmarks/bench_doccache_curve.py --rows): 32 rows were
# the fastest for one question of 20 tokens (0.186 s; 16: 0.212, 64: 0.230) and within 2% of
# 64 for four (80 tokens). Fixed for every question, so a request's bits are the same alone
# or among others.
QUESTION_ROWS = {"cpu": 32}


@torch.no_grad()
def read_options(model, variant: Variant, requests: Sequence, store: DocumentCache, reading: ReadingKey) -> list[tuple]:
    """Every option of every request (:class:`setllm.core.forward.scoring.ScoreRequest`) scored after
    its prompt's cached reading, all requests in one packed forward: each request's suffix and
    options are its tokens of that forward, and attend to its own cached pieces where the
    store keeps them and to themselves only (:mod:`.attention`: no copy of the pieces). The
    options follow the prompt as one more set, so under ``sbp`` each reads the whole prompt
    and none of the others, at the positions a response has, exactly as a response row does.
    Linear layers multiply fixed row blocks (:data:`QUESTION_ROWS`) and each request's
    attention is calls of its own, at shapes its prompt fixes: a request gets the same bits
    alone or among others. Per request, its next-token log-probs ``[1, V]`` (each option's
    first token) and the log-probs after each option's tokens but its last ``[sum(n - 1), V]``,
    options in order (the same bits whatever ``store`` holds)."""
    # An option's last token predicts nothing read and no other token sees it: it is left out.
    read_rows = [[o[:-1] for o in r.options] for r in requests]
    asked = [collate([_followed_by_set(r.prompt, rows)], variant.positions, 0) for r, rows in zip(requests, read_rows)]
    read = _piece_lists(model, variant, [(r.prompt, b) for r, b in zip(requests, asked)], store, reading)
    asks = [_Ask.of(b, suffix, rows) for rows, b, (_, suffix) in zip(read_rows, asked, read)]
    window, questions, ids, pos, keep = sliding_window(model.config), [], [], [], []
    for a, (parts, _) in zip(asks, read):
        t = len(ids)
        questions.append(attention.Question(range(t, t + len(a.tail_ids)), parts, a.layout, variant.mask, window))
        ids += a.tail_ids
        pos += a.tail_positions
        keep += [t + k for k in a.keep]
    logp = _question_forward(model, attention.Plan(questions), ids, pos, keep).float().log_softmax(-1)
    results, at = [], 0
    for a in asks:
        n = len(a.keep)
        results.append((logp[at : at + 1], logp[at + 1 : at + n]))
        at += n
    return results


def _question_forward(model, plan: attention.Plan, ids: list[int], pos: list[int], keep: list[int], cache=None) -> torch.Tensor:
    """The logits ``[len(keep), V]`` of rows ``keep`` of one forward of the packed questions
    ``ids [S]`` under ``plan``: the row padded once to whole row blocks (and ``keep`` to whole
    blocks of the head), the padding read by no question. ``cache``: an empty KV cache the
    forward's keys and values go to (the padding's after the questions'), or None: none made."""
    device, head = model.device, row_plan(model).head_rows
    rows = QUESTION_ROWS.get(device.type) or matmul_rows(model)
    n = len(keep)
    ids, pos, keep = (torch.tensor(x + [0] * (-len(x) % step)) for x, step in ((ids, rows), (pos, rows), (keep, head)))
    with fixed_row_linears(model, rows, head), attention.pieces_on(model, plan):
        out = model(input_ids=ids[None].to(device), position_ids=pos[None].to(device), use_cache=cache is not None,
                    attention_mask=packed_attention.placeholder_mask(device), logits_to_keep=keep.to(device),
                    **({cache_kwarg(): cache} if cache is not None else {}))
    return out.logits[0, :n]


@dataclass
class _Ask:
    """One scoring request over cached documents: its tokens to compute (the suffix, then
    the options but their last tokens as one more set) and the layout its masks are read off."""

    layout: TokenLayout  # of the whole prompt + options, [1, n_cached + tail]
    tail_ids: list[int]
    tail_positions: list[int]
    keep: list[int]  # tail indices whose logits are read: the suffix's last, then each option's tokens (its last left out)

    @classmethod
    def of(cls, batch, suffix: list[int], rows) -> _Ask:
        """``batch``: the prompt followed by ``rows`` (each option but its last token) as one
        more set, collated; ``suffix``: its suffix's token indices (the pieces hold every token before)."""
        n = suffix[0]
        starts = [len(suffix) + sum(map(len, rows[:i])) for i in range(len(rows))]
        keep = [len(suffix) - 1, *(s + j for s, o in zip(starts, rows) for j in range(len(o)))]  # token j predicts j + 1
        return cls(batch.layout, batch.input_ids[0, n:].tolist(), batch.position_ids[0, n:].tolist(), keep)


def _padding(n: int) -> TokenLayout:
    """``n`` padding slots of a one-row layout (the driver pads its option rows alike)."""
    return continuation_layout(torch.zeros(1, n, dtype=torch.bool), torch.zeros(1, n, dtype=torch.long))


def _followed_by_set(enc: EncodedPrompt, rows: Sequence[Sequence[int]]) -> EncodedPrompt:
    """``enc`` with ``rows`` (token ids) after it as the elements of one more set."""
    new_set = max(enc.set_ids, default=-1) + 1
    sets = [new_set for r in rows for _ in r]
    elements = [i for i, r in enumerate(rows) for _ in r]
    return EncodedPrompt([*enc.input_ids, *(t for r in rows for t in r)], [*enc.set_ids, *sets], [*enc.element_ids, *elements])


def generate(model, tokenizer, variant: Variant, enc: EncodedPrompt, store: DocumentCache, reading: ReadingKey, config,
             on_token=None) -> tuple[str, list[int]]:
    """Text and token ids generated after ``enc``'s cached reading, decoded as
    :func:`setllm.core.forward.generation.generate_tokens` decodes a prompt alone."""
    from ..forward.generation import generate_tokens

    batch = collate([enc], variant.positions, 0)
    made = prefill(model, variant, enc, store, reading, batch)
    return generate_tokens(model, tokenizer, variant, batch, config, on_token, prefilled=made)[0]


def _compute(model, variant: Variant, ids, pos, layout: TokenLayout, before: Layers, span: range, before_span: range = range(0)) -> Layers:
    """The keys and values of tokens ``span`` of a prompt, read after ``before`` (the keys and
    values of tokens ``before_span``) alone: for an element, after its prefix, so it sees
    nothing of the other elements, as the ``sbp`` mask says."""
    index = torch.tensor([*before_span, *span], dtype=torch.long)
    sub = TokenLayout(*(t.index_select(1, index) for t in layout._fields()))
    cols = list(span)
    out = forward(model, variant, ids[:, cols], pos[:, cols], sub, cache=holding(before) if before else new_cache())  # under prefill's no_grad
    cache = output_cache(out)
    n = len(before_span)
    return [(layer.keys[:, :, n:].clone(), layer.values[:, :, n:].clone()) for layer in cache.layers]


def _joined(parts: Sequence[Layers]) -> Layers:
    return [(torch.cat([p[i][0] for p in parts], 2), torch.cat([p[i][1] for p in parts], 2)) for i in range(len(parts[0]))]

