"""Score candidate responses by log-likelihood: encode -> prefill -> score_continuations.

The prompt is run once; its KV cache is gathered once per option and all options of all
prompts go through one batched forward.

Shapes: B prompts, R option rows (sum of options over prompts), L option tokens, V vocab.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .batch import Batch, continuation_layout
from .errors import InputError
from .runtime import forward, new_cache, output_cache
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
    length = max(map(len, conts))
    ids = torch.tensor([c + [0] * (length - len(c)) for c in conts])  # [R, L]
    valid = torch.tensor([[True] * len(c) + [False] * (length - len(c)) for c in conts])
    first = next_logprobs[rows.to(next_logprobs.device)]  # [R, V] predicts token 0
    logp = first.gather(1, ids[:, :1].to(first.device)).cpu()  # [R, 1]
    hit = (first.argmax(-1).cpu() == ids[:, 0])[:, None]
    if length > 1:
        cache.batch_select_indices(rows.to(model.device))
        layout = batch.layout.index_select(rows).cat(continuation_layout(valid))
        step = torch.arange(length) if variant.positions != "nope" else torch.zeros(length, dtype=torch.long)
        positions = batch.next_positions[rows][:, None] + step
        out = forward(model, variant, ids, positions, layout, cache=cache)
        rest = out.logits[:, :-1].float().log_softmax(-1).cpu()  # [R, L-1, V] predicts tokens 1..L-1
        logp = torch.cat([logp, rest.gather(-1, ids[:, 1:, None]).squeeze(-1)], 1)
        hit = torch.cat([hit, rest.argmax(-1) == ids[:, 1:]], 1)
    return logp * valid, hit | ~valid, valid


def split_rows(flat: list, options: Sequence[Sequence]) -> list[list]:
    """``flat`` (one item per option row) regrouped as ``options`` is: one list per prompt."""
    out_rows, i = [], 0
    for opts in options:
        out_rows.append(flat[i : i + len(opts)])
        i += len(opts)
    return out_rows


def to_option_scores(texts: Sequence[str], sums: Sequence[tuple[float, int]]) -> list[OptionScore]:
    return [OptionScore(t, s, s / n, n) for t, (s, n) in zip(texts, sums)]
