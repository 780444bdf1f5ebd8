"""``EngineReplica``: one replica's body, the very app ``setllm serve`` runs (routes, limits,
batching, errors), called in-process with each request the ingress forwards. Its answer
carries the replica's name and counts, which the ingress shows at ``/metrics``; a streamed
answer (:meth:`EngineReplica.stream`) goes back piece by piece, as the app sends it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

Request = dict[str, Any]  # method, path, query, headers [(name, value)], body (bytes), documents (keys)


class EngineReplica:
    """Builds the server's app with ``make_app()`` (on the replica, so the model loads
    there), starts it (its lifespan: the model thread, the batching check) and answers the
    requests the ingress sends it."""

    async def __init__(self, make_app: Callable[[], Any], drain_s: float = 60.0):
        self.app = make_app()
        self.service = self.app.state.service
        self.drain_s = drain_s
        self.name = _replica_name()
        self.where = {"node": _node_id(), "pid": str(os.getpid())}  # which process on which Ray node (/metrics: setllm_replica_info)
        self._life = self.app.router.lifespan_context(self.app)
        await self._life.__aenter__()

    async def __call__(self, request: Request) -> dict[str, Any]:
        scope = _scope(request)
        status, headers, body = await call_asgi(self.app, request, scope)
        return {"status": status, "headers": headers, "body": body, "replica": self.name, "stats": self.stats(), "endpoint": _endpoint(scope),
                "where": self.where}

    async def stream(self, request: Request) -> AsyncIterator[Any]:
        """A streamed request (``stream: true``): ``{"status", "headers", "replica"}`` first, then
        each piece of the body (bytes) as the app sends it, then ``{"stats": ...}``. When the
        ingress stops reading (its client left), the app sees its client disconnect: the
        generation stops at its next token, as on the single server."""
        messages: asyncio.Queue = asyncio.Queue()
        gone = asyncio.Event()
        scope = _scope(request)
        app = asyncio.ensure_future(self.app(scope, _receiver(request, gone), messages.put))
        app.add_done_callback(lambda _: messages.put_nowait(None))
        try:
            while (message := await messages.get()) is not None:
                if message["type"] == "http.response.start":
                    yield {"status": message["status"], "headers": _headers(message), "replica": self.name, "endpoint": _endpoint(scope),
                           "where": self.where}
                elif message["type"] == "http.response.body" and message.get("body"):
                    yield message["body"]
            yield {"stats": self.stats()}
        finally:
            gone.set()
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(app), 5)

    def stats(self) -> dict[str, float]:
        """What ``/metrics`` of the endpoint shows for this replica."""
        s = self.service
        out = {"in_flight": s.in_flight, "queued": s.batcher.queued}
        if s.documents is not None:  # with --cache-dir, the tier every replica shares too
            out |= s.documents.stats().gauged(s.documents.disk is not None)
        return out

    async def __del__(self):
        """Ray Serve stops the replica: new requests get 503, accepted ones finish (up to
        ``drain_s``), then the model thread stops."""
        self.service.start_draining()
        deadline = time.monotonic() + self.drain_s
        while not self.service.idle() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await self._life.__aexit__(None, None, None)


def _replica_name() -> str:
    from ray import serve

    try:
        return serve.get_replica_context().replica_id.unique_id
    except Exception:  # noqa: BLE001 - outside a replica (tests): no name
        return "local"


def _node_id() -> str:
    import ray

    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - outside Ray (tests): no node
        return "local"


def _endpoint(scope: dict[str, Any]) -> str:
    """The path of the app's route that answered (the app's own list of routes decides), "other" for none."""
    route = scope.get("route")
    return getattr(route, "path", "other") if route is not None else "other"


async def call_asgi(app, request: Request, scope: dict[str, Any] | None = None) -> tuple[int, list[tuple[str, str]], bytes]:
    """``request`` (its ``scope``, made from it if None) through the ASGI ``app``: (status, headers, body)."""
    status, headers, chunks = 500, [], []

    async def send(message):
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], _headers(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope or _scope(request), _receiver(request, asyncio.Event()), send)  # the client never leaves: the ingress waits for the answer
    return status, headers, b"".join(chunks)


def _scope(request: Request) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": request["method"], "scheme": "http",
            "path": request["path"], "raw_path": request["path"].encode(), "root_path": "", "query_string": request["query"].encode(),
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in request["headers"]],
            "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 80)}


def _receiver(request: Request, gone: asyncio.Event) -> Callable[[], Any]:
    """ASGI's ``receive``: the body, then a disconnect once ``gone`` is set."""
    sent = False

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": request["body"], "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    return receive


def _headers(message: dict) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])]
