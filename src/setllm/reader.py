"""The encoded reader beneath :class:`setllm.SetLLM`: a model, its tokenizer and how to read
prompts (:class:`ReadOptions`), requests of token ids in, scores, generated text and
log-probs out, and the documents each reading can reuse (:mod:`setllm.core.doccache`).

The front ends that batch and encode on their own (the server's engine, the lm-eval backend)
use only this: ``score_request`` / ``encoded_request`` / ``generate_request`` build a request
and check it (the fit rule before any forward), ``score_encoded`` / ``generate_encoded`` /
``token_details`` / ``echo_details`` / ``logits`` run it on the ladder. The verbs a user
calls (score, choose, judge, answer, generate) sit above it, in :mod:`setllm.api`.
Immutable: ``with_variant`` / ``with_options`` give new views that share the loaded weights.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import torch
from tqdm.auto import tqdm

from . import verbs
from .core import doccache
from .core.drivers import CachedDocumentsDriver, Driver, PackedDriver
from .core.forward import generation, scoring
from .core.forward.runtime import forward, prompt_length
from .core.layout.positions import NOT_IN_SET
from .core.layout.variants import DEFAULT_VARIANT, Variant, get_variant
from .core.model.families import check_model
from .core.model.install import install
from .core.text.prompt import PromptLike
from .core.tokens.batch import collate
from .core.tokens.codec import Codec
from .core.tokens.encoding import EncodedPrompt
from .errors import InputError, SetLLMWarning
from .loading import Origin
from .policy import option_list

if TYPE_CHECKING:
    from typing_extensions import Self  # typing's from Python 3.11


@dataclass(frozen=True)
class ReadOptions:
    """How a :class:`Reader` (and so a :class:`setllm.SetLLM`) reads prompts and scores responses.

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


class Reader:
    """A model read one way: requests of token ids in, scores and text out.

    Args:
        model, tokenizer: a loaded model (PEFT-wrapped is fine) and its tokenizer.
        variant, exact, chat, eos, batch_size, progress: see :class:`ReadOptions`.
        allow_untested: run a model type setllm has not verified.
        origin: which model and adapter were loaded (set by :meth:`setllm.SetLLM.from_pretrained`).
        threads: the torch thread count every computation runs on (None: the thread's own).
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
        if doccache.variant_problem(options.variant) is None:
            doccache.on_by_default(model)  # a reading that caches documents: the weights' cache is made now, once (not by a read)
        for name, value in (("model", model), ("tokenizer", tokenizer), ("options", options), ("origin", origin), ("codec", codec),
                            ("_switch", switch), ("_threads", threads)):
            object.__setattr__(self, name, value)

    @contextmanager
    def _running(self):
        """The model to run. A computation selects its row blocks and attention through context of
        its own (:mod:`setllm.core.model.install`), so views of one model run at once on several
        threads; a view of an :class:`setllm.AdapterBank` switches the bank to its adapter until the
        computation ends (:mod:`setllm.sharing`); ``threads`` (``$SETLLM_THREADS``) pins every
        computation's thread count, on any thread (:func:`_pin_threads`)."""
        _pin_threads(self._threads)
        if self._switch is None:
            yield self.model
        else:
            with self._switch() as model:
                yield model

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable; use with_variant(...) or with_options({name}=...) for a new view")

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
    def pad_id(self) -> int:
        return self.codec.pad_id

    def with_options(self, **changes) -> Self:
        """A view with other :class:`ReadOptions` (same weights). Changing the variant resets
        ``exact`` to that variant's default unless ``exact`` is given too."""
        if "variant" in changes and "exact" not in changes:
            changes["exact"] = None
        return self._view(dataclasses.replace(self.options, **changes), self._switch)

    def _view(self, options: ReadOptions, switch) -> Self:
        view = object.__new__(type(self))
        view._init(self.model, self.tokenizer, options, self.origin, switch, self._threads)
        return view

    def with_variant(self, variant: str | Variant, exact: bool | None = None) -> Self:
        """The same weights read under another variant. On an adapted model this is not the
        base model: ``from_pretrained(variant="causal-pe")`` loads that (no shipped adapter)."""
        return self.with_options(variant=get_variant(variant), exact=exact)

    def encode(self, prompt: PromptLike) -> EncodedPrompt:
        """Tokenize a prompt (canonical element order in exact mode) and check it."""
        return self.codec.encode(prompt)

    def response_ids(self, prompt: PromptLike, option: str, eos: bool | None = None) -> list[int]:
        """Token ids of ``option`` as the response to ``prompt`` (+ EOS unless ``eos=False``)."""
        return self.codec.response_ids(prompt, option, self.options.eos if eos is None else eos)

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
        its longest option fits the model (:class:`setllm.core.text.prompt.PromptTooLong`)."""
        empty = next((i for i, o in enumerate(options) if not o), None)
        if empty is not None:
            raise InputError(f"{name}[{empty}] tokenizes to nothing; options must be non-empty text")
        self.codec.check_fits(prompt, max(map(len, options), default=0), "longest option")
        return scoring.ScoreRequest(prompt, [list(o) for o in options])

    def generate_request(self, prompt: PromptLike | EncodedPrompt, config: generation.GenerationConfig | None,
                         what: str = "max_new_tokens") -> verbs.GenerateRequest:
        """The one way a prompt becomes a request of decoding (the library's :meth:`generate`,
        the server): the prompt encoded (an :class:`EncodedPrompt` as is) and, before any
        forward, the fit rule for it and ``config.max_new_tokens`` tokens after it
        (:class:`setllm.core.text.prompt.PromptTooLong` naming ``what``)."""
        enc = prompt if isinstance(prompt, EncodedPrompt) else self.encode(prompt)
        self.codec.check_fits(enc, config.max_new_tokens if config is not None else 0, what)
        return verbs.GenerateRequest(enc, config)

    def score_encoded(self, requests: Sequence[scoring.ScoreRequest]) -> list[list[scoring.TokenScore]]:
        """Each request's options scored after its prompt (token ids already made by
        :meth:`encode` and :meth:`response_ids`), through the one scoring driver (a prompt
        whose documents can be reused: through :func:`setllm.core.doccache.score`)."""
        with self._running() as model:
            return self._each(model, [r.prompt for r in requests], requests, lambda driver, rs: driver.score(rs))

    def generate_encoded(self, prompts: Sequence[EncodedPrompt], config: generation.GenerationConfig,
                         on_token=None) -> list[tuple[str, list[int]]]:
        """Generated text and token ids for encoded prompts generated together
        (``on_token(tokens)`` after each step, with each prompt's tokens so far: a caller's way
        to stream them, or to stop by raising)."""
        with self._running() as model:
            return self._each(model, prompts, prompts, lambda driver, ps: driver.generate(ps, config, on_token))

    def _each(self, model, prompts: Sequence[EncodedPrompt], items: Sequence, run: Callable[[Driver, list], list]) -> list:
        """``run(driver, items)`` for each group of items and the driver that serves their
        prompts (:meth:`_drivers`), results in the items' order."""
        out = [None] * len(items)
        for driver, at in self._drivers(model, prompts):
            for i, result in zip(at, run(driver, [items[i] for i in at])):
                out[i] = result
        return out

    def _drivers(self, model, prompts: Sequence[EncodedPrompt]) -> list[tuple[Driver, list[int]]]:
        """Which driver serves each prompt, as ``(driver, indices)`` groups: the document cache's
        for a prompt whose documents can be reused, the packed driver for the others.
        Which one reads a prompt depends on it alone, never on the batch it came in."""
        can = self._reusable(model, prompts)
        groups: list[tuple[Driver, list[int]]] = []
        if any(can):
            store, key = doccache.for_reading(model), doccache.reading_key(model, self.tokenizer, self.variant, self.origin.adapter)
            groups.append((CachedDocumentsDriver(model, self.tokenizer, self.variant, store, key), [i for i, c in enumerate(can) if c]))
        if not all(can):
            groups.append((PackedDriver(model, self.tokenizer, self.variant, self.pad_id), [i for i, c in enumerate(can) if not c]))
        return groups

    def cache_documents(self, max_mb: float = doccache.DEFAULT_MB, directory: str | os.PathLike | None = None,
                        disk_mb: float = doccache.DEFAULT_DISK_MB, warn: bool = True) -> doccache.DocumentCache | None:
        """Keep the keys and values of set elements read under ``variant="sbp"`` (at most
        ``max_mb`` MB in memory, least recently used out) and reuse them in every later prompt
        with the same text before the set, in any order and combination: only the missing
        elements and the text after the set are computed (:mod:`setllm.core.doccache`; the
        same bits as with no cache). Shared by every view of these weights. Under ``sbp`` a cache
        of :data:`setllm.core.doccache.DEFAULT_MB` MB is on without this call; ``max_mb=0`` switches
        it off (returns None). ``directory``: also keep each piece on disk there (at most ``disk_mb``
        MB, least recently used out), for a restarted process or another one. Other variants read as before:
        their documents see text a cache cannot know (said once, at the first such reading;
        ``warn=False``: not said, as where a server said it at start-up). The one place a cache
        is set: the CLI, the server and ``answer``'s documents reader (which reads through its
        owner's: :func:`setllm.core.doccache.share`) go through it."""
        cache = doccache.attach(self.model, max_mb, directory, disk_mb, warn)
        if cache is not None and doccache.variant_problem(self.variant) is None:
            with self._running() as model:  # the key's fingerprints now (weights, tokenizer: 0.1 s), not in the first question's time
                doccache.reading_key(model, self.tokenizer, self.variant, self.origin.adapter)
        return cache

    @property
    def document_cache(self) -> doccache.DocumentCache | None:
        """The cache of these weights (by default one of :data:`setllm.core.doccache.DEFAULT_MB`
        MB, made when they were wrapped; or as :meth:`cache_documents` set it), or None (off)."""
        return doccache.of(self.model)

    def _reusable(self, model, prompts: Sequence[EncodedPrompt]) -> list[bool]:
        """Which prompts can reuse documents (one line the first time a cache asked for is
        there but a prompt cannot use it). Those are read through the cache, or with it off
        through a scratch one for the call: a reading that can reuse documents always
        computes them as the cached reading does, so the two give the same bits
        (:mod:`setllm.core.doccache`)."""
        why = [doccache.unusable(self.variant, p) for p in prompts]
        first = next((w for w in why if w), None)
        store = doccache.of(model) if first else None
        if store is not None and store.warn:
            say_once(f"documents are read afresh: {first}")
        return [w is None for w in why]

    def token_details(self, prompt: EncodedPrompt, response: Sequence[int], top: int = 0) -> list[scoring.TokenDetail]:
        """Each response token's log-prob after ``prompt`` (and the ``top`` likeliest there), from
        the very reading :meth:`score_encoded` gives that option (the scoring driver's packed
        forward, or the documents' cache where it serves): the bits it sums."""
        if not response:
            return []
        request = scoring.ScoreRequest(prompt, [list(response)])
        with self._running() as model:  # read as score_encoded reads this option: through the documents' cache where it can
            [dists] = self._each(model, [prompt], [request], lambda driver, rs: [driver.logprobs(r) for r in rs])
        return scoring.token_details(response, dists, top)

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
        return f"{type(self).__name__}(model={self.origin.model!r}, adapter={self.origin.adapter!r}, variant={o.variant.name!r}, exact={o.exact}, eos={o.eos})"


R = TypeVar("R", bound=Reader)


def switched(reader: R, switch: Callable[[], AbstractContextManager]) -> R:
    """A view of ``reader`` (its weights, its options) that runs each computation inside
    ``switch()``: the seam :class:`setllm.AdapterBank` makes its views through (``switch``
    activates one adapter of a shared model for the computation)."""
    return reader._view(reader.options, switch)


@functools.cache
def say_once(message: str) -> None:
    warnings.warn(message, SetLLMWarning, stacklevel=3)
