"""References the tests compare setllm's drivers with: straightforward computations, not
the ones setllm runs.

:func:`score_continuations` scores options the plain batched way: every prompt of a padded
batch prefilled together, every option row on its prompt's cache in one padded forward.
The live driver (:func:`setllm.core.forward.scoring.score_requests`) packs rows into fixed shapes
so that a score never depends on its batch; the two agree up to float rounding, never bit
for bit (other shapes, other kernels).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from setllm.core.forward.generation import GenerationConfig, generate_tokens
from setllm.core.forward.runtime import forward
from setllm.core.layout.positions import response_positions
from setllm.core.layout.variants import Variant
from setllm.core.tokens.batch import Batch, continuation_layout


@torch.no_grad()
def score_continuations(model, variant: Variant, batch: Batch, cache, next_logprobs,
                        options: Sequence[Sequence[Sequence[int]]]) -> list[list[tuple[float, int]]]:
    """Sum log-prob and length of each option's token ids, ``options[b]`` for prompt ``b``,
    after :func:`setllm.core.forward.scoring.prefill` gave ``cache`` and ``next_logprobs`` (the cache
    is consumed: gathered in place)."""
    logp, _, valid = token_logprobs(model, variant, batch, cache, next_logprobs, options)
    return split_rows(list(zip(logp.sum(1).tolist(), valid.sum(1).tolist())), options)


@torch.no_grad()
def token_logprobs(model, variant: Variant, batch: Batch, cache, next_logprobs, options: Sequence[Sequence[Sequence[int]]]):
    """Each option token's log-prob, whether it was the argmax, and which tokens are real:
    three ``[R, L]`` tensors on the CPU (log-probs 0 past an option's end). One forward runs
    every option row on its prompt's cache."""
    rows = torch.tensor([b for b, opts in enumerate(options) for _ in opts])
    conts = [list(c) for opts in options for c in opts]
    cache.batch_select_indices(rows.to(model.device))
    length = max(map(len, conts))
    ids = torch.tensor([c + [0] * (length - len(c)) for c in conts])  # [R, L]
    valid = torch.tensor([[True] * len(c) + [False] * (length - len(c)) for c in conts])
    first = next_logprobs[rows.to(next_logprobs.device)]  # [R, V] predicts token 0
    logp = first.gather(1, ids[:, :1].to(first.device)).cpu()  # [R, 1]
    hit = (first.argmax(-1).cpu() == ids[:, 0])[:, None]
    if length > 1:  # one-token options are read off the prefill alone
        out = _continue(model, variant, batch, cache, rows, ids, valid)
        rest = out.logits[:, :-1].float().log_softmax(-1).cpu()  # [R, L-1, V] predicts tokens 1..L-1
        logp = torch.cat([logp, rest.gather(-1, ids[:, 1:, None]).squeeze(-1)], 1)
        hit = torch.cat([hit, rest.argmax(-1) == ids[:, 1:]], 1)
    return logp * valid, hit | ~valid, valid


def _continue(model, variant: Variant, batch: Batch, cache, rows: torch.Tensor, ids: torch.Tensor, valid: torch.Tensor):
    """The forward of response tokens ``ids [R, L]`` after prompt rows ``rows`` (on ``cache``):
    causal, outside any set, positions continuing after the prompt (all 0 under NoPE)."""
    positions = batch.next_positions[rows][:, None] + torch.tensor(response_positions(variant.positions, 0, ids.shape[1]))
    layout = batch.layout.index_select(rows).cat(continuation_layout(valid, positions))
    return forward(model, variant, ids, positions, layout, cache=cache)


def split_rows(flat: list, options: Sequence[Sequence]) -> list[list]:
    """``flat`` (one item per option row) regrouped as ``options`` is: one list per prompt."""
    out, i = [], 0
    for opts in options:
        out.append(flat[i : i + len(opts)])
        i += len(opts)
    return out


def generate(model, tokenizer, variant: Variant, batch: Batch, config: GenerationConfig, on_token=None) -> list[str]:
    """The text of every prompt of a left-padded ``batch``, generated together."""
    return [text for text, _ in generate_tokens(model, tokenizer, variant, batch, config, on_token)]


def exact_match(prediction: str, answer: str) -> bool:
    """A documents answer graded as the evaluation grades it: equal once normalised."""
    from setllm.tasks.documents import normalise

    return normalise(prediction) == normalise(answer)
