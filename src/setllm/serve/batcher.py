"""Bounded queue -> batches -> the model thread.

Requests wait in one queue (at most ``max_queue``; one more is a 503). The first request of
a batch waits up to ``window_s`` for company, or less once ``max_batch_size`` have arrived;
meanwhile the model thread works on the previous batch, so under load batches fill by
themselves. Which requests of a batch may share a forward is the engine's business
(:mod:`.engine`); this module only decides who is in a batch and for how long anyone waits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import warned
from .errors import ApiError, Internal, QueueFull, ShuttingDown, Timeout
from .worker import ModelThread

log = logging.getLogger("setllm.serve")


@dataclass(eq=False)
class Ticket:
    """One request on its way through: its job, its future, its deadline, and the notes of
    the request it is for (what setllm warns about it: :mod:`.warned`)."""

    job: Any
    future: asyncio.Future
    deadline: float
    timeout_s: float
    batcher: Batcher
    abandoned: bool = field(default=False)
    notes: warned.Notes | None = field(default_factory=warned.current)

    def stop_reason(self) -> ApiError | None:
        """Why the worker should drop this request now, if it should (read on the model
        thread: plain attribute reads)."""
        if self.abandoned or time.monotonic() > self.deadline:
            return Timeout(f"request took longer than {self.timeout_s:g} s (--timeout-s)")
        if self.batcher.stopped:
            return ShuttingDown("server stopped before this request finished")
        return None


class Batcher:
    """Collects requests into batches and runs ``run(tickets) -> outcomes`` on the model
    thread, one batch at a time."""

    def __init__(self, run: Callable[[Sequence[Ticket]], list], max_batch_size: int, max_queue: int, window_s: float, timeout_s: float):
        self.run_batch = run
        self.max_batch_size = max_batch_size
        self.max_queue = max_queue
        self.window_s = window_s
        self.timeout_s = timeout_s
        self.running = 0  # requests in the batch on the model thread now
        self.stopped = False
        self._pending: deque[Ticket] = deque()
        self._thread: ModelThread | None = None
        self._task: asyncio.Task | None = None

    @property
    def queued(self) -> int:
        return len(self._pending)

    def idle(self) -> bool:
        return not self._pending and not self.running

    async def start(self) -> None:
        self._thread = ModelThread()
        self._arrived = asyncio.Event()
        self._full = asyncio.Event()
        self._task = asyncio.create_task(self._serve(), name="setllm-batcher")

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn`` on the model thread (start-up work, outside any batch)."""
        assert self._thread is not None, "start() first"
        return await self._thread.call(fn, *args)

    async def submit(self, job: Any) -> Any:
        """The job's result; raises its :class:`ApiError` (503 when the queue is full or
        the server stops, 504 past the deadline)."""
        if self.stopped:
            raise ShuttingDown("server is shutting down")
        if len(self._pending) >= self.max_queue:
            raise QueueFull(f"queue is full ({len(self._pending)} requests waiting, --max-queue {self.max_queue}); retry shortly")
        loop = asyncio.get_running_loop()
        ticket = Ticket(job, loop.create_future(), time.monotonic() + self.timeout_s, self.timeout_s, self)
        self._pending.append(ticket)
        self._arrived.set()
        if len(self._pending) >= self.max_batch_size:
            self._full.set()
        try:
            await asyncio.wait({ticket.future}, timeout=max(0.0, ticket.deadline - time.monotonic()))
        finally:
            if not ticket.future.done():  # timed out, or the client went away
                ticket.abandoned = True  # the worker skips it, or stops generating for it
                ticket.future.cancel()
                if ticket in self._pending:  # not yet taken: no longer counts as waiting
                    self._pending.remove(ticket)
        if ticket.future.cancelled():
            raise Timeout(f"request took longer than {self.timeout_s:g} s (--timeout-s)")
        return ticket.future.result()

    def abort(self) -> None:
        """Refuse new work and answer everything accepted with 503: what waits now, the
        running batch at its next step (generation checks after every token)."""
        self.stopped = True
        while self._pending:
            _deliver(self._pending.popleft(), ShuttingDown("server stopped before this request ran"))

    async def stop(self, grace_s: float = 1.0) -> None:
        """:meth:`abort`, then give the running batch ``grace_s`` to end."""
        self.abort()
        if self._task is not None:
            self._arrived.set()
            try:
                await asyncio.wait_for(self._task, grace_s)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass
        if self._thread is not None:
            self._thread.close()

    async def _serve(self) -> None:
        while not self.stopped:
            if not self._pending:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            if self.window_s > 0 and len(self._pending) < self.max_batch_size:
                self._full.clear()
                try:
                    await asyncio.wait_for(self._full.wait(), self.window_s)
                except asyncio.TimeoutError:
                    pass
            batch = self._take()
            if batch:
                await self._run(batch)

    def _take(self) -> list[Ticket]:
        batch: list[Ticket] = []
        while self._pending and len(batch) < self.max_batch_size:
            ticket = self._pending.popleft()
            if not ticket.future.done():
                batch.append(ticket)
        return batch

    async def _run(self, batch: list[Ticket]) -> None:
        self.running = len(batch)
        try:
            outcomes = await self.call(self.run_batch, batch)
        except asyncio.CancelledError:  # stop() gave up waiting for this batch
            for ticket in batch:
                _deliver(ticket, ShuttingDown("server stopped while this request ran"))
            raise
        except Exception as e:  # a bug in the runner: fail this batch, keep serving
            log.error("batch failed", exc_info=e)
            outcomes = [Internal(f"internal error ({type(e).__name__}); the server goes on") for _ in batch]
        finally:
            self.running = 0
        for ticket, outcome in zip(batch, outcomes):
            _deliver(ticket, outcome)


def _deliver(ticket: Ticket, outcome: Any) -> None:
    if ticket.future.done():
        return
    if isinstance(outcome, BaseException):
        ticket.future.set_exception(outcome)
    else:
        ticket.future.set_result(outcome)
