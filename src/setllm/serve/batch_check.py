"""The batching check: whether a batch of different questions gives every request the bits
it gets alone, on this machine. One object, :class:`BatchingCheck`, runs it and says what
batching the server does meanwhile and after.

By construction a batch never moves a bit (the scoring driver gives every forward a shape
fixed by the request alone: :mod:`setllm.core.forward.scoring`); the check guards that construction
against kernels that would break it. Its verdict is a property of the kernels (CPU model,
torch build, thread count, dtype, device) and of the shapes the model gives them
(architecture, variant), not of the moment the server starts. So the first server on a
machine checks in the background while it already answers (batching only identical requests
meanwhile: those are the same computation by construction), writes the verdict to
``$SETLLM_CACHE/batch-check.json``, and later starts read it in a millisecond. Why keep it at
all: docs/serving.md, "What batching guarantees".
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import os
import platform
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import torch

from .. import __version__
from ..core import doccache
from ..core.text.templates import mc_prompt
from ..errors import InputError
from ..loading.convert import cache_dir
from .engine import Engine, Engines, ScoreJob
from .errors import ApiError

log = logging.getLogger("setllm.serve")
PROBES = 8  # questions of the check
CHECKING = "identical requests only, until the batching check running in the background passes"
FAILED = ("identical requests only: a batch of different questions changed low bits of a score on this machine "
          "(batching check), so only requests that are the same computation (in exact mode: every ordering of one "
          "question) share a forward")
Step = Callable[[], bool]


class BatchingCheck:
    """The check for one server: read the remembered verdict or run the check between
    requests, and set the engines' batching from it.

    Args:
        engines: the server's engines; the check probes one per set of weights built so far.
        call: runs a function on the model thread, between requests (``Batcher.call``).
        lm: the main model (with ``max_batch_size``, what the verdict is keyed by).
        max_batch_size: the largest batch the server runs.
        enabled: False (``--no-batch-check``): batching as the construction promises, unchecked.
    """

    def __init__(self, engines: Engines, call: Callable[..., Awaitable[Any]], lm, max_batch_size: int, enabled: bool = True):
        self.engines, self._call, self.max_batch_size = engines, call, max_batch_size
        self.key = check_key(lm, max_batch_size) if enabled and max_batch_size > 1 else None
        self.batching = "on" if max_batch_size > 1 else "off (--max-batch-size 1)"  # what /health and the banner say
        self._task: asyncio.Task | None = None
        self._running = 0  # steps on the model thread now: a stop waits for them

    def start(self, stopping: Callable[[], bool]) -> None:
        """The verdict from the cache, or the check started in the background (``stopping()``
        True ends it between steps, with no verdict). Call on the server's event loop."""
        if self.key is None:
            return
        verdict = remembered(self.key)
        if verdict is not None:
            self._settle(verdict)
            return
        self.engines.identical_only(True)  # the same computation by construction, until checked
        self.batching = CHECKING
        self._task = asyncio.create_task(self._run(stopping), name="setllm-batch-check")

    async def _run(self, stopping: Callable[[], bool]) -> None:
        exact = True
        try:
            for step in await self._step(probe_steps, self.engines, self.max_batch_size):
                if stopping():  # a stop waits for one step of the check, never for all of it
                    return
                if not await self._step(step):
                    exact = False
                    break
        except Exception as e:  # a failed check leaves batching to identical requests: safe, and said
            log.error("setllm serve: batching check failed (%s); batching stays on identical requests only", e, exc_info=e)
            return
        remember(self.key, exact)
        self._settle(exact)

    async def _step(self, fn, *args):
        """One step on the model thread, counted as work (the process must not exit while the
        model thread is inside a forward)."""
        self._running += 1
        try:
            return await self._call(_apart, fn, *args)
        finally:
            self._running -= 1

    def _settle(self, exact: bool) -> None:
        self.engines.identical_only(not exact)
        self.batching = "on" if exact else FAILED
        if not exact:
            log.warning("setllm serve: batching %s", self.batching)

    @property
    def busy(self) -> bool:
        """Whether a step of the check is on the model thread now."""
        return self._running > 0

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()


def _apart(fn: Callable, *args):
    """``fn(*args)`` with the document cache apart (:func:`setllm.core.doccache.apart`): under
    ``sbp`` the probes' options would be read as documents, and kept, in memory and in a
    ``--cache-dir`` the replicas share; they are no user's."""
    with doccache.apart():
        return fn(*args)


def probe_steps(engines: Engines, max_batch_size: int) -> list[Step]:
    """The check's steps for every set of weights built so far: the views of one adapter
    bank share the model and its kernels (the first, the main one, has its LoRA layers on),
    and a deferred copy has the main model's shapes, which decide the kernels: their verdict
    is the main model's."""
    return [step for engine in engines.distinct_models() for step in engine_steps(engine, max_batch_size)]


def engine_steps(engine: Engine, max_batch_size: int) -> list[Step]:
    """Whether probe questions score bit-identically alone and in groups of 2, 3 and
    ``max_batch_size`` on ``engine``, as steps of one forward each: the server runs them
    between requests, so a first request never waits for the whole check. Each step returns
    False if a batch moved a bit; all run on the model thread, in order."""
    if max_batch_size < 2:
        return []
    probe: dict[str, Any] = {"alone": []}

    def prepare() -> bool:
        probe["preps"] = _probe(engine)
        return True

    def alone(i: int) -> bool:  # the probes one at a time: the reference bits
        if i < len(probe["preps"]):
            probe["alone"].append(engine.score_group([probe["preps"][i]], record=False)[0].logprobs)
        return True

    def batched(size: int) -> bool:
        preps, ref = probe["preps"], probe["alone"]
        if not preps:  # the probe does not fit this model: nothing to compare
            return True
        picked = [preps[i % len(preps)] for i in range(size)]  # equal rows too: computed apart, they must agree
        return all(g.logprobs == ref[i % len(preps)] for i, g in enumerate(engine.score_group(picked, record=False)))

    sizes = sorted({2, 3, max_batch_size} & set(range(2, max_batch_size + 1)))
    return [prepare, *(functools.partial(alone, i) for i in range(PROBES)), *(functools.partial(batched, size) for size in sizes)]


def _probe(engine: Engine) -> list:
    """Questions of several lengths, on both sides of a length bucket's edge, with the
    options in every rotation; none where the model's context is too short for them."""
    options = ["apple", "dog", "fox", "water"]
    jobs = [ScoreJob(mc_prompt("Which of these is a fruit?" + " Answer with one word." * i, options[i % 4:] + options[:i % 4]), tuple(options))
            for i in range(PROBES)]
    by_key: dict[Any, list] = {}
    try:
        for i, job in enumerate(jobs):
            prep = engine.prepare(i, job, limit=False)
            by_key.setdefault(prep.key, []).append(prep)
    except (InputError, ApiError) as e:  # a model with a tiny context, say
        log.warning("setllm serve: batching check skipped: the probe does not fit this model (%s)", e)
        return []
    return [p for group in by_key.values() for p in group]


CACHE_FILE = "batch-check.json"


def check_key(lm, max_batch_size: int) -> str:
    """A short hash of everything the check's verdict depends on."""
    config, param = lm.model.config, next(lm.model.parameters())
    shape = {k: getattr(config, k, None) for k in ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
                                                    "num_attention_heads", "num_key_value_heads", "vocab_size")}
    parts = (__version__, torch.__version__, platform.machine(), _cpu_model(), torch.get_num_threads(), str(param.device),
             str(param.dtype), sorted(shape.items()), str(lm.origin.model), str(lm.origin.adapter), lm.variant.name, max_batch_size)
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def remembered(key: str) -> bool | None:
    """The verdict stored for ``key`` (None: never checked here, or the file is unreadable)."""
    verdict = _read().get(key)
    return verdict if isinstance(verdict, bool) else None


def remember(key: str, exact: bool) -> None:
    """Store a verdict; a cache that cannot be written only means checking again next time."""
    path = cache_dir() / CACHE_FILE
    verdicts = {**_read(), key: exact}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # renamed into place: readers never see half a file
        tmp.write_text(json.dumps(verdicts, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass


def _read() -> dict:
    try:
        data = json.loads((cache_dir() / CACHE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _cpu_model() -> str:
    """The CPU's model name (kernels differ between CPUs of one architecture)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
