"""Run the app under uvicorn on a socket bound up front, and stop it cleanly.

On SIGTERM or Ctrl-C the server drains: it keeps listening, answers new requests with 503
(so clients and load balancers go elsewhere at once instead of timing out), finishes
everything already accepted, and then closes. Draining means finishing: by default it
waits as long as any accepted request may take (``--timeout-s``: past it a request has
its own 504 anyway). When the user forces the stop (a second signal, or ``--drain-s``
running out) every request still open is answered with a JSON 503 before the server
closes; no request is cut off without an answer.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..core import doccache
from ..core.layout.variants import get_variant
from ..errors import InputError
from . import guard
from .config import ServeConfig
from .hosts import HostCheck

if TYPE_CHECKING:  # the app holds it: a fleet's launcher opens its socket here without the model's imports (torch)
    from .service import Service

ABORT_GRACE_S = 3.0  # after a forced stop: time for the running step to end and its 503 to go out
MAX_CONNECTIONS = 256  # uvicorn's limit_concurrency: connections and requests at once, past it a 503
HEADER_TIMEOUT_S = 10.0  # a connection that has not sent a whole request head by then is closed
# A lingering close (nginx's, Apache's): after an answer sent before the request was read whole
# (a 413), the server half-closes and drops what still arrives, since a close with bytes unread
# makes the kernel reset the connection, and the client then sees the reset, not the answer.
LINGER_S = 2.0  # time for a client still writing its body to stop and read the answer; one slower is closed as before
LINGER_BYTES = 64 << 20  # at most this much dropped per connection: a client writing on and on costs the server only so much reading


class HeaderTimeoutH11(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head does not arrive within
    :data:`HEADER_TIMEOUT_S` (uvicorn times out idle keep-alive connections, but not one that
    sends half a request and waits: forty of them would hold forty sockets forever), and
    closing one whose request it answered unread with a lingering close (:data:`LINGER_S`). A
    body too slow is the app's to refuse (:mod:`.guard`)."""

    def connection_made(self, transport) -> None:
        self._socket = transport
        self._linger: asyncio.TimerHandle | None = None
        self._linger_left = 0
        super().connection_made(_LingeringTransport(transport, self))  # uvicorn and its request cycles close through it
        self._head_timer = self.loop.call_later(HEADER_TIMEOUT_S, self._head_late)

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and self._head_timer is not None:  # a request head arrived: its cycle runs
            self._head_timer.cancel()
            self._head_timer = None

    def data_received(self, data: bytes) -> None:
        if self._linger is None:
            super().data_received(data)
            return
        self._linger_left -= len(data)  # dropped unparsed: the request was answered
        if self._linger_left <= 0:
            self._socket.close()

    def connection_lost(self, exc) -> None:
        for timer in (self._head_timer, self._linger):
            if timer is not None:
                timer.cancel()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        if self._linger is not None:  # its answer is out: a stopping server does not wait for the client
            self._socket.close()
            return
        super().shutdown()

    @property
    def lingering(self) -> bool:
        return self._linger is not None

    def close_connection(self) -> None:
        """uvicorn's every close: a lingering one while the client may still be sending its
        request (its body unread, or a request h11 could not parse), at once otherwise."""
        sock = self._socket
        if self._linger is not None or sock.is_closing():
            return
        if self.conn.their_state in (h11.SEND_BODY, h11.ERROR) and self._half_close():
            self._linger_left = LINGER_BYTES
            self._linger = self.loop.call_later(LINGER_S, sock.close)  # the client's FIN closes it sooner (eof_received)
        else:
            sock.close()

    def _half_close(self) -> bool:
        """The answer, then a FIN, and reading on: the client reads the answer whole whatever
        it still sends. False where the transport cannot (TLS) or the client is gone."""
        sock = self._socket
        if not sock.can_write_eof():
            return False
        try:
            sock.write_eof()
        except OSError:  # the client's reset came between the answer and this (one that left once it read the status line)
            return False
        sock.resume_reading()  # uvicorn pauses reading while a body waits for the app; nothing waits now
        return True

    def _head_late(self) -> None:
        self._head_timer = None
        if self.cycle is None and not self.transport.is_closing():
            self.transport.close()


class _LingeringTransport:
    """A connection's transport as uvicorn sees it: closing is :meth:`HeaderTimeoutH11.close_connection`,
    and a lingering connection is closing (nothing more is written to it, nor parsed)."""

    def __init__(self, transport: asyncio.Transport, protocol: HeaderTimeoutH11):
        self._transport = transport
        self._protocol = protocol

    def __getattr__(self, name: str):
        return getattr(self._transport, name)

    def close(self) -> None:
        self._protocol.close_connection()

    def is_closing(self) -> bool:
        return self._protocol.lingering or self._transport.is_closing()


def open_socket(host: str, port: int) -> socket.socket:
    """A listening-ready socket, so a taken port is one line before the model loads."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as e:
        raise InputError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


class DrainingServer(uvicorn.Server):
    """uvicorn, with a drain phase between the signal and the shutdown."""

    def __init__(self, config: uvicorn.Config, service: Service, announce: Callable[[], str], drain_s: float):
        super().__init__(config)
        self.service = service
        self.announce = announce
        self.drain_s = drain_s
        self.drain_deadline: float | None = None
        self.abort_deadline: float | None = None

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            print(self.announce(), file=sys.stderr, flush=True)

    def handle_exit(self, sig, frame) -> None:
        if self.drain_deadline is None:
            self.drain_deadline = time.monotonic() + self.drain_s
            self.service.start_draining()
            busy = self.service.in_flight + self.service.batcher.queued
            print(f"setllm serve: stopping; finishing {busy} request(s) in flight, new ones get 503 (a second Ctrl-C answers them 503 now)",
                  file=sys.stderr, flush=True)
        elif self.abort_deadline is None:  # a second signal: stop now, but answer everyone
            self._abort("second signal")
        else:  # a third: uvicorn's own immediate stop
            super().handle_exit(sig, frame)

    def _abort(self, why: str) -> None:
        busy = self.service.in_flight
        print(f"setllm serve: {why}: answering {busy} unfinished request(s) with 503", file=sys.stderr, flush=True)
        self.abort_deadline = time.monotonic() + ABORT_GRACE_S
        self.service.batcher.abort()

    async def on_tick(self, counter: int) -> bool:
        if self.drain_deadline is not None and not self.should_exit:
            now = time.monotonic()
            if self.abort_deadline is None and now >= self.drain_deadline and not self.service.idle():
                self._abort(f"drain limit of {self.drain_s:g} s reached")
            self.should_exit = self.service.idle() or (self.abort_deadline is not None and now >= self.abort_deadline)
        return await super().on_tick(counter)


def documents_line(service: Service) -> str:
    """Who answers ``/v1/answer`` (adapter and variant) and where its documents are kept."""
    key = service.answer_default(None)
    reader = service.models[service.aliases.get(key, key)]  # a model, or a DeferredModel not loaded yet
    origin = reader.origin
    variant = reader.variant.name if hasattr(reader, "variant") else (origin.trained_as.variant or service.lm.variant.name)
    cache, problem = service.documents, doccache.variant_problem(get_variant(variant))
    if problem is not None:
        kept = f"documents read afresh (the {variant} reading lets each see the question)"
    elif cache is None:
        kept = "document cache off (--cache-mb 0)"
    else:
        kept = f"document cache {cache.max_bytes / 1e6:g} MB in memory"
        if cache.disk is not None:
            kept += f", up to {cache.disk.max_bytes / 1e6:g} MB on disk in {cache.disk.directory}"
    return f"setllm serve: /v1/answer: adapter {origin.adapter or 'none'}, variant {variant}; {kept}"


def make_server(app, config: ServeConfig, sock: socket.socket) -> DrainingServer:
    """The uvicorn server for ``app`` on ``sock`` (``.run(sockets=[sock])`` serves)."""
    service: Service = app.state.service
    host, port = sock.getsockname()[:2]
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    key = "requests need the API key" if config.api_key else "there is no authentication (--api-key KEY adds it)"
    where = (f"loopback only: other machines cannot connect (--host 0.0.0.0 exposes it); {key}" if config.loopback
             else f"reachable from the network; {key}")
    lm = service.lm

    judge = "" if service.judge_lm is lm else f"; /v1/judge: adapter {service.judge_lm.origin.adapter or 'none'}"
    if service.adapters:  # one copy of the weights under several adapters
        judge += f"\nsetllm serve: adapters a request may name (one copy of the base weights): {', '.join(service.adapters)}"

    def announce() -> str:  # after start-up: the batching check has run
        return (f"setllm serve: {service.model_name}, adapter {lm.origin.adapter or 'none'}, variant {lm.variant.name}"
                f"{' (exact)' if lm.exact else ''}{judge}\n{documents_line(service)}\nsetllm serve: listening on {url} ({where})\n"
                f"setllm serve: batching {service.batching} (up to {service.batcher.max_batch_size} requests per forward); Ctrl-C stops")

    hosts = config.hosts
    served = app if hosts is None else HostCheck(app, hosts, app.state.error_response)  # the app's error shape, without importing the app
    # uvicorn's own bounds: connections (and their requests) at once, past them a 503; a request
    # head arriving in pieces at most 16 KiB (h11; a whole one: .guard); an idle keep-alive connection closed after 5 s.
    uv = uvicorn.Config(served, log_level="warning", access_log=False, timeout_graceful_shutdown=1, lifespan="on", http=HeaderTimeoutH11,
                        loop="asyncio", limit_concurrency=MAX_CONNECTIONS, h11_max_incomplete_event_size=guard.MAX_HEADER_BYTES, timeout_keep_alive=5)
    return DrainingServer(uv, service, announce, config.drain_limit)


def serve(app, config: ServeConfig, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` until a signal; returns once everything has stopped."""
    make_server(app, config, sock).run(sockets=[sock])
    print("setllm serve: stopped", file=sys.stderr, flush=True)
