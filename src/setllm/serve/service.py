"""What the endpoints ask of the model, as coroutines: checked jobs in, results out.

A new endpoint (a judge, say) is a schema in :mod:`.schemas` and a few lines in
:mod:`.routes` calling :meth:`Service.score` or :meth:`Service.generate` (its declaration for
``--replicas`` with them: :mod:`.declare`); queueing, batching, limits and metrics come with them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import verbs
from ..core import doccache
from ..core.doccache.stats import gauges
from ..core.forward.values import GenerationConfig
from ..core.text.chat import chat_prompt
from ..core.text.prompt import SetPrompt, parse_markup, template_prompt
from ..loading import Origin
from ..loading.plan import DOCUMENTS
from ..policy import verdict
from ..readouts import get_readout, trained_readout
from .batch_check import BatchingCheck
from .batcher import Batcher
from .config import ServeConfig
from .engine import CallJob, Engine, Engines, Generated, GenerateJob, JudgeJob, ScoreJob, Scores
from .errors import BadRequest, NotFound, QueueFull
from .metrics import Metrics

log = logging.getLogger("setllm.serve")
GENERIC_NAME = "setllm"  # the model name any client may send for the main model


@dataclass(frozen=True)
class DeferredModel:
    """A model the server loads on its first request (on the model thread): a second copy
    that one route reads, e.g. the embedded model with its judge adapter for ``/v1/judge``.
    What it is (``origin``, and so its judge readout) is known before it loads."""

    origin: Origin
    load: Callable[[], Any]

    @property
    def judge_readout(self) -> str:
        return trained_readout(self.origin.trained_as)


class Service:
    """The model behind a queue: the one object the routes talk to."""

    def __init__(self, lm, config: ServeConfig, judge_lm=None, adapters: Mapping[str, Any] | None = None):
        """``judge_lm``: the model ``/v1/judge`` reads with (None: ``lm``); a
        :class:`DeferredModel` loads with the first judge request. ``adapters``: models a
        request may name (its ``adapter`` field; OpenAI's ``model``), e.g. the views of one
        :class:`setllm.AdapterBank`; one that is ``lm`` or ``judge_lm`` is served by that
        model's engine under both names."""
        self.lm = lm
        self.judge_lm = judge_lm if judge_lm is not None else lm
        self.adapters = dict(adapters or {})
        self.config = config
        self.metrics = Metrics()
        # Said at start-up (setllm serve), not at the first request: a cache the served reading cannot use.
        self.documents = lm.cache_documents(doccache.DEFAULT_MB if config.cache_mb is None else config.cache_mb,
                                            config.cache_dir, config.cache_dir_mb, warn=False)
        self.engines = self._engines()
        self.batcher = Batcher(self.engines.run, config.max_batch_size, config.max_queue, config.batch_window_ms / 1000, config.timeout_s)
        self.check = BatchingCheck(self.engines, self.batcher.call, lm, config.max_batch_size, config.batch_check)
        self.draining = False
        self.in_flight = 0  # HTTP requests being answered (kept by the app's middleware)

    def _new_engine(self, lm) -> Engine:
        return Engine(lm, self.config.max_prompt_tokens, on_forward=self.metrics.observe_batch)

    def _engines(self) -> Engines:
        """One engine per distinct model (views of one bank share its weights, not a forward);
        a name for a model already seen is an alias of its engine."""
        engine = self._new_engine
        built, deferred, keys = {}, {}, {}
        self.aliases: dict[str, str] = {}
        self.models: dict[str, Any] = {}
        for name, model in [("main", self.lm), ("judge", self.judge_lm), *self.adapters.items(), *self._documents_reading()]:
            if id(model) in keys:
                self.aliases[name] = keys[id(model)]
                continue
            keys[id(model)] = name
            self.models[name] = model
            if isinstance(model, DeferredModel):
                deferred[name] = functools.partial(lambda m: engine(m.load()), model)
            else:
                built[name] = engine(model)
        return Engines(built, deferred)

    def _documents_reading(self) -> list[tuple[str, DeferredModel]]:
        """The main model's own documents reading (``adapter="auto"`` loaded another kind's
        adapter: :meth:`setllm.SetLLM.documents_reader`), loaded by the first ``/v1/answer``;
        none where an adapter is served as ``documents`` or the model reads documents itself."""
        origin = getattr(self.lm, "answers_with", None)
        if DOCUMENTS in self.adapters or origin is None:
            return []
        return [(DOCUMENTS, DeferredModel(origin, functools.partial(self.lm.documents_reader, say=False)))]  # the start-up lines say it

    def engine_key(self, name: str | None, default: str = "main", variant: str | None = None) -> str:
        """The engine that reads a request naming ``name`` (setllm's ``adapter``, OpenAI's
        ``model``): None, ``"setllm"`` or the served model's name mean ``default`` (the
        default reading); else it must be a served adapter's name (``GET /v1/models``), with
        one adapter served or several. Any other name is a 404 listing what is served: a typo,
        or another provider's model name, never reads with another adapter or model."""
        if name is None or name in (self.model_name, GENERIC_NAME):
            name = default
        elif name not in self.adapters:
            raise NotFound(f"no adapter or model {name!r} on this server; it serves: {', '.join(self.served)} "
                           f"({GENERIC_NAME!r} or no name: the default reading)")
        key = self.aliases.get(name, name)
        return key if variant is None else self._variant_engine(key, variant)

    def _variant_engine(self, key: str, variant: str) -> str:
        """The engine of model ``key`` read under ``variant`` (a request's ``variant``): a
        ``with_variant`` view of the same weights, built on the model thread by its first
        request, its own engine (a forward never mixes readings)."""
        vkey = f"{key}@{variant}"
        if vkey not in self.engines:
            self.engines.defer(vkey, lambda: self._new_engine(self.engines.get(key).lm.with_variant(variant)))
        return vkey

    def reading(self, name: str | None, default: str = "main", variant: str | None = None) -> dict[str, Any]:
        """Which reading answers a request naming adapter ``name`` and ``variant``: the model,
        the adapter's folder (None: no adapter) and the variant, the fields ``setllm choose
        --json`` gives, so an answer says what computed it."""
        key = self.engine_key(name, default)
        model = self.models[key]
        engine = self.engines.built(key)
        loaded = engine.lm if engine is not None else model  # a deferred copy: once loaded
        own = getattr(loaded, "variant", None)
        return {"model": self.model_name, "adapter": model.origin.adapter, "variant": variant or (own.name if own else None)}

    def answered_by(self, name: str | None) -> str:
        """The ``model`` an OpenAI response names: the adapter the request picked, else the model's name."""
        return name if name in self.adapters else self.model_name

    @property
    def served(self) -> list[str]:
        """The names a request may give: the model's, then each adapter's."""
        return [self.model_name, *self.adapters]

    @property
    def model_name(self) -> str:
        return str(self.lm.origin.model or "setllm")

    # -- life cycle -------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the model thread; nothing else runs before the server listens. The batching
        check's verdict is read from the cache, or the check runs in the background, one
        forward at a time between requests (:class:`.batch_check.BatchingCheck`)."""
        await self.batcher.start()
        self.check.start(stopping=lambda: self.draining or self.batcher.stopped)

    @property
    def batching(self) -> str:
        """What batching the server does now, in words (``/health``, the start banner)."""
        return self.check.batching

    async def stop(self) -> None:
        self.check.cancel()
        await self.batcher.stop()

    def start_draining(self) -> None:
        """From now on new requests get 503; those already accepted finish."""
        self.draining = True

    def idle(self) -> bool:
        return self.in_flight == 0 and not self.check.busy and self.batcher.idle()

    # -- work -------------------------------------------------------------------------------
    async def score(self, prompt: SetPrompt, options: Sequence[str], adapter: str | None = None, variant: str | None = None) -> Scores:
        """``adapter``: the model a request named (None: the main one; see :meth:`engine_key`);
        ``variant``: the reading it asked for (None: that model's own)."""
        self.config.check_elements(prompt)
        return await self.batcher.submit(ScoreJob(prompt, tuple(options), self.engine_key(adapter, variant=variant)))

    async def choose(self, question: str, options: Sequence[str], context: str | None = None,
                     adapter: str | None = None, variant: str | None = None) -> tuple[list[str], int, Scores]:
        """The options as read (stripped), the index of the best, and all scores: the
        library's request (:func:`setllm.verbs.choose`) and choice policy."""
        self.config.check_options(options)
        request = verbs.choose(question, options, context)
        scores = await self.score(request.prompt, request.options, adapter, variant)
        return list(request.options), request.choice(scores.option_scores(request.options)).index, scores

    async def judge(self, instruction: str, candidates: Sequence[str], input: str | None = None,
                    readout: str | None = None, adapter: str | None = None, variant: str | None = None) -> tuple[list[int], list[float]]:
        """The ranking (best first) and scores of candidate responses under ``readout``
        (:mod:`setllm.readouts`; default: the reading model's, as ``setllm judge``; that
        model: the judge's unless ``adapter`` names another); equal scores rank by candidate
        text, so the ranking cannot depend on their order."""
        self.config.check_options(candidates)
        row = verbs.judge(instruction, candidates, input)  # the library's checks; an empty response is a real candidate
        key = self.engine_key(adapter, "judge")
        readout = get_readout(readout or self.models[key].judge_readout).name
        scores = await self.batcher.submit(JudgeJob(row, readout, self.engine_key(adapter, "judge", variant)))
        return verdict(scores, list(row.candidates)).ranking, scores

    async def answer(self, documents: Sequence[str], question: str, max_new_tokens: int,
                     adapter: str | None = None, variant: str | None = None) -> tuple[str, str, str | None]:
        """The answer to ``question`` from ``documents`` (the library's request,
        :func:`setllm.verbs.answer`), the engine that read it and the variant it was read
        under (None: the engine's own): with no ``adapter`` named, the documents reading
        :meth:`setllm.SetLLM.answer` reads with (:meth:`answer_default`)."""
        request = verbs.answer(documents, question, max_new_tokens)
        default = self.answer_default(variant)
        if adapter is None and default == DOCUMENTS:
            variant = None  # the main reading's own variant named: the documents reading reads as it was trained (sbp), as the library's
        out = await self.generate(request.prompt, request.config, adapter=adapter, variant=variant, default=default)
        return request.text(out.text), default, variant

    def answer_default(self, variant: str | None) -> str:
        """The model that answers documents for a request naming no adapter, as
        :meth:`setllm.SetLLM.answer` picks it: the documents adapter or reading where the
        main model has one (``adapter="auto"``), else the main model; a request for another
        variant reads with the main model, as a library view read otherwise answers as it is."""
        other = variant is not None and variant != self.lm.variant.name
        return DOCUMENTS if DOCUMENTS in self.engines and not other else "main"

    async def generate(self, prompt: SetPrompt | tuple[int, ...], config: GenerationConfig | None, field: str = "max_new_tokens",
                       logprobs: int | None = None, echo: bool = False, adapter: str | None = None, variant: str | None = None,
                       default: str = "main", stream: Callable[[Any], None] | None = None) -> Generated:
        """``field``: what the request calls ``max_new_tokens``, for the error message;
        ``config`` None: generate nothing (echo only); ``logprobs``/``echo``/``stream``: see
        :class:`GenerateJob`; ``adapter``: as :meth:`score`'s (``default``: the model of a
        request naming none)."""
        key = self.engine_key(adapter, default, variant)
        if isinstance(prompt, SetPrompt):
            self.config.check_elements(prompt)
        if config is not None:
            self.config.check_new_tokens(config.max_new_tokens, field)
        return await self.batcher.submit(GenerateJob(prompt, config, logprobs, echo, key, field, stream))

    async def call(self, run: Callable[[Any, Any], Any], adapter: str | None = None, prompt: SetPrompt | None = None) -> Any:
        """``run(lm, encoded)`` on the model thread, queued, bounded and cancelled as every job is: a
        structured answer or a tool call (:mod:`.openai.structured`, :mod:`.openai.tools`); ``prompt``: the one it
        reads (413 past ``--max-prompt-tokens``), handed to ``run`` encoded as it was sized (no prompt: None)."""
        return await self.batcher.submit(CallJob(run, self.engine_key(adapter), prompt))

    async def generate_all(self, prompts: Sequence[SetPrompt | tuple[int, ...]], *args: Any, using=None, **kwargs: Any) -> list[Generated]:
        """:meth:`generate` (or ``using``, a route's structured answer) for each prompt of one
        request, all or none: the request is refused up front where its prompts are too many
        (``--max-prompts``) or the queue has no room for all of them, and the first failure
        cancels the rest (nobody waits for them)."""
        self.check_prompts(len(prompts))
        run = using or self.generate
        tasks = [asyncio.ensure_future(run(p, *args, **kwargs)) for p in prompts]
        try:
            return await asyncio.gather(*tasks)
        finally:
            for task in tasks:  # after the first failure: the rest are dropped (a done task ignores it)
                task.cancel()

    def check_prompts(self, n: int) -> None:
        """Refuse a request of ``n`` prompts this server will not queue whole."""
        if n > self.config.max_prompts:
            raise BadRequest(f"prompt: at most {self.config.max_prompts} prompts per request (--max-prompts), got {n}")
        room = self.batcher.max_queue - self.batcher.queued
        if n > room:
            raise QueueFull(f"queue has room for {room} of this request's {n} prompts (--max-queue {self.batcher.max_queue}); retry shortly")

    def chat(self, messages: Sequence[dict], adapter: str | None = None) -> SetPrompt:
        """Chat messages as the prompt the model named ``adapter`` reads (a name not served
        is its 404, before the messages are read): in the chat template
        (:func:`setllm.core.text.chat.chat_prompt`), or, for an adapter trained on plain prompts
        alone (:attr:`setllm.loading.AdapterInfo.answers_plain_prompts`), as it was trained:
        the messages' text (:func:`plain_messages`)."""
        if self.models[self.engine_key(adapter)].origin.trained_as.answers_plain_prompts:
            return plain_messages(messages)
        return chat_prompt(self.lm.tokenizer, messages, strip_bos=self.lm.codec.bos)

    # -- input ------------------------------------------------------------------------------
    def score_options(self, prompt: SetPrompt, options: Sequence[str] | None) -> list[str]:
        """Options to score as given, or by default the elements of the prompt's set (the
        library's check, :func:`setllm.verbs.score_options`)."""
        options = verbs.score_options(prompt, options)
        self.config.check_options(options)
        return options

    # -- reporting --------------------------------------------------------------------------
    def health(self, full: bool = True) -> dict[str, Any]:
        """What ``/health`` says: everything, or (``full=False``: a request without the key of
        ``--api-key``) only the status and that a key is needed."""
        if not full:
            return {"status": "draining" if self.draining else "ok", "api_key": True}
        o = self.lm.origin
        return {"status": "draining" if self.draining else "ok", "model": self.model_name, "adapter": o.adapter,
                "judge_adapter": self.judge_lm.origin.adapter, "adapters": {n: m.origin.adapter for n, m in self.adapters.items()},
                "variant": self.lm.variant.name, "exact": self.lm.exact, "max_batch_size": self.batcher.max_batch_size,
                "batching": self.batching, "queued": self.batcher.queued, "in_flight": self.in_flight,
                "api_key": self.config.api_key is not None}

    def gauges(self) -> dict[str, tuple[str, Any]]:
        """What ``/metrics`` shows of now: :func:`service_gauges`."""
        return service_gauges(self)


def service_gauges(service: Service) -> dict[str, tuple[str, Any]]:
    """``/metrics``' gauges of ``service``: its queue, batch and life cycle, and its document cache's
    counts (``--cache-mb``; on disk, ``--cache-dir``) where it has one."""
    b = service.batcher
    out = {
        "setllm_queue_depth": ("Requests waiting for the model.", lambda: b.queued),
        "setllm_batch_running": ("Requests in the batch on the model now.", lambda: b.running),
        "setllm_requests_in_flight": ("HTTP requests being answered (this one included).", lambda: service.in_flight),
        "setllm_max_batch_size": ("Most requests per forward pass (1: batching off).", lambda: b.max_batch_size),
        "setllm_draining": ("1 while the server shuts down.", lambda: int(service.draining)),
    }
    if service.documents is not None:
        stat = service.documents.stats
        out.update({metric: (help_, lambda name=name: getattr(stat(), name)) for name, (metric, help_) in gauges(service.documents.disk is not None).items()})
    return out


def plain_messages(messages: Sequence[dict]) -> SetPrompt:
    """The messages' contents, a blank line between them, with no role or template token:
    a one-message chat reads as its text does on ``/v1/completions`` (``{{a||b}}`` markup in
    each message makes a set, as in the template)."""
    segments: list = []
    for i, message in enumerate(messages):
        segments += [*(["\n\n"] if i else []), *parse_markup(message["content"]).segments]
    return template_prompt(segments)
