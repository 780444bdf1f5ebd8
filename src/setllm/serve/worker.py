"""The one thread that touches the model.

A daemon thread, not an executor: if a forward is still running when the server has to
go (the drain deadline passed), the process must still exit on time.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any


class ModelThread:
    """Runs functions one at a time on its own thread; ``call`` awaits the result."""

    def __init__(self, name: str = "setllm-model"):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._jobs.put((loop, future, fn, args))
        return await future

    def close(self) -> None:
        self._jobs.put(None)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, future, fn, args = job
            try:
                outcome, failed = fn(*args), False
            except BaseException as e:  # noqa: BLE001 - handed to the awaiting coroutine
                outcome, failed = e, True
            try:
                loop.call_soon_threadsafe(_settle, future, outcome, failed)
            except RuntimeError:  # the event loop is gone: nobody is waiting any more
                pass


def _settle(future: asyncio.Future, outcome: Any, failed: bool) -> None:
    if future.done():
        return
    if failed:
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
