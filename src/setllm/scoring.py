"""Score candidate responses by log-likelihood: encode -> prefill -> score_continuations.

The prompt is run once; its KV cache is gathered once per option and the options go
through batched forwards. :func:`score_requests` is the one driver every surface calls
(the library, the server, the lm-eval backend).

Why fixed shapes: a request's scores must not depend on what else is in its batch, on any
CPU. A BLAS picks its kernel, blocking and thread split by the shape of a matrix product,
so a row multiplied among 8 rows can get other low bits than the same row alone (measured
here: 15 of 22 row counts differ from a subset, at 1 and 2 threads; on Intel even 4+ rows
differ). Within one shape the rows are computed alike wherever they sit (measured here: 0
differences when rows move). So in every forward of :func:`score_requests` each linear
layer runs as products of exactly ``MATMUL_ROWS`` rows (the output head ``HEAD_ROWS``; the
last block zero-padded,
:func:`setllm.runtime.fixed_row_linears`), whatever the batch; and attention, computed per
row over the keys it has, gets keys of a length fixed by the request alone: its prompt
left-padded to a multiple of ``PROMPT_BUCKET`` tokens, its options right-padded to a multiple
of ``OPTION_BUCKET``. Only requests with the same two buckets share a forward. A request
alone and the same request among others then run the very same kernels on its rows:
bit-identical by construction, not by a property of one CPU. (The thread count is part of
the kernel choice: compare within one thread count.) Matrix products of 64 rows run at full
speed on a CPU (measured here: 116 GFLOP/s, as 128 to 1024 rows), so the price is the
padding of the last block and of the buckets.

Shapes: B prompts, R option rows (sum of options over prompts), L option tokens, V vocab.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .batch import Batch, collate, continuation_layout
from .encoding import EncodedPrompt
from .errors import InputError
from .runtime import context_length, fixed_row_linears, forward, new_cache, output_cache, sliding_window
from .variants import Variant


@dataclass(frozen=True)
class OptionScore:
    """Log-likelihood of one option as the response.

    Attributes:
        text: the option.
        logprob: sum of token log-probabilities.
        mean_logprob: ``logprob / n_tokens``, comparable across options of different length.
        n_tokens: number of tokens of the option.
    """

    text: str
    logprob: float
    mean_logprob: float
    n_tokens: int


# The fixed shapes of every scoring forward (see the module docstring).
MATMUL_ROWS = 64
HEAD_ROWS = 16  # the output head's blocks (see runtime.fixed_row_linears)
PROMPT_BUCKET = 16
OPTION_BUCKET = 4
PROMPTS_PER_FORWARD = 16  # a bound on memory only: any count gives the same bits
OPTION_ROWS_PER_FORWARD = 64


@dataclass(frozen=True)
class ScoreRequest:
    """One prompt and the token ids of its options (each the whole response, EOS included)."""

    prompt: EncodedPrompt
    options: Sequence[Sequence[int]]


@dataclass(frozen=True)
class TokenScore:
    """One option's log-likelihood, token count and whether every token was the argmax."""

    logprob: float
    n_tokens: int
    greedy: bool


@torch.no_grad()
def score_requests(model, variant: Variant, pad_id: int, requests: Sequence[ScoreRequest]) -> list[list[TokenScore]]:
    """Score every option of every request, each with the same bits whatever the other
    requests are (module docstring). Requests with the same encoded prompt share a prefill,
    and equal options of one prompt a row."""
    prompts: dict[tuple, int] = {}  # identity -> unique prompt
    uniq: list[EncodedPrompt] = []
    rows: list[set[tuple[int, ...]]] = []
    for req in requests:
        if any(len(o) == 0 for o in req.options):
            raise InputError("an option tokenizes to nothing; options must be non-empty text")
        u = prompts.setdefault(identity(req.prompt), len(uniq))
        if u == len(uniq):
            uniq.append(req.prompt)
            rows.append(set())
        rows[u].update(tuple(o) for o in req.options)
    # A prompt's rows in a canonical order (sorted ids), so any ordering of one question's
    # options is the same computation.
    ordered = [sorted(r) for r in rows]
    done: dict[tuple[int, tuple[int, ...]], TokenScore] = {}
    for members in _bucket_groups(model.config, uniq, ordered):
        for lo in range(0, len(members), PROMPTS_PER_FORWARD):
            block = members[lo : lo + PROMPTS_PER_FORWARD]
            done.update(_score_block(model, variant, pad_id, [uniq[u] for u in block], [ordered[u] for u in block], block))
    return [[done[(prompts[identity(r.prompt)], tuple(o))] for o in r.options] for r in requests]


def identity(enc: EncodedPrompt) -> tuple:
    """What makes two encoded prompts the same computation."""
    return tuple(enc.input_ids), tuple(enc.set_ids), tuple(enc.element_ids)


def _bucket_groups(config, prompts: Sequence[EncodedPrompt], options: Sequence[Sequence[tuple[int, ...]]]) -> list[list[int]]:
    """Prompt indices grouped by (prompt bucket, option bucket), in order of first arrival."""
    groups: dict[tuple[int, int], list[int]] = {}
    for u, (enc, opts) in enumerate(zip(prompts, options)):
        groups.setdefault(buckets(config, len(enc), max(map(len, opts))), []).append(u)
    return list(groups.values())


def buckets(config, prompt_len: int, option_len: int) -> tuple[int, int]:
    """The padded prompt and option lengths of a request; the prompt bucket never pushes a
    request past the model's context or sliding window that it fits unpadded."""
    opt = _round_up(option_len, OPTION_BUCKET)
    limits = [x for x in (sliding_window(config), context_length(config)) if x]
    room = min(limits) - opt if limits else None
    padded = _round_up(prompt_len, PROMPT_BUCKET)
    return (padded if room is None or padded <= room else max(prompt_len, room)), opt


def _round_up(n: int, step: int) -> int:
    return -(-n // step) * step


def _score_block(model, variant: Variant, pad_id: int, encs, options, keys) -> dict:
    """One prefill of prompts of one bucket, then their options in forwards of option rows."""
    n_prompt, n_option = buckets(model.config, max(map(len, encs)), max(len(o) for opts in options for o in opts))
    with fixed_row_linears(model, MATMUL_ROWS, HEAD_ROWS):
        batch = collate(list(encs), variant.positions, pad_id, length=n_prompt)
        cache, next_logprobs = prefill(model, variant, batch)
        flat = [(b, o) for b, opts in enumerate(options) for o in opts]
        out = {}
        for lo in range(0, len(flat), OPTION_ROWS_PER_FORWARD):
            chunk = flat[lo : lo + OPTION_ROWS_PER_FORWARD]
            rows = torch.tensor([b for b, _ in chunk])
            logp, hit, _ = _row_logprobs(model, variant, batch, select_cache(cache, rows), next_logprobs, rows, [o for _, o in chunk], n_option)
            for (b, o), lp, h in zip(chunk, logp.sum(1).tolist(), hit.all(1).tolist()):
                out[(keys[b], o)] = TokenScore(lp, len(o), h)
    return out


def select_cache(cache, rows: torch.Tensor):
    """A new cache holding ``rows`` of ``cache`` (which stays as it was)."""
    picked = new_cache()
    for i, layer in enumerate(cache.layers):
        index = rows.to(layer.keys.device)
        picked.update(layer.keys.index_select(0, index), layer.values.index_select(0, index), i)
    return picked


@torch.no_grad()
def prefill(model, variant: Variant, batch: Batch):
    """Run the prompts once. Returns the KV cache and the log-probs of the next token ``[B, V]``."""
    out = forward(model, variant, batch.input_ids, batch.position_ids, batch.layout, cache=new_cache(), logits_to_keep=1)
    # Prompts are left-padded, so the last column is every prompt's last token.
    return output_cache(out), out.logits[:, -1].float().log_softmax(-1)


@torch.no_grad()
def score_continuations(model, variant: Variant, batch: Batch, cache, next_logprobs, options: Sequence[Sequence[Sequence[int]]]) -> list[list[tuple[float, int]]]:
    """Sum log-prob and length of each option's token ids, ``options[b]`` for prompt ``b``.

    The cache is consumed (gathered in place).
    """
    logp, hit, valid = token_logprobs(model, variant, batch, cache, next_logprobs, options)
    return split_rows(list(zip(logp.sum(1).tolist(), valid.sum(1).tolist())), options)


@torch.no_grad()
def token_logprobs(model, variant: Variant, batch: Batch, cache, next_logprobs, options: Sequence[Sequence[Sequence[int]]]):
    """Each option token's log-prob, whether it was the argmax, and which tokens are real:
    three ``[R, L]`` tensors on the CPU (log-probs 0 past an option's end). One forward runs
    every option row on its prompt's cache, which is consumed (gathered in place)."""
    rows = torch.tensor([b for b, opts in enumerate(options) for _ in opts])
    conts = [list(c) for opts in options for c in opts]
    if any(len(c) == 0 for c in conts):
        raise InputError("an option tokenizes to nothing; options must be non-empty text")
    cache.batch_select_indices(rows.to(model.device))
    return _row_logprobs(model, variant, batch, cache, next_logprobs, rows, conts, max(map(len, conts)))


def _row_logprobs(model, variant: Variant, batch: Batch, cache, next_logprobs, rows: torch.Tensor, conts, length: int):
    """:func:`token_logprobs` for option rows ``conts`` (``rows``: their prompt), padded to
    ``length`` tokens, on a cache already holding one row per option."""
    ids = torch.tensor([list(c) + [0] * (length - len(c)) for c in conts])  # [R, L]
    valid = torch.tensor([[True] * len(c) + [False] * (length - len(c)) for c in conts])
    first = next_logprobs[rows.to(next_logprobs.device)]  # [R, V] predicts token 0
    logp = first.gather(1, ids[:, :1].to(first.device)).cpu()  # [R, 1]
    hit = (first.argmax(-1).cpu() == ids[:, 0])[:, None]
    if max(map(len, conts)) > 1:  # one-token options are read off the prefill alone
        out = _continue(model, variant, batch, cache, rows, ids, valid)
        rest = out.logits[:, :-1].float().log_softmax(-1).cpu()  # [R, L-1, V] predicts tokens 1..L-1
        logp = torch.cat([logp, rest.gather(-1, ids[:, 1:, None]).squeeze(-1)], 1)
        hit = torch.cat([hit, rest.argmax(-1) == ids[:, 1:]], 1)
    return logp * valid, hit | ~valid, valid


def _continue(model, variant: Variant, batch: Batch, cache, rows: torch.Tensor, ids: torch.Tensor, valid: torch.Tensor):
    """The forward of response tokens ``ids [R, L]`` after prompt rows ``rows`` (on ``cache``):
    causal, outside any set, positions continuing after the prompt (all 0 under NoPE)."""
    layout = batch.layout.index_select(rows).cat(continuation_layout(valid))
    step = torch.arange(ids.shape[1]) if variant.positions != "nope" else torch.zeros(ids.shape[1], dtype=torch.long)
    return forward(model, variant, ids, batch.next_positions[rows][:, None] + step, layout, cache=cache)


@dataclass(frozen=True)
class TokenDetail:
    """One response token: its log-prob and the ``top`` likeliest tokens in its place."""

    token: int
    logprob: float
    top: list[tuple[int, float]]  # (token id, log-prob), likeliest first


@torch.no_grad()
def token_details(model, variant: Variant, pad_id: int, prompt: EncodedPrompt, response: Sequence[int], top: int = 0) -> list[TokenDetail]:
    """Each token of ``response`` read as the response to ``prompt`` (as options are scored),
    with its log-prob and the ``top`` likeliest tokens at its place (OpenAI's ``logprobs``)."""
    if not response:
        return []
    batch = collate([prompt], variant.positions, pad_id)
    cache, next_logprobs = prefill(model, variant, batch)
    dists = [next_logprobs[0].cpu()]
    if len(response) > 1:
        ids = torch.tensor([list(response)])
        out = _continue(model, variant, batch, cache, torch.zeros(1, dtype=torch.long), ids, torch.ones_like(ids, dtype=torch.bool))
        dists += list(out.logits[0, :-1].float().log_softmax(-1).cpu())
    details = []
    for token, dist in zip(response, dists):
        values, index = dist.topk(top) if top else (torch.tensor([]), torch.tensor([], dtype=torch.long))
        details.append(TokenDetail(int(token), float(dist[token]), list(zip(index.tolist(), values.tolist()))))
    return details


def split_rows(flat: list, options: Sequence[Sequence]) -> list[list]:
    """``flat`` (one item per option row) regrouped as ``options`` is: one list per prompt."""
    out_rows, i = [], 0
    for opts in options:
        out_rows.append(flat[i : i + len(opts)])
        i += len(opts)
    return out_rows


def to_option_scores(texts: Sequence[str], scores: Sequence[TokenScore]) -> list[OptionScore]:
    return [OptionScore(t, s.logprob, s.logprob / s.n_tokens, s.n_tokens) for t, s in zip(texts, scores)]
