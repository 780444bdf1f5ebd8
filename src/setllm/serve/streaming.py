"""Streaming a generation: its text as it grows, from the model thread to the event loop, and
on to the client as server-sent events.

A stream is the very generation a request not streamed runs (the same job through the same
queue, batches and decoding loop): after each decoding step the engine hands the row's tokens
to a :class:`TextStream`, which sends only text no later token can change; the last piece is
the rest of the answer's own text. So the pieces, joined, are the answer bit for bit.

Shapes: none (token ids are lists of ints, text is str).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi.responses import StreamingResponse

from .errors import ApiError, as_api_error, openai_error

log = logging.getLogger("setllm.serve")
DONE = b"data: [DONE]\n\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # a proxy must pass each event on as it comes


class TextStream:
    """The text of one generated row as its tokens arrive (:meth:`step`), in pieces that are
    never taken back: what a next token could still change is held back until it cannot.

    Held back: a character cut in half (byte-level tokens decode it to U+FFFD); the end of the
    text where a stop string may be beginning; trailing whitespace where the tokenizer cleans
    up spaces on decoding (``clean_up_tokenization_spaces``: `` ,`` -> ``,``, a space taken
    back once the comma comes). The answer's own text
    (stop ids dropped, a half character dropped, cut at the first stop string:
    :func:`setllm.core.forward.generation.generate_tokens`) starts with everything sent; :meth:`rest`
    is what is left of it.
    """

    def __init__(self, tokenizer, stop: Sequence[str], stop_ids: set[int]):
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self._borders = [_borders(s) for s in self.stop]
        self.stop_ids = stop_ids
        self.sent = ""
        self.cleans_spaces = bool(getattr(tokenizer, "clean_up_tokenization_spaces", False))

    def step(self, tokens: Sequence[int]) -> str:
        """The new text that ``tokens`` (the row so far) settle: "" when nothing new is sure."""
        text = self.tokenizer.decode([t for t in tokens if t not in self.stop_ids], skip_special_tokens=True)
        cuts = [text.index(s) for s in self.stop if s in text]
        text = text[: min(cuts)] if cuts else text[: len(text) - self._stop_begins(text)]
        end = len(text)
        while end and (text[end - 1] == "\ufffd" or (self.cleans_spaces and text[end - 1].isspace())):
            end -= 1
        settled = text[:end]
        if len(settled) <= len(self.sent) or not settled.startswith(self.sent):
            return ""
        piece, self.sent = settled[len(self.sent):], settled
        return piece

    def _stop_begins(self, text: str) -> int:
        """The length of the longest end of ``text`` that a stop string starts with (shorter
        than the stop string: a whole one was cut already); linear in each stop's length."""
        return max((_begins(text, s, b) for s, b in zip(self.stop, self._borders)), default=0)


def _borders(s: str) -> list[int]:
    """Knuth-Morris-Pratt's failure function: ``b[i]``, the longest proper border of ``s[:i + 1]``."""
    b, k = [0] * len(s), 0
    for i in range(1, len(s)):
        while k and s[i] != s[k]:
            k = b[k - 1]
        k += s[i] == s[k]
        b[i] = k
    return b


def _begins(text: str, stop: str, borders: list[int]) -> int:
    """How much of ``stop``'s beginning ``text`` ends with: ``text``'s last ``len(stop) - 1``
    characters run through the matcher of ``stop`` (checking every prefix against the end of
    the text, as a plain loop would, costs the square of the stop's length per token)."""
    k = 0
    for c in text[max(0, len(text) - len(stop) + 1):] if len(stop) > 1 else "":
        while k and (k == len(stop) or c != stop[k]):
            k = borders[k - 1]
        k += c == stop[k]
    return k if k < len(stop) else borders[k - 1]


def rest(answer: str, sent: str) -> str:
    """What the client has not yet of ``answer``, having been sent ``sent`` (its beginning by
    :class:`TextStream`'s construction; were it ever not, the log says so)."""
    if not answer.startswith(sent):
        log.error("setllm serve: a stream sent %r, which the answer %r does not start with", sent, answer)
        return ""
    return answer[len(sent):]


@dataclass(frozen=True)
class Started:
    """A streamed job passed its checks and its generation begins: ``prompt_text`` is the
    prompt as the model reads it (for ``echo``; "" without)."""

    prompt_text: str


@dataclass(frozen=True)
class Finished:
    """The job's outcome: its result (:class:`.engine.Generated`) or its :class:`ApiError`."""

    result: Any = None
    error: ApiError | None = None


class Events:
    """The events of one or more streamed jobs, in order, on the event loop: ``sink(index)`` is
    what the model thread calls (its calls are queued to the loop, so they arrive in order and
    before the job's outcome)."""

    def __init__(self, n: int):
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue()
        self.open = n  # jobs without their outcome yet
        self.tasks: list[asyncio.Task] = []
        self.head: list[tuple[int, Any]] = []  # the first event, taken by first()

    def sink(self, index: int) -> Callable[[Any], None]:
        return lambda event: self.loop.call_soon_threadsafe(self.queue.put_nowait, (index, event))

    def run(self, index: int, job) -> None:
        """Run the coroutine ``job`` (the service's generate); its outcome is the index's last event."""
        task = asyncio.ensure_future(job)
        task.add_done_callback(lambda t: self.queue.put_nowait((index, _finished(t))))
        self.tasks.append(task)

    async def first(self) -> None:
        """Wait for the first event; raises the job's error if a job failed before any
        started (the response is then that error, with its status)."""
        index, event = await self.queue.get()
        if isinstance(event, Finished) and event.error is not None:
            self.cancel()
            raise event.error
        self.head.append((index, event))

    async def all(self) -> AsyncIterator[tuple[int, Any]]:
        """Every event, ``(job index, event)``, the first included, until each job's outcome."""
        while self.open:
            index, event = self.head.pop() if self.head else await self.queue.get()
            if isinstance(event, Finished):
                self.open -= 1
            yield index, event

    def cancel(self) -> None:
        """The client left: every job still waiting or running is dropped (a generation stops
        at its next token, freeing the model at once)."""
        for task in self.tasks:
            task.cancel()


async def streamed(jobs: list[Callable[[Callable[[Any], None]], Any]], chunks: Chunks, headers: dict[str, str] | None = None) -> StreamingResponse:
    """Run ``jobs`` (each given its stream's sink, the coroutine of the service's generate: the
    queue, the batches and the limits of a request not streamed) and answer with their events
    as ``chunks`` writes them. The response starts at the first event: a job refused before any
    began (an unknown model, a prompt too long) is the response's own error status. A client
    that leaves drops every job (a generation stops at its next token)."""
    events = Events(len(jobs))
    for i, job in enumerate(jobs):
        events.run(i, job(events.sink(i)))
    try:
        await events.first()
    except asyncio.CancelledError:  # the client left before any job began: the jobs are their own tasks, drop them too
        events.cancel()
        raise

    async def body() -> AsyncIterator[bytes]:
        try:
            async for data in chunks.render(events.all()):
                yield data
        finally:
            events.cancel()

    return StreamingResponse(body(), media_type="text/event-stream", headers={**HEADERS, **(headers or {})})


class Chunks:
    """A route's stream: what each event of a job becomes (``started``, ``piece``,
    ``finished``, ``failed``) and the end (``tail``). The text sent per job is kept: its last
    piece is the rest of the answer's own text (:func:`rest`), so the pieces join to the
    answer bit for bit."""

    async def render(self, events: AsyncIterator[tuple[int, Any]]) -> AsyncIterator[bytes]:
        sent: dict[int, str] = {}
        outs = []
        async for index, event in events:
            if isinstance(event, Started):
                sent[index] = ""
                for data in self.started(index, event):
                    yield data
            elif isinstance(event, str):
                sent[index] = sent.get(index, "") + event
                yield self.piece(index, event)
            elif event.error is not None:  # the status went out with the first event: the error is an event
                yield self.failed(event.error)
                return
            else:
                outs.append(event.result)
                for data in self.finished(index, event.result, rest(event.result.text, sent.get(index, ""))):
                    yield data
        for data in self.tail(outs):
            yield data

    def started(self, index: int, event: Started) -> list[bytes]:
        return []

    def piece(self, index: int, text: str) -> bytes:
        raise NotImplementedError

    def finished(self, index: int, out, last: str) -> list[bytes]:
        raise NotImplementedError

    def failed(self, err: ApiError) -> bytes:
        return sse(error_event(err))

    def tail(self, outs: list) -> list[bytes]:
        return [DONE]


def _finished(task: asyncio.Task) -> Finished:
    if task.cancelled():
        return Finished(error=as_api_error(asyncio.CancelledError()))
    exc = task.exception()
    return Finished(result=task.result()) if exc is None else Finished(error=as_api_error(exc))


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event (``event:`` line where the protocol names its events)."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n".encode()


def error_event(err: ApiError) -> dict:
    """An error after the stream began (its status was sent already), as OpenAI's clients read
    it from a stream: OpenAI's error object, raised with its message."""
    return {"error": openai_error(err)}
