"""The outermost layer of the app (pure ASGI): a request's body is read whole, at most
``max_body_bytes`` however it is sent (``Content-Length`` or chunked) and within
``body_timeout_s``, before anything else sees it; and a request whose client disconnects
before its answer is out is cancelled: its queued work is dropped and its running
generation stops at its next step (:class:`.batcher.Ticket`), so the model thread is never
held by a request nobody awaits.

starlette answers a request after its client left (its handler runs to the end), and reads a
chunked body of any size: both are closed here, below every route.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from .errors import ApiError, BadRequest, TooLong

MAX_BODY_BYTES = 1 << 20  # a request body past 1 MiB is refused (413) before the route reads it
BODY_TIMEOUT_S = 30.0  # a body not sent whole by then is refused (408): a slow client holds no handler
MAX_HEADER_BYTES = 16 * 1024  # a request's headers, names and values: past it a 431 (h11 bounds only a head that arrives in pieces)


class BodyTimeout(ApiError):
    status = 408


class HeadersTooLarge(ApiError):
    status = 431


class _Gone(Exception):
    """The client disconnected before its body was in: nobody to answer."""


Message = dict[str, Any]


class Guard:
    """``error(err, path)`` makes the response a refusal is (the app's error shape)."""

    def __init__(self, app, error: Callable[[ApiError, str], Any], max_body_bytes: int = MAX_BODY_BYTES):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.error = error

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        size = sum(len(name) + len(value) for name, value in scope.get("headers") or ())
        if size > MAX_HEADER_BYTES:
            await self._refuse(scope, receive, send, HeadersTooLarge(f"request headers are {size} bytes; at most {MAX_HEADER_BYTES}"))
            return
        try:
            body = await asyncio.wait_for(self._body(scope, receive), BODY_TIMEOUT_S)
        except _Gone:
            return
        except asyncio.TimeoutError:
            await self._refuse(scope, receive, send, BodyTimeout(f"the request body was not sent within {BODY_TIMEOUT_S:g} s"))
            return
        except ApiError as err:
            await self._refuse(scope, receive, send, err)
            return
        await _answer_while_connected(self.app, scope, body, receive, send)

    async def _body(self, scope, receive) -> bytes:
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None:
            if not length.isdigit():
                raise BadRequest("Content-Length is not a number")
            if int(length) > self.max_body_bytes:
                raise TooLong(f"request body is {int(length)} bytes; at most {self.max_body_bytes}")
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise TooLong(f"request body is over {self.max_body_bytes} bytes; at most {self.max_body_bytes}")
            chunks.append(chunk)
            more = message.get("more_body", False)
        return b"".join(chunks)

    async def _refuse(self, scope, receive, send, err: ApiError) -> None:
        # Connection: close: the rest of a body not read must not be read as the next request.
        err.headers.setdefault("Connection", "close")
        await self.error(err, scope["path"])(scope, receive, send)


async def _answer_while_connected(app, scope, body: bytes, receive, send) -> None:
    """Run ``app`` on the read ``body``; the client's disconnect before the answer is complete
    cancels it (the app sees ``http.disconnect`` too, as a stream listening for it expects)."""
    gone, complete = asyncio.Event(), False
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def app_receive() -> Message:
        if pending:
            return pending.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def app_send(message: Message) -> None:
        nonlocal complete
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            complete = True
        await send(message)

    task = asyncio.ensure_future(app(scope, app_receive, app_send))
    watcher = asyncio.ensure_future(_disconnect(receive, gone, lambda: complete or task.cancel()))
    try:
        await task
    except asyncio.CancelledError:
        if not gone.is_set():  # this request's own task was cancelled (the server stops): pass it on
            task.cancel()
            raise
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def _disconnect(receive: Callable[[], Awaitable[Message]], gone: asyncio.Event, on_gone: Callable[[], Any]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    gone.set()
    on_gone()
