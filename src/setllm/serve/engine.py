"""The model side of the server: requests become token layouts, scoring requests run
together through :func:`setllm.core.forward.scoring.score_requests`, generation runs one prompt at a time.

Everything here runs on the one model thread (:mod:`.worker`): the batcher makes one forward
at a time of what is queued (a second forward at once would only split the same cores, and
batching is what fills them), and a fast tokenizer is not safe for concurrent use. The model
itself could serve several threads: no call changes it (:mod:`setllm.core.model.install`).

A batch never changes a request's scores, not even in the last bit: the scoring driver
gives every forward a shape fixed by the request alone (see :mod:`setllm.core.forward.scoring`), so a
request computes the same kernels alone as among others, on any CPU. Requests with the
same encoded prompt (in exact mode: every ordering of one question) share one prefill,
and equal options one row. :class:`.batch_check.BatchingCheck` checks the construction (once
per machine, in the background).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..core.forward import scoring
from ..core.forward.generation import GenerationConfig, eos_ids
from ..core.text.prompt import SetPrompt
from ..core.tokens.encoding import EncodedPrompt
from ..readouts import JudgeRow, candidate_scores
from . import warned
from .errors import ApiError, BadRequest, Internal, TooLong, as_api_error, one_line
from .streaming import Started, TextStream

log = logging.getLogger("setllm.serve")


@dataclass(frozen=True)
class ScoreJob:
    """Log-likelihood of each option as the response to ``prompt``, under the service's
    ``model`` (``"main"``, or ``"judge"``: the judge adapter, see :class:`Engines`)."""

    prompt: SetPrompt
    options: tuple[str, ...]
    model: str = "main"


@dataclass(frozen=True)
class JudgeJob:
    """One score per candidate of ``row`` under ``readout``, by the judge's own ask -> score
    -> combine (:func:`setllm.readouts.candidate_scores`, the library's): all its asks are
    scored in one forward, alone (the same bits as :meth:`setllm.SetLLM.judge`)."""

    row: JudgeRow
    readout: str
    model: str = "main"


@dataclass(frozen=True)
class GenerateJob:
    """Generate after ``prompt`` (a set prompt, or token ids read as plain text); with
    ``config`` None nothing is generated (OpenAI's ``max_tokens: 0``). ``logprobs``: also the
    log-prob of every token and the ``logprobs`` likeliest at its place; ``echo``: the
    prompt's own tokens first (read as :meth:`setllm.SetLLM.echo_details` says). ``model``: as
    :class:`ScoreJob`'s, for :class:`Engines`. ``stream``: called on the model thread with a
    :class:`.streaming.Started` once the job passed its checks, then with each new piece of
    its text (:class:`.streaming.TextStream`): the same generation, streamed as it runs."""

    prompt: SetPrompt | tuple[int, ...]
    config: GenerationConfig | None
    logprobs: int | None = None
    echo: bool = False
    model: str = "main"
    field: str = "max_new_tokens"  # what the request calls max_new_tokens, for the fit rule's message
    stream: Callable[[Any], None] | None = None


@dataclass(frozen=True)
class CallJob:
    """``run(lm, prompt)`` on the model of ``model``, alone: a reading the library composes
    itself (a structured answer, a tool call) queued, bounded by the deadline and cancelled as
    the other jobs are (each forward it makes checks its stop reason: :func:`install_checks`);
    ``prompt`` is given to it encoded, as sized (None: it has none)."""

    run: Callable[[Any, EncodedPrompt | None], Any]
    model: str = "main"
    prompt: SetPrompt | None = None  # the prompt it reads, sized against --max-prompt-tokens before it runs


@dataclass(frozen=True)
class Scores:
    scores: list[scoring.TokenScore]  # one per option, the request's order
    prompt_tokens: int

    @property
    def logprobs(self) -> list[float]:
        return [s.logprob for s in self.scores]

    def option_scores(self, texts: Sequence[str]) -> list[scoring.OptionScore]:
        return scoring.to_option_scores(texts, self.scores)


@dataclass(frozen=True)
class TokenLogprob:
    """A token as OpenAI's ``logprobs`` show it: its text, log-prob (None: not defined, see
    :meth:`setllm.SetLLM.echo_details`) and the likeliest tokens at its place, text -> log-prob."""

    text: str
    logprob: float | None
    top: dict[str, float] | None


@dataclass(frozen=True)
class Generated:
    text: str
    n_tokens: int
    prompt_tokens: int
    finish_reason: str  # "stop" (EOS or a stop string) or "length" (max_new_tokens reached)
    prompt_text: str = ""  # the prompt as the model read it (token ids decoded), for echo
    tokens: list[TokenLogprob] = field(default_factory=list)  # echoed, then generated (with logprobs)


class Item(Protocol):
    """A job as the worker sees it: ``stop_reason()`` says whether to drop it (timed out,
    server stopping) before or while it runs; ``notes``: the request's (:mod:`.warned`: what
    setllm warns about while preparing or running it goes back with the request)."""

    job: ScoreJob | GenerateJob | JudgeJob | CallJob
    notes: warned.Notes | None

    def stop_reason(self) -> ApiError | None: ...


@dataclass
class _Prepared:
    index: int
    enc: EncodedPrompt
    ids: list[list[int]] = field(default_factory=list)  # option token ids (scoring)
    key: Any = None  # requests with equal keys may share a forward


class _Stopped(Exception):
    def __init__(self, reason: ApiError):
        self.reason = reason


# Why the forward running on this thread should stop now (None: it runs on). Read by a hook on
# each decoder layer (:func:`install_checks`): a request timed out, abandoned by its client or
# stopped by a shutdown frees the model within one layer's forward, in a prefill as in decoding.
_STOP: ContextVar[Callable[[], ApiError | None] | None] = ContextVar("setllm_stop", default=None)
_CHECKED = "_setllm_stop_checks"  # set on a model's layer list once its hooks are in


def install_checks(model) -> None:
    """A pre-hook on each decoder layer of ``model`` (its longest ``ModuleList``), once: it
    raises :class:`_Stopped` when :data:`_STOP` says so, and does nothing outside a server's
    request (no stop set) or while a CUDA graph is captured (a capture must not be cut)."""
    layers = max((m for m in model.modules() if isinstance(m, torch.nn.ModuleList)), key=len, default=None)
    if layers is None or getattr(layers, _CHECKED, False):
        return
    for layer in layers:
        layer.register_forward_pre_hook(_check_stop)
    setattr(layers, _CHECKED, True)


def _check_stop(module, args) -> None:
    stop = _STOP.get()
    reason = stop() if stop is not None else None
    if reason is not None and not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
        raise _Stopped(reason)


def _all_stopped(items: Sequence[Item]) -> Callable[[], ApiError | None]:
    """A shared forward stops only once each of its requests would (the others still want it)."""
    def reason() -> ApiError | None:
        reasons = [item.stop_reason() for item in items]
        return reasons[0] if all(r is not None for r in reasons) else None
    return reason


class Engine:
    """Runs jobs on a :class:`setllm.SetLLM` (on the calling thread, which must be the only
    one touching it).

    Args:
        lm: the model.
        max_prompt_tokens: longest prompt accepted (None: the model's context).
        on_forward: called with the number of requests of each scoring forward (metrics).
    """

    def __init__(self, lm, max_prompt_tokens: int | None = None, on_forward: Callable[[int], None] | None = None):
        self.lm = lm
        self.max_prompt_tokens = max_prompt_tokens
        self.on_forward = on_forward or (lambda n: None)
        self._lone = itertools.count()  # unique keys for requests that never share a forward
        # Set when the start-up check finds that mixing questions in a forward moves low bits:
        # then only requests that are the very same computation share one.
        self.identical_only = False

    # -- the worker's entry point -----------------------------------------------------------
    def run(self, items: Sequence[Item]) -> list[Any]:
        """One outcome per item, in order: a result, or the :class:`ApiError` it ends with.
        Never raises: a bug in one request becomes that request's 500."""
        outcomes: list[Any] = [None] * len(items)
        ready: list[_Prepared] = []
        for i, item in enumerate(items):
            outcomes[i] = item.stop_reason()
            if outcomes[i] is not None:
                continue
            try:
                with warned.collecting(getattr(item, "notes", None)):
                    ready.append(self.prepare(i, item.job))
            except Exception as e:  # noqa: BLE001 - any failure is this request's alone
                outcomes[i] = self._failure(e, item)
        for group in _groups(ready):
            for prep, outcome in self._run_group(group, items):
                outcomes[prep.index] = outcome
        return outcomes

    def _run_group(self, group: list[_Prepared], items: Sequence[Item]):
        live = []
        for prep in group:
            reason = items[prep.index].stop_reason()
            if reason is None:
                live.append(prep)
            else:
                yield prep, reason
        if not live:
            return
        job = items[live[0].index].job
        alone = getattr(items[live[0].index], "notes", None) if len(live) == 1 else None  # a shared forward's words are nobody's
        install_checks(self.lm.model)
        token = _STOP.set(_all_stopped([items[p.index] for p in live]))
        try:
            with warned.collecting(alone):
                if isinstance(job, GenerateJob):
                    results = self._generate(live[0], job, items[live[0].index])
                elif isinstance(job, JudgeJob):
                    results = [candidate_scores(self._score_asks, [job.row], job.readout)[0]]
                elif isinstance(job, CallJob):
                    self.on_forward(1)
                    results = [job.run(self.lm, live[0].enc if job.prompt is not None else None)]
                else:
                    results = self.score_group(live)
            yield from zip(live, results)
        except _Stopped as stopped:  # every request of the forward gave up (or the server stops): none is answered
            for prep in live:
                yield prep, items[prep.index].stop_reason() or stopped.reason
        except Exception as e:  # noqa: BLE001 - a failed forward is answered, never raised
            if len(live) == 1:
                yield live[0], self._failure(e, items[live[0].index])
                return
            # Find the request at fault: each alone (alone gives the same bits as batched).
            for prep in live:
                yield from self._run_group([prep], items)
        finally:
            _STOP.reset(token)

    def _failure(self, exc: Exception, item: Item) -> ApiError:
        err = as_api_error(exc)
        if err.status >= 500:  # the job's kind and size, never its prompt: a log is no place for what clients sent
            log.error("request failed: %s", _described(item.job), exc_info=exc)
        return err

    # -- preparing: everything that can be the request's own fault --------------------------
    def prepare(self, index: int, job: ScoreJob | GenerateJob | JudgeJob | CallJob, limit: bool = True) -> _Prepared:
        limit = self.max_prompt_tokens if limit else None
        if isinstance(job, CallJob) and job.prompt is not None:  # its prompt's size is the request's own fault: a 413 as a plain request's
            return _Prepared(index, self._within(self._encode(job.prompt), limit), key=self._lone_key())  # handed on to run
        if isinstance(job, (JudgeJob, CallJob)):  # prepared as it runs (a judge's asks: _score_asks; a call: the library's)
            return _Prepared(index, EncodedPrompt.plain([]), key=self._lone_key())
        if isinstance(job, GenerateJob):
            request = self.lm.generate_request(self._within(self._encode(job.prompt), limit), job.config, job.field)
            return _Prepared(index, request.prompt, key=self._lone_key())
        request = self.lm.score_request(job.prompt, job.options)  # the library's own request: same checks, same ids
        enc, ids = self._within(request.prompt, limit), request.options
        if self.identical_only:  # the same prompt and option set: one computation, whatever the order
            return _Prepared(index, enc, ids, ("same", scoring.prompt_key(enc), tuple(sorted({tuple(x) for x in ids}))))
        return _Prepared(index, enc, ids, ("score",))

    def _encode(self, prompt: SetPrompt | tuple[int, ...]) -> EncodedPrompt:
        if isinstance(prompt, tuple):  # token ids, read as the plain text they are
            bad = [t for t in prompt if not 0 <= t < len(self.lm.tokenizer)]
            if bad or not prompt:
                raise BadRequest(f"prompt: token id {bad[0]} is not in the vocabulary" if bad else "prompt: no tokens")
            return EncodedPrompt.plain(prompt)
        return self.lm.encode(prompt)  # canonical in exact mode, checked against the context

    @staticmethod
    def _within(enc: EncodedPrompt, limit: int | None) -> EncodedPrompt:
        if limit is not None and len(enc) > limit:
            raise TooLong(f"prompt is {len(enc)} tokens; this server takes at most {limit} (--max-prompt-tokens)")
        return enc

    def _lone_key(self) -> tuple:
        return ("alone", next(self._lone))

    # -- running ------------------------------------------------------------------------------
    def score_group(self, group: Sequence[_Prepared], record: bool = True) -> list[Scores]:
        """Score a group through the one scoring driver (same bits alone or together)."""
        results = self.lm.score_encoded([scoring.ScoreRequest(p.enc, p.ids) for p in group])
        if record:
            self.on_forward(len(group))
        return [Scores(r, len(p.enc)) for p, r in zip(group, results)]

    def _score_asks(self, prompts: Sequence[SetPrompt], options: Sequence[Sequence[str]]) -> list[list[scoring.OptionScore]]:
        """A judge's asks, checked as score requests are and scored in one forward."""
        preps = [self.prepare(i, ScoreJob(p, tuple(o))) for i, (p, o) in enumerate(zip(prompts, options))]
        return [s.option_scores(o) for s, o in zip(self.score_group(preps), options)]

    @torch.no_grad()
    def _generate(self, prep: _Prepared, job: GenerateJob, item: Item) -> list[Generated | ApiError]:
        lm, steps = self.lm, 0
        prompt_text = lm.tokenizer.decode(prep.enc.input_ids) if job.echo else ""
        pieces = TextStream(lm.tokenizer, job.config.stop, eos_ids(lm.model, lm.tokenizer)) if job.stream and job.config else None

        def on_token(tokens):  # a timed-out or abandoned generation frees the model at once
            nonlocal steps
            steps += 1
            reason = item.stop_reason()
            if reason is not None:
                raise _Stopped(reason)
            if pieces is not None and (piece := pieces.step(tokens[0])):
                job.stream(piece)

        if job.stream is not None:
            job.stream(Started(prompt_text))
        text, finish = "", "length"
        self.on_forward(1)
        if job.config is not None:
            try:
                text, ids = lm.generate_encoded([prep.enc], job.config, on_token=on_token)[0]
            except _Stopped as s:
                return [s.reason]
            finish = "length" if steps >= job.config.max_new_tokens else "stop"
        tokens = self._echo(prep.enc, job.logprobs or 0) if job.echo else []
        if job.logprobs is not None and job.config is not None:
            tokens += self._details(prep.enc, ids, job.logprobs)
        return [Generated(text, steps, len(prep.enc), finish, prompt_text, tokens)]

    def _echo(self, enc: EncodedPrompt, top: int) -> list[TokenLogprob]:
        """The prompt's own tokens with their log-probs, as OpenAI's ``echo`` shows them
        (which have one, and what it means: :meth:`setllm.SetLLM.echo_details`)."""
        return self._formatted(self.lm.echo_details(enc, top), top)

    def _details(self, prompt: EncodedPrompt, response: Sequence[int], top: int) -> list[TokenLogprob]:
        return self._formatted(self.lm.token_details(prompt, response, top), top)

    def _formatted(self, details, top: int) -> list[TokenLogprob]:
        return [TokenLogprob(self._piece(d.token), d.logprob,
                             {self._piece(t): lp for t, lp in d.top} if top and d.logprob is not None else None) for d in details]

    def _piece(self, token: int) -> str:
        return self.lm.tokenizer.decode([token])


def _described(job) -> str:
    prompt = getattr(job, "prompt", None)
    size = f"{len(prompt)} tokens" if isinstance(prompt, tuple) else f"{len(prompt.segments)} segments" if prompt is not None else "no prompt"
    return f"{type(job).__name__} for model {job.model!r}, prompt of {size}"


class Engines:
    """One :class:`Engine` per model behind one queue: ``"main"`` answers every route,
    ``"judge"`` (if there is one) the judge route, as ``setllm judge`` reads with its own
    shipped adapter, and any other name the requests that name it (the adapters of a
    :class:`setllm.AdapterBank`). A batch is split by model and each part run on its engine:
    a request gets the bits it would get alone on that model (no forward mixes models).

    A ``deferred`` engine is built on the model thread by its first request: a second copy
    of the model that one route reads costs neither start-up time nor memory until asked for.
    """

    def __init__(self, engines: dict[str, Engine], deferred: dict[str, Callable[[], Engine]] | None = None):
        self.engines = engines
        self.deferred = dict(deferred or {})
        self._identical_only = False

    def __contains__(self, name: str) -> bool:
        return name in self.engines or name in self.deferred

    def defer(self, name: str, build: Callable[[], Engine]) -> None:
        """An engine built by ``build()`` on the model thread, at the first request for ``name``."""
        self.deferred.setdefault(name, build)

    def built(self, name: str) -> Engine | None:
        """The engine of ``name`` if it is built yet (a deferred one: once a request built it)."""
        return self.engines.get(name)

    def distinct_models(self) -> list[Engine]:
        """One built engine per set of weights (the views of one bank share theirs)."""
        first: dict[int, Engine] = {}
        for engine in self.engines.values():
            first.setdefault(id(engine.lm.model), engine)
        return list(first.values())

    def run(self, items: Sequence[Item]) -> list[Any]:
        by_model: dict[str, list[int]] = {}
        for i, item in enumerate(items):
            by_model.setdefault(item.job.model, []).append(i)
        outcomes: list[Any] = [None] * len(items)
        for name, idx in by_model.items():
            try:
                engine = self.get(name)
            except Exception as e:  # noqa: BLE001 - the requests for it fail, the server goes on
                log.error("setllm serve: the %s model failed to load", name, exc_info=e)
                for i in idx:
                    outcomes[i] = Internal(f"the {name} model failed to load ({one_line(str(e)) or type(e).__name__})")
                continue
            for i, outcome in zip(idx, engine.run([items[i] for i in idx])):
                outcomes[i] = outcome
        return outcomes

    def get(self, name: str) -> Engine:
        """The engine of ``name``, a deferred one built now (on the model thread)."""
        if name not in self.engines:
            engine = self.deferred[name]()
            engine.identical_only = self._identical_only
            self.engines[name] = engine
            del self.deferred[name]
        return self.engines[name]

    def identical_only(self, only: bool = True) -> None:
        self._identical_only = only
        for e in self.engines.values():
            e.identical_only = only


def _groups(ready: list[_Prepared]) -> list[list[_Prepared]]:
    """Requests with equal keys, in order of their first arrival."""
    groups: dict[Any, list[_Prepared]] = {}
    for prep in ready:
        groups.setdefault(prep.key, []).append(prep)
    return list(groups.values())
