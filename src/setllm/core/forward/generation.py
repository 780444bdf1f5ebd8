"""Text generation with a KV cache: prefill -> decode_one_token -> decode_n_tokens -> generate_tokens.

``model.generate()`` rejects 4D masks and would continue positions as ``last + 1``, which
is wrong after a set under SetPE, so decoding is a small loop of our own.

Shapes: B prompts, K tokens so far (prompt + generated), V vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..layout.positions import response_position
from ..layout.variants import Variant
from ..model import fit
from ..tokens.batch import Batch, continuation_layout
from . import runtime
from .scoring import prefill
from .values import GenerationConfig  # its home is torch-free; exported here as before


def sample(logits: torch.Tensor, config: GenerationConfig, generator: torch.Generator | None) -> torch.Tensor:
    """Next token ids ``[B]`` from logits ``[B, V]``."""
    if config.temperature == 0:
        return logits.argmax(-1)
    scaled = logits.float() / config.temperature
    if torch.isposinf(scaled).any():  # a tiny temperature: the largest logit taken off first, so
        # the others go to -inf and it stays finite (inf - inf is NaN in softmax)
        scaled = (logits.float() - logits.float().amax(-1, keepdim=True)) / config.temperature
    probs = scaled.softmax(-1)
    if config.top_p < 1:
        sorted_p, idx = probs.sort(-1, descending=True)
        # Drop a token once the mass before it already reaches top_p; the first always stays
        # (a top_p below float32's smallest number would otherwise drop it too).
        drop = sorted_p.cumsum(-1) - sorted_p >= config.top_p
        drop[..., 0] = False
        probs = probs.scatter(-1, idx, sorted_p.masked_fill(drop, 0.0))
    return torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).to(logits.device)


# Steps between two looks at the generated tokens from the host, per device type. On a GPU
# the steps queue without waiting for the host (a look is a synchronisation), and a row that
# stopped within a run of steps is cut by the caller; on the CPU nothing runs ahead, so it
# looks after every step and never computes a step past the end.
CHECK_EVERY = {"cpu": 1}
DEVICE_CHECK_EVERY = 8


@torch.no_grad()
def decode_one_token(model, variant: Variant, cache, batch: Batch, token: torch.Tensor, step: int):
    """Feed one token per row ``[B]``; returns next-token logits ``[B, V]`` and the grown batch.
    Everything stays on the device of ``batch`` (see :func:`setllm.core.forward.runtime.step`)."""
    positions = (batch.next_positions + response_position(variant.positions, 0, step))[:, None]
    layout = batch.layout.cat(continuation_layout(torch.ones_like(positions, dtype=torch.bool), positions))
    device = model.device
    out = runtime.step(model, token[:, None].to(device), positions.to(device), layout.to(device), cache)
    return out.logits[:, -1], Batch(batch.input_ids, batch.position_ids, layout, batch.next_positions)


@torch.no_grad()
def decode_n_tokens(model, variant, cache, batch: Batch, logits, config: GenerationConfig, stop_ids: set[int], generator=None,
                    processor=None):
    """Yield ``[B, k]`` tokens on the host, ``k`` steps at a time (:data:`CHECK_EVERY`), until
    every row has hit a stop id or ``max_new_tokens``. Tokens after a row's stop id are
    still computed within a run of steps; the caller drops them. ``processor``: a grammar's
    guide of one row (:class:`setllm.structured.engine.Guide`), which masks the logits before
    each sample and reads each token after it: then every step is looked at from the host."""
    fit.check_fits(model.config, batch.layout.shape[1], int(batch.next_positions.max()), variant.positions,
                       config.max_new_tokens, "max_new_tokens")
    batch = batch.to(model.device)
    every = 1 if processor is not None else CHECK_EVERY.get(model.device.type, DEVICE_CHECK_EVERY)
    done = torch.zeros(batch.input_ids.shape[0], dtype=torch.bool)
    pending: list[torch.Tensor] = []
    for n in range(config.max_new_tokens):
        token = sample(logits if processor is None else processor.mask(logits), config, generator)
        if processor is not None:
            processor.accept(int(token[0]))
        pending.append(token)
        if len(pending) == every or n == config.max_new_tokens - 1:
            chunk = torch.stack(pending, 1).cpu()  # [B, k]: the one look from the host
            pending = []
            yield chunk
            done |= torch.tensor([any(t in stop_ids for t in row) for row in chunk.tolist()])
            if done.all() or n == config.max_new_tokens - 1:
                return
        logits, batch = decode_one_token(model, variant, cache, batch, token, n)


@torch.no_grad()
def generate_tokens(model, tokenizer, variant: Variant, batch: Batch, config: GenerationConfig, on_token=None,
                    prefilled: tuple | None = None, processor=None) -> list[tuple[str, list[int]]]:
    """Generated text for every prompt in a left-padded ``batch``, with the tokens each row
    generated: every sampled token, the EOS
    that ended it included, and those of a stop string or a character cut in half that the
    text leaves out (OpenAI's log-probs show what was generated, not what was kept).
    ``prefilled``: the ``(cache, next-token log-probs)`` of the batch, where already made
    (:func:`setllm.core.doccache.prefill`); else :func:`setllm.core.forward.scoring.prefill` makes them.
    ``on_token(tokens)``, ``processor``: see :func:`decode_after_prefill`."""
    stop_ids = eos_ids(model, tokenizer)
    cache, logprobs = prefilled or prefill(model, variant, batch)
    rows = decode_after_prefill(model, tokenizer, variant, batch, cache, logprobs, config, on_token, processor)
    return [(_finish(tokenizer, t, config.stop, stop_ids), t) for t in rows]


@torch.no_grad()
def decode_after_prefill(model, tokenizer, variant: Variant, batch: Batch, cache, logprobs, config: GenerationConfig,
                         on_token=None, processor=None) -> list[list[int]]:
    """Every row's sampled tokens after :func:`setllm.core.forward.scoring.prefill` gave ``cache`` and the
    next-token ``logprobs``: up to EOS (included), a stop string or ``max_new_tokens``. The
    cache is consumed (it grows). ``on_token(tokens)`` after each step, with every row's tokens
    so far (the lists this returns, growing): a caller's way to stream them, or to stop by raising.
    ``processor``: see :func:`decode_n_tokens`."""
    stop_ids = eos_ids(model, tokenizer)
    generator = torch.Generator().manual_seed(config.seed) if config.seed is not None else None
    tokens: list[list[int]] = [[] for _ in range(batch.input_ids.shape[0])]
    ended = [False] * len(tokens)  # hit a stop id: later tokens are dropped
    stopped = [False] * len(tokens)  # ended, or hit a stop string
    for chunk in decode_n_tokens(model, variant, cache, batch, logprobs, config, stop_ids, generator, processor):
        for column in chunk.t().tolist():
            for row, t in enumerate(column):
                if not ended[row]:
                    tokens[row].append(t)
                    ended[row] = t in stop_ids
            if on_token is not None:
                on_token(tokens)
            if config.stop:
                stopped = [s or _hit_stop(tokenizer, t, config.stop, stop_ids) for s, t in zip(stopped, tokens)]
                if all(stopped):
                    return tokens
    return tokens


def eos_ids(model, tokenizer) -> set[int]:
    """The ids that end a row: the model's generation config's EOS ids and the tokenizer's."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = ids if isinstance(ids, (list, tuple)) else [ids]
    return {i for i in [*ids, tokenizer.eos_token_id] if i is not None}


def _hit_stop(tokenizer, tokens: list[int], stop: Sequence[str], stop_ids: set[int]) -> bool:
    """Whether the newest token ends the row: an EOS id, or a stop string completed by it.

    Called after every token, so only the tail that the newest token can complete is
    decoded (a character may take up to 4 byte-fallback tokens), not the whole text.
    """
    if tokens and tokens[-1] in stop_ids:
        return True
    tail = tokens[-(4 * max(map(len, stop)) + 4) :]
    text = tokenizer.decode(tail, skip_special_tokens=True)
    return any(s in text for s in stop)


def _finish(tokenizer, tokens: list[int], stop: Sequence[str], stop_ids: set[int]) -> str:
    tokens = [t for t in tokens if t not in stop_ids]
    text = _complete_characters(tokenizer, tokens)
    cuts = [text.index(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text


def _complete_characters(tokenizer, tokens: list[int]) -> str:
    """The decoded text without a character that ``max_new_tokens`` cut in half: byte-level
    tokens can end inside a multi-byte character, which decodes to U+FFFD."""
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    for drop in range(1, min(4, len(tokens)) + 1):  # a character spans at most 4 bytes
        if not text.endswith("\ufffd"):
            break
        text = tokenizer.decode(tokens[:-drop], skip_special_tokens=True)
    return text
