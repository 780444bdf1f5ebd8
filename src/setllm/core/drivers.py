"""The two drivers a prompt is run on, behind one small interface (:class:`Driver`: score,
generate, log-probs): the packed driver (:mod:`setllm.core.forward.scoring`, :mod:`setllm.core.forward.generation`)
and the document cache's (:mod:`setllm.core.doccache`: a prompt with one set under ``sbp``,
its documents' keys and values from the cache). :class:`setllm.reader.Reader` asks which
serves each prompt, by the prompt alone, and runs each group on its driver; a surface never
knows which it got (the two give a prompt the same answers up to rounding, and each the same
bits alone or batched).

Shapes: V vocabulary; a response of n tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from . import doccache
from .forward import generation, scoring
from .forward.runtime import prompt_length
from .layout.variants import Variant
from .tokens.batch import collate
from .tokens.encoding import EncodedPrompt

Generated = tuple[str, list[int]]  # text, token ids


class Driver(Protocol):
    def score(self, requests: Sequence[scoring.ScoreRequest]) -> list[list[scoring.TokenScore]]:
        """Every option of every request scored after its prompt."""

    def generate(self, prompts: Sequence[EncodedPrompt], config: generation.GenerationConfig, on_token=None) -> list[Generated]:
        """Text and token ids generated after each prompt (``on_token(tokens)``: called after each
        step with each prompt's tokens so far)."""

    def logprobs(self, request: scoring.ScoreRequest) -> torch.Tensor:
        """The log-probs ``[n, V]`` at each token of the request's one option, the bits :meth:`score` sums."""


@dataclass(frozen=True)
class PackedDriver:
    """Any prompt: the scoring driver's packed forwards of fixed row blocks, and KV-cached decoding."""

    model: object
    tokenizer: object
    variant: Variant
    pad_id: int

    def score(self, requests):
        return scoring.score_requests(self.model, self.variant, self.pad_id, requests)

    def generate(self, prompts, config, on_token=None):
        # A long prompt is read on flex attention, at a bucketed length (a bounded number of compiled shapes).
        batch = collate(list(prompts), self.variant.positions, self.pad_id, length=prompt_length(self.model, max(map(len, prompts))))
        return generation.generate_tokens(self.model, self.tokenizer, self.variant, batch, config, on_token=on_token)

    def logprobs(self, request):
        return scoring.response_logprobs(self.model, self.variant, self.pad_id, request.prompt, request.options[0])


@dataclass(frozen=True)
class CachedDocumentsDriver:
    """A prompt whose documents can be reused (:func:`setllm.core.doccache.unusable` is None):
    its pieces from ``store`` (computed once where missing), under ``key``'s weights, adapters
    and variant; each prompt generated alone, its documents' keys and values reused."""

    model: object
    tokenizer: object
    variant: Variant
    store: doccache.DocumentCache
    key: doccache.ReadingKey

    def score(self, requests):
        return doccache.score(self.model, self.variant, requests, self.store, self.key)

    def generate(self, prompts, config, on_token=None):
        return [doccache.generate(self.model, self.tokenizer, self.variant, p, self.store, self.key, config, on_token) for p in prompts]

    def logprobs(self, request):
        return torch.cat(doccache.read_options(self.model, self.variant, [request], self.store, self.key)[0])
