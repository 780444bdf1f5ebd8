"""``Ingress``: the endpoint's one thin deployment. It reads a request's documents
(:mod:`.documents`), hands the request to an engine replica through a handle whose router
sees them (:mod:`.router`), and returns the replica's answer as it is; a streamed one
(``"stream": true``) piece by piece, as the replica sends it. ``/metrics`` it answers itself:
every replica's counts and the router's decisions in one place."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..auth import refusal
from ..config import ServeConfig
from ..errors import ApiError, QueueFull, ShuttingDown
from ..metrics import CONTENT_TYPE, Metrics, _esc, _header, _num
from .documents import request_documents

log = logging.getLogger("setllm.serve")
REPLICA_HEADER = "x-setllm-replica"  # which replica answered (the name /metrics labels it by)
REPLICA_GAUGES = {  # replica stat -> (metric, help)
    "hits": ("setllm_document_cache_hits", "Document pieces found in the replica's cache."),
    "misses": ("setllm_document_cache_misses", "Document pieces the replica computed (not in its cache)."),
    "evictions": ("setllm_document_cache_evictions", "Document pieces pushed out of the replica's cache by newer ones."),
    "bytes": ("setllm_document_cache_bytes", "Bytes of keys and values the replica's cache holds."),
    "max_bytes": ("setllm_document_cache_max_bytes", "The replica's cache bound in bytes (--cache-mb)."),
    "in_flight": ("setllm_requests_in_flight", "HTTP requests the replica was answering."),
    "queued": ("setllm_queue_depth", "Requests waiting for the replica's model."),
}
KNOWN = ("/v1/choose", "/v1/score", "/v1/judge", "/v1/generate", "/v1/answer", "/v1/completions", "/v1/chat/completions",
         "/v1/responses", "/v1/models", "/health", "/metrics", "/")
STREAMING = ("/v1/generate", "/v1/completions", "/v1/chat/completions", "/v1/responses")  # routes that stream with "stream": true


class Ingress:
    """Forwards every request to ``engine`` (a DeploymentHandle of :class:`.replica.EngineReplica`)."""

    def __init__(self, engine, config: ServeConfig):
        self.engine = engine
        self.config = config
        self.metrics = Metrics()
        self.replicas: dict[str, dict[str, float]] = {}  # each replica's counts, as of its latest answer
        self.answered: dict[str, int] = {}
        self.draining = False
        self.in_flight = 0  # requests forwarded and not answered yet (a stream: until its last piece)

    async def __call__(self, request: Request) -> Response:
        start, path = time.perf_counter(), request.url.path
        if path == "/metrics":
            response = self.own_metrics(request)
        elif self.draining:  # as the single server: new requests (and /health) get 503 while accepted ones finish
            response = _error(ShuttingDown("server is shutting down"))
        else:
            self.in_flight += 1
            try:
                response = await self.forward(request)
            finally:
                self.in_flight -= 1
        self.metrics.observe_request(path if path in KNOWN else "other", response.status_code, time.perf_counter() - start)
        return response

    def drain(self) -> int:
        """Turn new requests away from now on; the requests still being answered."""
        self.draining = True
        return self.in_flight

    async def forward(self, request: Request) -> Response:
        body = await request.body()
        path = request.url.path
        sent = {"method": request.method, "path": path, "query": request.url.query, "headers": list(request.headers.items()),
                "body": body, "documents": request_documents(path, body) if request.method == "POST" else []}
        if request.method == "POST" and path in STREAMING and _asks_stream(body):
            return await self.forward_stream(sent)
        try:
            out = await self.engine.remote(sent)
        except Exception as e:  # noqa: BLE001 - the replica died or left mid-request: the client may retry elsewhere
            log.warning("a replica failed to answer %s: %s", path, e)
            return _error(QueueFull("the replica answering this request stopped; retry it"))
        name = out["replica"]
        self.replicas[name] = out["stats"]
        self.answered[name] = self.answered.get(name, 0) + 1
        headers = [(k, v) for k, v in out["headers"] if k.lower() != "content-length"] + [(REPLICA_HEADER, name)]
        response = Response(out["body"], status_code=out["status"])
        response.raw_headers = [*((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers),
                                (b"content-length", str(len(out["body"])).encode())]
        return response

    async def forward_stream(self, sent: dict) -> Response:
        """A streamed request: the replica's status and headers, then its pieces as they come
        (:meth:`.replica.EngineReplica.stream`); the stream counts as in flight until its end, so
        a drain waits for it. A client that leaves cancels the replica's stream (its generation stops)."""
        pieces = self.engine.options(stream=True, method_name="stream").remote(sent)
        try:
            head = await pieces.__anext__()
        except Exception as e:  # noqa: BLE001 - as forward(): the replica died or left before answering
            log.warning("a replica failed to answer %s: %s", sent["path"], e)
            return _error(QueueFull("the replica answering this request stopped; retry it"))
        name = head["replica"]
        self.answered[name] = self.answered.get(name, 0) + 1
        self.in_flight += 1

        async def body() -> AsyncIterator[bytes]:
            try:
                async for piece in pieces:
                    if isinstance(piece, dict):
                        self.replicas[name] = piece["stats"]
                    else:
                        yield piece
            except Exception as e:  # noqa: BLE001 - the status went out already: the stream ends short
                log.warning("a replica stopped streaming %s: %s", sent["path"], e)
            finally:
                self.in_flight -= 1
                pieces.cancel()

        response = StreamingResponse(body(), status_code=head["status"])
        response.raw_headers = [*((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in head["headers"] if k.lower() != "content-length"),
                                (REPLICA_HEADER.encode(), name.encode("latin-1"))]
        return response

    def own_metrics(self, request: Request) -> Response:
        denied = refusal("/metrics", request.headers.get("authorization"), self.config.api_key)
        if denied:
            return _error(denied)
        return Response(self.render(), media_type=CONTENT_TYPE)

    def render(self) -> str:
        from .tally import DECISIONS, HELD  # the router of this process's handle

        text = self.metrics.render({"setllm_endpoint_requests_in_flight": ("Requests the endpoint is answering (forwarded to replicas).",
                                                                            lambda: self.in_flight),
                                    "setllm_draining": ("1 while the endpoint shuts down.", lambda: int(self.draining))})
        lines = [*_header("setllm_router_decisions_total", "counter", "Requests routed, by why: affinity (to the replica holding the most "
                          "of its documents), load (imbalance or a refused replica), no_documents, new_documents (none held anywhere).")]
        lines += [f'setllm_router_decisions_total{{reason="{r}"}} {n}' for r, n in sorted(DECISIONS.items())]
        lines += _header("setllm_router_documents_held", "gauge", "Documents the router records as sent to each replica.")
        lines += [f'setllm_router_documents_held{{replica="{_esc(r)}"}} {n}' for r, n in sorted(HELD.items())]
        lines += _header("setllm_replica_requests_total", "counter", "Requests each replica answered.")
        lines += [f'setllm_replica_requests_total{{replica="{_esc(r)}"}} {n}' for r, n in sorted(self.answered.items())]
        for stat, (name, help_) in REPLICA_GAUGES.items():
            rows = [(r, s[stat]) for r, s in sorted(self.replicas.items()) if stat in s]
            if rows:
                lines += [*_header(name, "gauge", help_ + " As of its latest answer."),
                          *(f'{name}{{replica="{_esc(r)}"}} {_num(v)}' for r, v in rows)]
        return text + "\n".join(lines) + "\n"


def _asks_stream(body: bytes) -> bool:
    """Whether a request's JSON body asks for a stream (a body that does not parse: no, the replica says what is wrong)."""
    try:
        data = json.loads(body)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("stream") is True


def _error(err: ApiError) -> JSONResponse:
    return JSONResponse({"error": err.message}, status_code=err.status, headers=err.headers)


def stat_total(metrics_text: str, name: str) -> float:
    """The sum of ``name`` over its replicas in a ``/metrics`` text (benchmarks, tests)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines() if line.startswith(name + "{"))
