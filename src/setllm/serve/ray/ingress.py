"""``Ingress``: the endpoint's one thin deployment. It reads a request's documents
(:mod:`.documents`), hands the request to an engine replica through a handle whose router
sees them (:mod:`.router`), and returns the replica's answer as it is; a streamed one
(``"stream": true``) piece by piece, as the replica sends it. ``/metrics`` it answers itself:
every replica's counts and the router's decisions in one place.

Every setllm route is a pure function of its request (greedy, or sampling from a seed), so a
request whose replica died before any byte of its answer reached the client is sent again,
to another replica (:data:`RETRIES` times at most). A forced stop (:meth:`Ingress.stop`)
answers every open request as the single server does: a JSON 503, or an error event in a
stream that began."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ...core.doccache.stats import gauges
from ..auth import refusal
from ..config import ServeConfig
from ..errors import ApiError, QueueFull, ShuttingDown
from ..errors import body as error_body
from ..hosts import refused_host
from ..metrics import CONTENT_TYPE, Metrics, _esc, _header, _num
from ..routes import OPENAI_PATHS
from ..streaming import error_event, sse
from .documents import request_documents

log = logging.getLogger("setllm.serve")
REPLICA_HEADER = "x-setllm-replica"  # which replica answered (the name /metrics labels it by)
# replica stat -> (metric, help): the document cache's gauges (derived from its stats type), then the replica's load
REPLICA_GAUGES = {**gauges(disk=True),
                  "in_flight": ("setllm_requests_in_flight", "HTTP requests the replica was answering."),
                  "queued": ("setllm_queue_depth", "Requests waiting for the replica's model.")}
RETRIES = 2  # a request whose replica died goes to another replica at most this many times more
DROPPED = "the replica answering this request stopped; retry it"
STOPPED = "server stopped before this request finished"  # the single server's words on a forced stop


class Stopped(Exception):
    """The endpoint was stopped (:meth:`Ingress.stop`) before the request's answer came."""


class Ingress:
    """Forwards every request to ``engine`` (a DeploymentHandle of :class:`.replica.EngineReplica`)."""

    def __init__(self, engine, config: ServeConfig):
        self.engine = engine
        self.config = config
        self.hosts = config.hosts  # the Host names answered (None: any), as the single server's
        self.metrics = Metrics()
        self.replicas: dict[str, dict[str, float]] = {}  # each replica's counts, as of its latest answer
        self.answered: dict[str, int] = {}
        self.where: dict[str, dict[str, str]] = {}  # each replica's Ray node and process id
        self.retried = 0  # requests sent again because their replica died
        self.draining = False
        self.stopped = asyncio.Event()  # a forced stop: every open request is answered 503 now
        self.in_flight = 0  # requests forwarded and not answered yet (a stream: until its last piece)

    async def __call__(self, request: Request) -> Response:
        start, path, endpoint = time.perf_counter(), request.url.path, "other"
        refusal = refused_host(request.headers.get("host", "").encode("latin-1"), self.hosts)
        if refusal is not None:  # a page rebinding its DNS name to this loopback server: before anything else
            response = _error(refusal, path)
        elif path == "/metrics":
            response, endpoint = self.own_metrics(request), path
        elif self.draining:  # as the single server: new requests (and /health) get 503 while accepted ones finish
            response = _error(ShuttingDown("server is shutting down"), path)
        else:
            self.in_flight += 1
            try:
                response, endpoint = await self.forward(request)
            finally:
                self.in_flight -= 1
        self.metrics.observe_request(endpoint, response.status_code, time.perf_counter() - start)
        return response

    async def busy(self) -> int:
        """The requests being answered."""
        return self.in_flight

    async def drain(self) -> int:
        """Turn new requests away from now on; the requests still being answered."""
        self.draining = True
        return self.in_flight

    async def stop(self) -> int:
        """A forced stop: every request still open is answered now (a JSON 503, as the single
        server answers it; a stream that began ends with that error as an event); the requests
        still being answered (0 once those answers are out)."""
        self.draining = True
        self.stopped.set()
        return self.in_flight

    async def forward(self, request: Request) -> tuple[Response, str]:
        """The replica's answer and the route that answered (its label at ``/metrics``: the
        replica's app says which of its routes matched, ``other`` for none)."""
        body = await request.body()
        path = request.url.path
        sent = {"method": request.method, "path": path, "query": request.url.query, "headers": list(request.headers.items()),
                "body": body, "documents": request_documents(path, body) if request.method == "POST" else []}
        if request.method == "POST" and _asks_stream(body):
            return await self.forward_stream(sent)
        try:
            out = await self.until_answered(path, lambda: self.engine.remote(sent))
        except Stopped:
            return _error(ShuttingDown(STOPPED), path), "other"
        except Exception as e:  # noqa: BLE001 - every try failed: the client may retry later
            log.warning("no replica answered %s: %s", path, _line(e))
            return _error(QueueFull(DROPPED), path), "other"
        name = out["replica"]
        self.replicas[name] = out["stats"]
        self.count(name, out)
        headers = [(k, v) for k, v in out["headers"] if k.lower() != "content-length"] + [(REPLICA_HEADER, name)]
        response = Response(out["body"], status_code=out["status"])
        response.raw_headers = [*((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers),
                                (b"content-length", str(len(out["body"])).encode())]
        return response, out.get("endpoint", "other")

    def count(self, name: str, answer: dict) -> None:
        self.answered[name] = self.answered.get(name, 0) + 1
        if "where" in answer:
            self.where[name] = answer["where"]

    async def until_answered(self, path: str, call: Callable[[], Awaitable[Any]]) -> Any:
        """``await call()``; where the replica died (nothing of its answer came back), again,
        on another replica (Ray's router no longer offers a replica whose actor died), up to
        :data:`RETRIES` times. Raises :class:`Stopped` on a forced stop."""
        for tries in range(RETRIES + 1):
            try:
                return await self.unless_stopped(call())
            except Exception as e:
                if tries == RETRIES or not replica_died(e):
                    raise
                self.retried += 1
                log.warning("a replica died answering %s (%s); sending it to another", path, _line(e))
        raise AssertionError("unreachable")

    async def unless_stopped(self, pending: Awaitable[Any]) -> Any:
        """``await pending``, unless a forced stop comes first (then :class:`Stopped`; the
        replica's work is cancelled)."""
        answer = asyncio.ensure_future(pending)
        stop = asyncio.ensure_future(self.stopped.wait())
        try:
            await asyncio.wait((answer, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not answer.done():
            answer.cancel()
            raise Stopped
        return answer.result()

    async def forward_stream(self, sent: dict) -> tuple[Response, str]:
        """A streamed request: the replica's status and headers, then its pieces as they come
        (:meth:`.replica.EngineReplica.stream`); the stream counts as in flight until its end, so
        a drain waits for it. The status goes out with the first piece, so a replica that dies
        before it is a request sent again, to another replica. A client that leaves cancels the
        replica's stream (its generation stops)."""
        try:
            head, first, pieces = await self.until_answered(sent["path"], lambda: self.stream_start(sent))
        except Stopped:
            return _error(ShuttingDown(STOPPED), sent["path"]), "other"
        except Exception as e:  # noqa: BLE001 - as forward()
            log.warning("no replica answered %s: %s", sent["path"], _line(e))
            return _error(QueueFull(DROPPED), sent["path"]), "other"
        name = head["replica"]
        self.count(name, head)
        self.in_flight += 1

        async def body() -> AsyncIterator[bytes]:
            try:
                yield first
                while True:
                    try:
                        piece = await self.unless_stopped(pieces.__anext__())
                    except StopAsyncIteration:
                        return
                    if isinstance(piece, dict):
                        self.replicas[name] = piece["stats"]
                    else:
                        yield piece
            except Stopped:
                yield sse(error_event(ShuttingDown(STOPPED)))
            except Exception as e:  # noqa: BLE001 - the status went out already: the error is an event, as the single server's
                log.warning("a replica stopped streaming %s: %s", sent["path"], _line(e))
                yield sse(error_event(QueueFull(DROPPED)))
            finally:
                self.in_flight -= 1
                pieces.cancel()

        response = StreamingResponse(body(), status_code=head["status"])
        response.raw_headers = [*((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in head["headers"] if k.lower() != "content-length"),
                                (REPLICA_HEADER.encode(), name.encode("latin-1"))]
        return response, head.get("endpoint", "other")

    async def stream_start(self, sent: dict) -> tuple[dict, bytes, Any]:
        """A replica's stream up to its first piece of body: ``(head, first piece, the rest)``
        (``b""`` for an answer without a body)."""
        pieces = self.engine.options(stream=True, method_name="stream").remote(sent)
        try:
            head = await pieces.__anext__()
            async for piece in pieces:
                if not isinstance(piece, dict):
                    return head, piece, pieces
            return head, b"", pieces
        except BaseException:
            pieces.cancel()
            raise

    def own_metrics(self, request: Request) -> Response:
        denied = refusal("/metrics", request.headers.get("authorization"), self.config.api_key)
        if denied:
            return _error(denied, "/metrics")
        return Response(self.render(), media_type=CONTENT_TYPE)

    def render(self) -> str:
        from .tally import DECISIONS, HELD  # the router of this process's handle

        text = self.metrics.render({"setllm_endpoint_requests_in_flight": ("Requests the endpoint is answering (forwarded to replicas).",
                                                                            lambda: self.in_flight),
                                    "setllm_draining": ("1 while the endpoint shuts down.", lambda: int(self.draining))})
        lines = [*_header("setllm_endpoint_retries_total", "counter", "Requests sent again, to another replica, because theirs died "
                          "before any byte of the answer went out."), f"setllm_endpoint_retries_total {self.retried}"]
        lines += [*_header("setllm_router_decisions_total", "counter", "Requests routed, by why: affinity (to the replica holding the most "
                          "of its documents), load (imbalance or a refused replica), no_documents, new_documents (none held anywhere).")]
        lines += [f'setllm_router_decisions_total{{reason="{r}"}} {n}' for r, n in sorted(DECISIONS.items())]
        lines += _header("setllm_router_documents_held", "gauge", "Documents the router records as sent to each replica.")
        lines += [f'setllm_router_documents_held{{replica="{_esc(r)}"}} {n}' for r, n in sorted(HELD.items())]
        lines += _header("setllm_replica_requests_total", "counter", "Requests each replica answered.")
        lines += [f'setllm_replica_requests_total{{replica="{_esc(r)}"}} {n}' for r, n in sorted(self.answered.items())]
        lines += _header("setllm_replica_info", "gauge", "Where each replica that answered runs: its Ray node and process id.")
        lines += [f'setllm_replica_info{{replica="{_esc(r)}",node="{_esc(w["node"])}",pid="{_esc(w["pid"])}"}} 1' for r, w in sorted(self.where.items())]
        for stat, (name, help_) in REPLICA_GAUGES.items():
            rows = [(r, s[stat]) for r, s in sorted(self.replicas.items()) if stat in s]
            if rows:
                lines += [*_header(name, "gauge", help_ + " Per replica, as of its latest answer."),
                          *(f'{name}{{replica="{_esc(r)}"}} {_num(v)}' for r, v in rows)]
        return text + "\n".join(lines) + "\n"


def _asks_stream(body: bytes) -> bool:
    """Whether a request's JSON body asks for a stream (a body that does not parse: no, the replica says what is wrong)."""
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("stream") is True


def replica_died(e: BaseException) -> bool:
    """Whether ``e`` says the replica's actor died or cannot be reached (Ray's actor errors,
    also as the cause of a task's error): the request may go to another replica."""
    try:
        from ray.exceptions import RayActorError
    except ImportError:
        return False
    return isinstance(e, RayActorError) or isinstance(getattr(e, "cause", None), RayActorError)


def _line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _error(err: ApiError, path: str) -> JSONResponse:
    """The single server's error shape (OpenAI's error object on its routes)."""
    return JSONResponse(error_body(err, path in OPENAI_PATHS), status_code=err.status, headers=err.headers)


def stat_total(metrics_text: str, name: str) -> float:
    """The sum of ``name`` over its replicas in a ``/metrics`` text (benchmarks, tests)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines() if line.startswith(name + "{"))
