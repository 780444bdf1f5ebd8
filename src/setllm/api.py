"""The user-facing object: a model, its tokenizer and a variant, with score/choose/generate."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from . import generation, scoring
from .batch import collate
from .encoding import EncodedPrompt, PromptEncoder
from .loading import AdapterInfo, load_model
from .prompt import PromptError, PromptLike, as_prompt
from .runtime import check_model, context_length, forward
from .templates import mc_prompt, options_of, response_text
from .variants import DEFAULT_VARIANT, Variant, get_variant

DEFAULT_ADAPTER = Path(__file__).parent / "adapters" / "smollm2-135m-setllm"


@dataclass(frozen=True)
class Choice:
    """The answer to one multiple-choice question."""

    answer: str
    index: int
    scores: list[scoring.OptionScore]


def default_adapter() -> str | None:
    """The Set-LLM adapter shipped for the embedded model, if this install has it."""
    return str(DEFAULT_ADAPTER) if (DEFAULT_ADAPTER / "adapter_config.json").exists() else None


class SetLLM:
    """Order-invariant prompting on a Hugging Face causal LM.

    Args:
        model, tokenizer: a loaded model (PEFT-wrapped is fine) and its tokenizer.
        variant: one of :data:`setllm.VARIANTS` (default ``setmask-setpe``).
        exact: sort set elements before encoding so outputs are bit-identical under any
            permutation. Defaults to on for the order-invariant variants; it is never
            applied to order-sensitive ones (there the order *is* the input).
        chat: wrap prompts in the tokenizer's chat template.
        batch_size: prompts per forward pass.
        progress: show a progress bar on long work.
    """

    def __init__(self, model, tokenizer, variant: str | Variant = DEFAULT_VARIANT, exact: bool | None = None,
                 chat: bool = False, batch_size: int = 8, progress: bool = False, allow_untested: bool = False):
        check_model(model, allow_untested)
        self.model, self.tokenizer = model, tokenizer
        self.variant = get_variant(variant)
        if exact and not self.variant.invariant:
            raise ValueError(f"exact mode sorts set elements, which would hide the order sensitivity of {self.variant.name}; it applies only to invariant variants")
        self.exact = self.variant.invariant if exact is None else exact
        self.encoder = PromptEncoder(tokenizer, chat=chat)
        self.chat = chat
        self.batch_size = batch_size
        self.progress = progress
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)

    @classmethod
    def from_pretrained(cls, model: str | None = None, adapter: str | None = "auto", variant: str | None = None, *,
                        dtype=torch.float32, attn_implementation: str = "sdpa", device: str | None = None,
                        allow_pickle: bool = False, **kwargs) -> SetLLM:
        """Load a model (default: the embedded SmolLM2-135M-Instruct) and wrap it.

        ``adapter="auto"`` uses the shipped Set-LLM adapter with the embedded model and no
        adapter otherwise; ``None`` means no adapter. The adapter's ``setllm.json`` (or, with
        no adapter, the model directory's, as a full fine-tune writes it) supplies the
        variant (and chat mode) unless ``variant`` is given.
        """
        if adapter == "auto":
            adapter = default_adapter() if model is None else None
        # A full fine-tune saves setllm.json next to the weights; an adapter's wins over it.
        info = AdapterInfo.read(adapter) if adapter else AdapterInfo.read(model) if model and Path(model).is_dir() else AdapterInfo()
        net, tok = load_model(model, adapter, dtype=dtype, attn_implementation=attn_implementation, device=device, allow_pickle=allow_pickle)
        kwargs.setdefault("chat", info.chat)
        return cls(net, tok, variant or info.variant or DEFAULT_VARIANT, **kwargs)

    # -- encode -------------------------------------------------------------------------
    def encode(self, prompt: PromptLike) -> EncodedPrompt:
        """Tokenize a prompt (canonical element order in exact mode) and check its length."""
        prompt = as_prompt(prompt)
        enc = self.encoder.encode(prompt.canonical() if self.exact else prompt)
        limit = context_length(self.model.config)
        if limit is not None and len(enc) >= limit:
            raise PromptError(f"prompt is {len(enc)} tokens, longer than the model's context ({limit} tokens)")
        return enc

    def response_ids(self, prompt: PromptLike, option: str) -> list[int]:
        """Token ids of ``option`` as the response to ``prompt``."""
        prompt = as_prompt(prompt)
        after = "\n" if self.chat else prompt.text()[-1:]
        return self.encoder.tokenize(response_text(option, after))

    # -- score --------------------------------------------------------------------------
    def score(self, prompts: Sequence[PromptLike], options: Sequence[Sequence[str]] | None = None) -> list[list[scoring.OptionScore]]:
        """Log-likelihood of each option as the response to each prompt.

        ``options[i]`` are prompt ``i``'s candidates; by default the elements of its set.
        """
        prompts = [as_prompt(p) for p in prompts]
        options = [options_of(p) for p in prompts] if options is None else [list(o) for o in options]
        if len(options) != len(prompts):
            raise ValueError(f"got options for {len(options)} prompts, but {len(prompts)} prompts")
        results: list[list[scoring.OptionScore]] = []
        for lo in self._chunks(len(prompts), "scoring"):
            chunk = prompts[lo : lo + self.batch_size]
            opts = options[lo : lo + self.batch_size]
            batch = collate([self.encode(p) for p in chunk], self.variant.positions, self.pad_id)
            cache, next_logprobs = scoring.prefill(self.model, self.variant, batch)
            ids = [[self.response_ids(p, o) for o in os_] for p, os_ in zip(chunk, opts)]
            sums = scoring.score_continuations(self.model, self.variant, batch, cache, next_logprobs, ids)
            results += [scoring.to_option_scores(o, s) for o, s in zip(opts, sums)]
        return results

    def choose(self, question: str, options: Sequence[str], context: str | None = None, normalize: bool = False) -> Choice:
        """Answer a multiple-choice question with the options given as a set.

        ``normalize`` picks by mean per-token log-likelihood instead of the sum.
        """
        if len(options) < 2:
            raise ValueError("choose needs at least two options")
        scores = self.score([mc_prompt(question, options, context)], [list(options)])[0]
        return pick(scores, normalize)

    # -- generate -----------------------------------------------------------------------
    def generate(self, prompts: Sequence[PromptLike], config: generation.GenerationConfig | None = None) -> list[str]:
        """Generate a response for each prompt."""
        config = config or generation.GenerationConfig()
        out: list[str] = []
        for lo in self._chunks(len(prompts), "generating"):
            batch = collate([self.encode(p) for p in prompts[lo : lo + self.batch_size]], self.variant.positions, self.pad_id)
            out += generation.generate(self.model, self.tokenizer, self.variant, batch, config)
        return out

    # -- raw ----------------------------------------------------------------------------
    @torch.no_grad()
    def logits(self, prompt: PromptLike, response: str | None = None) -> torch.Tensor:
        """Full-forward logits ``[N, V]`` over prompt (+ response) tokens, without a cache."""
        enc = self.encode(prompt)
        resp = [self.response_ids(prompt, response)] if response else None
        batch = collate([enc], self.variant.positions, self.pad_id, responses=resp)
        return forward(self.model, self.variant, batch.input_ids, batch.position_ids, batch.layout).logits[0].float()

    def _chunks(self, n: int, what: str):
        starts = range(0, n, self.batch_size)
        show = self.progress and n > self.batch_size
        return tqdm(starts, desc=what, unit="batch", total=math.ceil(n / self.batch_size), disable=not show)


def pick(scores: Sequence[scoring.OptionScore], normalize: bool = False) -> Choice:
    """The best-scoring option (first of equal bests)."""
    key = (lambda s: s.mean_logprob) if normalize else (lambda s: s.logprob)
    best = max(range(len(scores)), key=lambda i: key(scores[i]))
    return Choice(scores[best].text, best, list(scores))

