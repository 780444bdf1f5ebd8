"""The user-facing object: a model, its tokenizer and how to read prompts, with
score / choose / generate. Immutable: ``with_variant`` / ``with_options`` give new views
that share the loaded weights."""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from .core import doccache, generation, scoring
from .core.batch import collate
from .core.codec import Codec
from .core.encoding import NOT_IN_SET, EncodedPrompt
from .core.install import install
from .core.prompt import PromptLike, Set, SetPrompt, as_prompt
from .core.runtime import check_model, forward, prompt_length
from .core.templates import mc_prompt, options_of
from .core.variants import DEFAULT_VARIANT, Variant, get_variant
from .errors import InputError
from .loading import Origin
from .loading.model import load_as
from .loading.options import LoadOptions
from .loading.shipped import default_adapter  # noqa: F401  (setllm.default_adapter)
from .policy import (
    Choice,
    Verdict,
    check_candidates,
    check_choices,
    check_text,
    option_list,
    pick,
    verdict,
)
from .readouts import JudgeRow, candidate_scores, trained_readout
from .tasks.documents import documents_prompt

SCORING_WINDOW = 8  # batches of prompts handed to the scoring driver at once (see SetLLM.score; the lm-eval backend too)


@dataclass(frozen=True)
class ReadOptions:
    """How a :class:`SetLLM` reads prompts and scores responses.

    Attributes:
        variant: one of :data:`setllm.VARIANTS` (mask + positions).
        exact: sort set elements before encoding so outputs are bit-identical under any
            permutation. None: on for the order-invariant variants; it is never applied to
            order-sensitive ones (there the order *is* the input), and always to ``canonical``.
        chat: wrap prompts in the tokenizer's chat template.
        eos: score an option as its text + EOS, as the paper does and as training teaches
            (False: the text alone, lm-eval's convention for plain continuations).
        batch_size: prompts per forward pass.
        progress: show a progress bar on long work.
    """

    variant: Variant = dataclasses.field(default_factory=lambda: get_variant(DEFAULT_VARIANT))
    exact: bool | None = None
    chat: bool = False
    eos: bool = True
    batch_size: int = 8
    progress: bool = False

    def __post_init__(self):
        object.__setattr__(self, "variant", get_variant(self.variant))
        if self.exact is None or self.variant.canonical:  # a canonical variant always sorts
            object.__setattr__(self, "exact", self.variant.invariant)
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise InputError(f"batch_size must be a positive integer, got {self.batch_size!r}")


def _pin_threads(threads: int | None) -> None:
    """Run this thread's torch work on ``threads`` threads (None: as it is). Torch keeps a
    thread count per thread, and a thread takes the process's count of the moment at its first
    parallel op: a thread that starts while another lowers the count for a while (the LoRA
    merge runs on one) would keep the lower count, and a product's bits depend on the count.
    Set at each computation, the count is the model's, whatever thread runs it and whenever."""
    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


class SetLLM:
    """Order-invariant prompting on a Hugging Face causal LM.

    Args:
        model, tokenizer: a loaded model (PEFT-wrapped is fine) and its tokenizer.
        variant, exact, chat, eos, batch_size, progress: see :class:`ReadOptions`.
        allow_untested: run a model type setllm has not verified.
        origin: which model and adapter were loaded (set by :meth:`from_pretrained`).
    """

    def __init__(self, model, tokenizer, variant: str | Variant = DEFAULT_VARIANT, exact: bool | None = None,
                 chat: bool = False, batch_size: int = 8, progress: bool = False, allow_untested: bool = False,
                 eos: bool = True, origin: Origin | None = None, threads: int | None = None):
        check_model(model, allow_untested)
        install(model)  # setllm's linear layers and attention, once: no call changes the model after
        options = ReadOptions(get_variant(variant), exact, chat, eos, batch_size, progress)
        self._init(model, tokenizer, options, origin or Origin.of(model), threads=threads)

    def _init(self, model, tokenizer, options: ReadOptions, origin: Origin, switch: Callable[[], AbstractContextManager] | None = None,
              threads: int | None = None) -> None:
        codec = Codec.for_model(model, tokenizer, options.variant, options.exact, options.chat)
        for name, value in (("model", model), ("tokenizer", tokenizer), ("options", options), ("origin", origin), ("codec", codec),
                            ("_switch", switch), ("_threads", threads)):
            object.__setattr__(self, name, value)

    @contextmanager
    def _running(self):
        """The model to run. A computation selects its row blocks and attention through
        context of its own (:mod:`setllm.core.install`), so views of one model on several
        threads run at the same time; where several adapters share the weights (a view of an
        :class:`setllm.AdapterBank`), the bank's adapter is switched to this view's and held
        there until the computation ends (:mod:`setllm.sharing`). A model loaded with a thread
        count (``threads``, ``$SETLLM_THREADS``) runs every computation on that many, on any
        thread (:func:`_pin_threads`)."""
        _pin_threads(self._threads)
        if self._switch is None:
            yield self.model
        else:
            with self._switch() as model:
                yield model

    def __setattr__(self, name, value):
        raise AttributeError(f"SetLLM is immutable; use with_variant(...) or with_options({name}=...) for a new view")

    @classmethod
    def from_pretrained(cls, model: str | None = None, adapter: str | None = "auto", variant: str | None = None, *,
                        dtype=torch.float32, attn_implementation: str = "auto", device: str | None = None, progress: bool = False,
                        kind: str = "choose", **options) -> SetLLM:
        """Load a model (default: the embedded SmolLM2-135M-Instruct) and wrap it; the
        arguments are those of :class:`setllm.LoadOptions` (``dtype`` may be a torch dtype,
        ``attn_implementation`` is its ``attn``). :meth:`load` takes a ``LoadOptions`` as is.

        ``adapter="auto"`` uses the Set-LLM adapter shipped for ``kind`` of task with the
        embedded model, unless an order-sensitive ``variant`` is asked for (the base model is
        the model without the adapter); ``None`` or ``"none"`` means no adapter. The adapter's
        ``setllm.json`` (or, with no adapter, the model directory's, as a full fine-tune
        writes it) restores the variant, chat mode and EOS scoring it was trained with; an
        explicit different choice is allowed with a warning. An adapter trained on another
        base model is refused unless ``allow_base_mismatch``. ``attn_implementation="auto"``:
        sdpa, and flex attention for a prompt of :data:`setllm.core.runtime.LONG_PROMPT_TOKENS`
        tokens or more.
        """
        dtype = str(dtype).removeprefix("torch.")
        return cls.load(LoadOptions(model, adapter, variant, attn_implementation, device, dtype, **options), kind, progress)

    @classmethod
    def load(cls, options: LoadOptions, kind: str = "choose", progress: bool = False) -> SetLLM:
        """Load what ``options`` says (the one loader of the library, the CLI, the server and
        the lm-eval backend); ``kind`` picks the shipped adapter ``adapter="auto"`` means."""
        model, adapter, info = options.sources(kind)
        net, tok = load_as(options, model, adapter)
        read = info.reading(variant=options.variant, **options.reading())
        return cls(net, tok, **read, exact=options.exact, batch_size=options.batch_size, progress=progress,
                   allow_untested=options.allow_untested, origin=Origin.loaded(model, adapter, info), threads=options.thread_count())

    # -- views --------------------------------------------------------------------------
    @property
    def variant(self) -> Variant:
        return self.options.variant

    @property
    def exact(self) -> bool:
        return bool(self.options.exact)

    @property
    def chat(self) -> bool:
        return self.options.chat

    @property
    def batch_size(self) -> int:
        return self.options.batch_size

    @property
    def judge_readout(self) -> str:
        """The readout :meth:`judge` uses unless told: the one the adapter was trained for
        (``setllm.json``), else :data:`setllm.readouts.DEFAULT_READOUT`."""
        return trained_readout(self.origin.trained_as)

    @property
    def pad_id(self) -> int:
        return self.codec.pad_id

    def with_options(self, **changes) -> SetLLM:
        """A view with other :class:`ReadOptions` (same weights). Changing the variant resets
        ``exact`` to that variant's default unless ``exact`` is given too."""
        if "variant" in changes and "exact" not in changes:
            changes["exact"] = None
        return self._view(dataclasses.replace(self.options, **changes), self._switch)

    def _switched(self, switch: Callable[[], AbstractContextManager]) -> SetLLM:
        """This view, running each computation inside ``switch()`` (:class:`setllm.AdapterBank`'s views)."""
        return self._view(self.options, switch)

    def _view(self, options: ReadOptions, switch) -> SetLLM:
        view = object.__new__(SetLLM)
        view._init(self.model, self.tokenizer, options, self.origin, switch, self._threads)
        return view

    def with_variant(self, variant: str | Variant, exact: bool | None = None) -> SetLLM:
        """The same weights read under another variant. On an adapted model this is not the
        base model: ``from_pretrained(variant="causal-pe")`` loads that (no shipped adapter)."""
        return self.with_options(variant=get_variant(variant), exact=exact)

    # -- encode -------------------------------------------------------------------------
    def encode(self, prompt: PromptLike) -> EncodedPrompt:
        """Tokenize a prompt (canonical element order in exact mode) and check it."""
        return self.codec.encode(prompt)

    def response_ids(self, prompt: PromptLike, option: str, eos: bool | None = None) -> list[int]:
        """Token ids of ``option`` as the response to ``prompt`` (+ EOS unless ``eos=False``)."""
        return self.codec.response_ids(prompt, option, self.options.eos if eos is None else eos)

    # -- score --------------------------------------------------------------------------
    def score(self, prompt: PromptLike, options: Sequence[str] | None = None, eos: bool | None = None) -> list[scoring.OptionScore]:
        """Log-likelihood of each option as the response to one prompt (markup text, a list
        holding a set, a :class:`SetPrompt`...), in the options' order, as HTTP ``/v1/score``
        scores: ``lm.score("Pick one:\n{{apple\n||dog\n}}Answer:", ["apple", "dog"])``.
        Options default to the elements of the prompt's set. Each option is scored as its
        text + EOS (``eos=False``: the text alone). Many prompts: :meth:`score_many`.
        """
        if not _is_single_prompt(prompt) or _nested(options):
            _check_prompt_list(prompt, options)
            warnings.warn("SetLLM.score takes one prompt and a flat list of options; for a list of prompts (or options given "
                          "one list per prompt) call SetLLM.score_many(prompts, options), which returns one list per prompt",
                          FutureWarning, stacklevel=2)
            return self.score_many([prompt] if _is_single_prompt(prompt) else prompt, options, eos)
        return self._score_many([as_prompt(prompt)], None if options is None else [options], eos, single=True)[0]

    def score_many(self, prompts: Sequence[PromptLike], options: Sequence[Sequence[str]] | None = None,
                   eos: bool | None = None) -> list[list[scoring.OptionScore]]:
        """:meth:`score` for a list of prompts, ``options[i]`` prompt ``i``'s (default: the
        elements of each prompt's set): one list of scores per prompt, batched."""
        return self._score_many(_prompt_sequence(prompts, "score"), options, eos)

    def score_request(self, prompt: PromptLike, options: Sequence[str], eos: bool | None = None,
                      name: str = "options") -> scoring.ScoreRequest:
        """The one way a prompt and its options become a request of the scoring driver (the
        library's :meth:`score`, the server, the CLI's checks of a file's rows): options
        checked (text; blank only where EOS follows it: a judge's empty candidate), the prompt
        prepared and encoded once, each option as its response (+ EOS unless ``eos=False``),
        then :meth:`encoded_request`'s checks. Errors name ``name`` (``options[2] ...``)."""
        texts = option_list(options, name, empty=True)
        enc, ids = self.codec.request(prompt, texts, self.options.eos if eos is None else eos)
        return self.encoded_request(enc, ids, name)

    def encoded_request(self, prompt: EncodedPrompt, options: Sequence[Sequence[int]], name: str = "options") -> scoring.ScoreRequest:
        """A request of token ids already made (the lm-eval backend tokenizes continuations
        its own way): every option holds a token (:class:`InputError`), and the prompt with
        its longest option fits the model (:class:`setllm.core.prompt.PromptTooLong`)."""
        empty = next((i for i, o in enumerate(options) if not o), None)
        if empty is not None:
            raise InputError(f"{name}[{empty}] tokenizes to nothing; options must be non-empty text")
        self.codec.check_fits(prompt, max(map(len, options), default=0), "longest option")
        return scoring.ScoreRequest(prompt, [list(o) for o in options])

    def _score_many(self, prompts: list[SetPrompt], options: Sequence[Sequence[str]] | None, eos: bool | None,
                    single: bool = False) -> list[list[scoring.OptionScore]]:
        # Default options keep the caller's element order; the scores come back in it.
        options = [options_of(p) for p in prompts] if options is None else options
        if isinstance(options, str) or not isinstance(options, Sequence):
            raise InputError(f"options must be one list of options per prompt, got {type(options).__name__}")
        if len(options) != len(prompts):
            raise InputError(f"got options for {len(options)} prompts, but {len(prompts)} prompts")
        results: list[list[scoring.OptionScore]] = []
        # The driver packs prompts into forwards of fixed row blocks: give it several batches
        # at once, so that the blocks fill (a lone short prompt pays a whole 64-row block).
        window = self.batch_size * SCORING_WINDOW
        for lo in self._chunks(len(prompts), "scoring", window):
            chunk = range(lo, min(lo + window, len(prompts)))
            requests = [self.score_request(prompts[i], options[i], eos, "options" if single else f"options[{i}]") for i in chunk]
            sums = self.score_encoded(requests)
            results += [scoring.to_option_scores(options[i], s) for i, s in zip(chunk, sums)]
        return results

    def choose(self, question: str, options: Sequence[str], context: str | None = None, normalize: bool = False) -> Choice:
        """Answer a multiple-choice question with the options given as a set.

        ``normalize`` picks by mean per-token log-likelihood instead of the sum.
        """
        check_text(question, "question")
        if context is not None and not isinstance(context, str):
            raise InputError(f"context must be text or None, got {type(context).__name__}")
        options = check_choices(options)
        scores = self.score(mc_prompt(question, options, context), options)
        return pick(scores, normalize)

    # -- judge --------------------------------------------------------------------------
    def judge(self, instruction: str, candidates: Sequence[str], *, input: str | None = None, tie_margin: float = 0.0,
              readout: str | None = None) -> Verdict:
        """Which candidate response to ``instruction`` is best (see :mod:`setllm.tasks.judge`).

        The candidates are one set with identical, unnamed framing, and ``readout`` (one of
        :data:`setllm.readouts.READOUTS`; default: :attr:`judge_readout`) gives each the same
        computation: under an invariant variant the verdict and every score are the same in
        any order. Two best scores within ``tie_margin`` are a tie.
        """
        return self.judge_many([(instruction, candidates, input)], tie_margin, readout)[0]

    def judge_many(self, rows: Sequence[tuple[str, Sequence[str], str | None]], tie_margin: float = 0.0,
                   readout: str | None = None) -> list[Verdict]:
        """:meth:`judge` for many ``(instruction, candidates, input)``, batched."""
        if tie_margin < 0:
            raise InputError(f"tie_margin must be >= 0, got {tie_margin}")
        judged = [JudgeRow(check_text(instr, "instruction"), tuple(check_candidates(c)), _optional_text(inp, "input"))
                  for instr, c, inp in rows]
        scores = candidate_scores(self.score_many, judged, readout or self.judge_readout)
        return [verdict(s, list(r.candidates), tie_margin) for s, r in zip(scores, judged)]

    # -- documents ----------------------------------------------------------------------
    def answer(self, documents: Sequence[str], question: str, max_new_tokens: int = 32) -> str:
        """Answer ``question`` from ``documents`` read as one set (greedy, up to a newline;
        see :mod:`setllm.tasks.documents`): under an invariant variant their order cannot
        change the answer."""
        docs = option_list(documents, "documents")
        if not docs:
            raise InputError("documents: answering needs at least one document, got none")
        if not isinstance(question, str) or not question.strip():
            raise InputError(f"question must be non-empty text, got {question!r}")
        return self.generate(documents_prompt(docs, question), max_new_tokens=max_new_tokens, stop=["\n"]).strip()

    # -- generate -----------------------------------------------------------------------
    def generate(self, prompt: PromptLike, config: generation.GenerationConfig | None = None, **kwargs) -> str:
        """Generate a response for one prompt.

        Decoding options come as a :class:`GenerationConfig` or as its fields by keyword
        (``max_new_tokens=32, temperature=0.7, ...``), as in transformers, whose ``do_sample``
        and ``stop_strings`` are taken too; any other transformers option is refused by name
        (:func:`generation_config`). For many prompts, :meth:`generate_many`.
        """
        if not _is_single_prompt(prompt):
            _prompt_sequence(prompt, "generate")  # neither one prompt nor a list: said before the warning
            warnings.warn("SetLLM.generate takes one prompt; for a list of prompts call SetLLM.generate_many(prompts), "
                          "which returns one text per prompt", FutureWarning, stacklevel=2)
            return self.generate_many(prompt, config, **kwargs)
        return self.generate_many([prompt], config, **kwargs)[0]

    def generate_many(self, prompts: Sequence[PromptLike], config: generation.GenerationConfig | None = None,
                      **kwargs) -> list[str]:
        """:meth:`generate` for a list of prompts, ``batch_size`` at a time: one text per prompt."""
        if config is not None and kwargs:
            raise InputError("pass either a GenerationConfig or keyword arguments, not both")
        config = config or generation_config(**kwargs)
        prompts = _prompt_sequence(prompts, "generate")
        out: list[str] = []
        for lo in self._chunks(len(prompts), "generating"):
            out += [text for text, _ in self.generate_encoded([self.encode(p) for p in prompts[lo : lo + self.batch_size]], config)]
        return out

    # -- encoded requests ---------------------------------------------------------------
    # The entry for front ends that batch and encode on their own (the server, the lm-eval
    # backend): the same rungs as score/generate, so the same request gives the same bits.
    def score_encoded(self, requests: Sequence[scoring.ScoreRequest]) -> list[list[scoring.TokenScore]]:
        """Each request's options scored after its prompt (token ids already made by
        :meth:`encode` and :meth:`response_ids`), through the one scoring driver."""
        with self._running() as model:
            cached = self._cached_documents(model, [r.prompt for r in requests])
            if cached is None:
                return scoring.score_requests(model, self.variant, self.pad_id, requests)
            store, key = cached
            return doccache.score(model, self.variant, requests, store, key)

    def generate_encoded(self, prompts: Sequence[EncodedPrompt], config: generation.GenerationConfig,
                         on_token=None) -> list[tuple[str, list[int]]]:
        """Generated text and token ids for encoded prompts generated together
        (``on_token()`` after each step: a caller's way to stop, by raising)."""
        with self._running() as model:
            cached = self._cached_documents(model, prompts)
            if cached is not None:  # each prompt alone, its documents' keys and values reused
                return [doccache.generate(model, self.tokenizer, self.variant, p, *cached, config, on_token) for p in prompts]
            # A long prompt is read on flex attention, at a bucketed length (a bounded number of compiled shapes).
            batch = collate(list(prompts), self.variant.positions, self.pad_id, length=prompt_length(model, max(map(len, prompts))))
            return generation.generate_tokens(model, self.tokenizer, self.variant, batch, config, on_token=on_token)

    # -- documents read once -------------------------------------------------------------
    def cache_documents(self, max_mb: float = 512.0) -> doccache.DocumentCache:
        """Keep the keys and values of set elements read under ``variant="sbp"`` (at most
        ``max_mb`` MB, least recently used out) and reuse them in every later prompt with the
        same text before the set, in any order and combination: only the missing elements and
        the text after the set are computed (:mod:`setllm.core.doccache`; equal to a fresh
        reading up to float rounding). Shared by every view of these weights. Other variants
        read as before: their documents see text a cache cannot know."""
        return doccache.attach(self.model, max_mb)

    @property
    def document_cache(self) -> doccache.DocumentCache | None:
        """The cache :meth:`cache_documents` attached to these weights, or None."""
        return doccache.of(self.model)

    def _cached_documents(self, model, prompts: Sequence[EncodedPrompt]):
        """The cache and the key of this reading where every prompt can reuse documents, else
        None (one line the first time a cache is there but this reading cannot use it)."""
        store = doccache.of(model)
        if store is None or not prompts:
            return None
        why = next((w for w in (doccache.unusable(self.variant, p) for p in prompts) if w), None)
        if why is not None:
            _say_once(f"setllm: documents are read afresh: {why}")
            return None
        return store, doccache.identity(model, self.origin.adapter, self.variant)

    def token_details(self, prompt: EncodedPrompt, response: Sequence[int], top: int = 0) -> list[scoring.TokenDetail]:
        """Each response token's log-prob after ``prompt`` (and the ``top`` likeliest there)."""
        with self._running() as model:
            return scoring.token_details(model, self.variant, self.pad_id, prompt, response, top)

    def echo_details(self, prompt: EncodedPrompt, top: int = 0) -> list[scoring.TokenDetail]:
        """The prompt's own tokens with their log-probs under this reading (OpenAI's ``echo``,
        what lm-eval's ``local-completions`` reads a continuation by); a token with none has
        ``logprob`` None.

        What a token's log-prob means depends on how the variant reads a prompt. Under a
        causal variant every token reads only the tokens before it: each gets the plain
        next-token log-prob (the first has none). Under the invariant variants a prompt is
        read both ways, so inside it a token's "probability" would have seen the token itself:
        the prompt up to its last set and one token after it is the prompt (log-probs None),
        and the rest is read as the response to that prompt, exactly as setllm scores an
        option (with no set at all, everything after the first token is). The one token
        after the set keeps the reading invariant: the first response token is read from the
        prompt's last token, which inside a set would see only the element that came last.
        That is what ``local-completions`` needs: the continuation after a set context."""
        cut = 1
        if self.variant.invariant:
            inside = [i for i, s in enumerate(prompt.set_ids) if s != NOT_IN_SET]
            cut = inside[-1] + 2 if inside else 1
        cut = min(cut, len(prompt))
        head = EncodedPrompt(prompt.input_ids[:cut], prompt.set_ids[:cut], prompt.element_ids[:cut])
        return [scoring.TokenDetail(t, None, []) for t in head.input_ids] + self.token_details(head, prompt.input_ids[cut:], top)

    # -- raw ----------------------------------------------------------------------------
    @torch.no_grad()
    def logits(self, prompt: PromptLike, response: str | None = None) -> torch.Tensor:
        """Full-forward logits ``[N, V]`` over prompt (+ response) tokens, without a cache."""
        enc = self.encode(prompt)
        resp = [self.response_ids(prompt, response)] if response else None
        with self._running() as model:
            n = len(enc) + (len(resp[0]) if resp else 0)
            batch = collate([enc], self.variant.positions, self.pad_id, responses=resp, length=prompt_length(model, n))
            return forward(model, self.variant, batch.input_ids, batch.position_ids, batch.layout).logits[0, -n:].float()

    def _chunks(self, n: int, what: str, size: int | None = None):
        size = size or self.batch_size
        starts = range(0, n, size)
        show = self.options.progress and n > size
        return tqdm(starts, desc=what, unit="batch", total=math.ceil(n / size), disable=not show)

    def __repr__(self) -> str:
        o = self.options
        return f"SetLLM(model={self.origin.model!r}, adapter={self.origin.adapter!r}, variant={o.variant.name!r}, exact={o.exact}, eos={o.eos})"


# transformers' generate() names: those that map onto GenerationConfig, and how.
_GREEDY = {"do_sample": False}
_TRANSFORMERS_ONLY = ("num_beams", "top_k", "repetition_penalty", "max_length", "min_new_tokens", "num_return_sequences",
                      "no_repeat_ngram_size", "length_penalty", "early_stopping", "eos_token_id", "pad_token_id")


def generation_config(**kwargs) -> generation.GenerationConfig:
    """A :class:`GenerationConfig` from keyword arguments, as transformers' ``generate`` takes
    them: ``max_new_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop`` (also
    ``stop_strings``), and ``do_sample`` (False: greedy; True: sampling, at temperature 1
    unless one is given). Any other transformers option is refused by name, in one line."""
    if "stop_strings" in kwargs:
        kwargs["stop"] = kwargs.pop("stop_strings")
    if "do_sample" in kwargs:
        sample = kwargs.pop("do_sample")
        if not isinstance(sample, bool):
            raise InputError(f"do_sample must be True or False, got {sample!r}")
        temperature = kwargs.get("temperature")
        if not sample:
            if temperature not in (None, 0, 0.0):
                raise InputError(f"do_sample=False decodes greedily; it contradicts temperature={temperature} (drop one)")
            kwargs["temperature"] = 0.0
        elif temperature is None:
            kwargs["temperature"] = 1.0  # transformers' default temperature when sampling
        elif temperature == 0:
            raise InputError("do_sample=True samples; temperature=0 decodes greedily (drop one, or give temperature > 0)")
    known = {f.name for f in dataclasses.fields(generation.GenerationConfig)}
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        what = "a transformers option setllm's decoding does not support" if unknown[0] in _TRANSFORMERS_ONLY else "an unknown option"
        raise InputError(f"generate: {unknown[0]!r} is {what}; it takes {', '.join(sorted(known))}, do_sample and stop_strings")
    return generation.GenerationConfig(**kwargs)


def _optional_text(value, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InputError(f"{where} must be text or None, got {type(value).__name__}")
    return value


def _check_prompt_list(prompts, options) -> None:
    """A list of plain strings is a list of prompts (one per string); given one flat list of
    options, it was meant as one prompt: say how it was read, and the fix."""
    if (isinstance(prompts, (list, tuple)) and prompts and all(isinstance(p, str) for p in prompts)
            and options is not None and not _nested(options)):
        raise InputError(f"a list of {len(prompts)} strings is read as {len(prompts)} prompts, which take one list of options "
                         f"each (options=[[...], ...]); for one prompt, pass one string (markup: 'Q:\\n{{{{a\\n||b\\n}}}}Answer:') "
                         f"or a list holding a Set (['Q:\\n', Set(['a\\n', 'b\\n']), 'Answer:'])")


@functools.cache
def _say_once(message: str) -> None:
    warnings.warn(message, stacklevel=3)


def _is_single_prompt(obj) -> bool:
    """One prompt: text, a SetPrompt, a JSON-style dict, or a list that holds a set."""
    if isinstance(obj, (str, SetPrompt, dict)):
        return True
    return isinstance(obj, (list, tuple)) and any(isinstance(x, (set, frozenset, Set)) or (isinstance(x, dict) and "set" in x) for x in obj)


def _nested(options) -> bool:
    """Options given one list per prompt (``[["a", "b"]]``), not one flat list (``["a", "b"]``)."""
    return (isinstance(options, Sequence) and not isinstance(options, str) and len(options) > 0
            and all(isinstance(o, Sequence) and not isinstance(o, str) for o in options))


def _prompt_sequence(prompts, call: str) -> list[SetPrompt]:
    """The prompts of ``{call}_many``: a list, never one prompt (that is ``{call}``'s)."""
    if isinstance(prompts, (str, SetPrompt, dict)) or not isinstance(prompts, Sequence):
        raise InputError(f"{call}_many takes a list of prompts, got {type(prompts).__name__}; for one prompt (text, a list "
                         f"holding a Set, a SetPrompt) call {call}")
    return [as_prompt(p) for p in prompts]


