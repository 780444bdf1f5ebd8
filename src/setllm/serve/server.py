"""Run the app under uvicorn on a socket bound up front, and stop it cleanly.

On SIGTERM or Ctrl-C the server first drains: it keeps listening, answers new requests
with 503 (so clients and load balancers go elsewhere at once instead of timing out),
finishes everything already accepted, and only then closes, at the latest ``DRAIN_S``
after the signal; a second signal stops it at once. The model thread is a daemon, so a
forward still running at the deadline cannot hold the process: it exits within 10 s.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable

import uvicorn

from ..errors import InputError
from .config import ServeConfig
from .service import Service

DRAIN_S = 7.0  # + uvicorn's 1 s grace + the batcher's 1 s: under 10 s in all


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

    def __init__(self, config: uvicorn.Config, service: Service, announce: Callable[[], str]):
        super().__init__(config)
        self.service = service
        self.announce = announce
        self.drain_deadline: float | None = None

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            print(self.announce(), file=sys.stderr, flush=True)

    def handle_exit(self, sig, frame) -> None:
        if self.drain_deadline is not None:  # a second signal: uvicorn's own stop
            super().handle_exit(sig, frame)
            return
        self.drain_deadline = time.monotonic() + DRAIN_S
        self.service.start_draining()
        busy = self.service.in_flight + self.service.batcher.queued
        print(f"setllm serve: stopping; finishing {busy} request(s) in flight, new ones get 503", file=sys.stderr, flush=True)

    async def on_tick(self, counter: int) -> bool:
        if self.drain_deadline is not None and not self.should_exit:
            self.should_exit = self.service.idle() or time.monotonic() >= self.drain_deadline
        return await super().on_tick(counter)


def serve(app, config: ServeConfig, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` until a signal; returns once everything has stopped."""
    service: Service = app.state.service
    host, port = sock.getsockname()[:2]
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    where = ("loopback only: other machines cannot connect (--host 0.0.0.0 exposes it, without authentication)" if config.loopback
             else "reachable from the network; there is no authentication")
    lm = service.lm

    def announce() -> str:  # after start-up: the batching check has run
        return (f"setllm serve: {service.model_name}, adapter {lm.origin.adapter or 'none'}, variant {lm.variant.name}"
                f"{' (exact)' if lm.exact else ''}\nsetllm serve: listening on {url} ({where})\n"
                f"setllm serve: batching {service.batching} (up to {service.batcher.max_batch_size} requests per forward); Ctrl-C stops")

    uv = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=1, lifespan="on", http="h11", loop="asyncio")
    DrainingServer(uv, service, announce).run(sockets=[sock])
    print("setllm serve: stopped", file=sys.stderr, flush=True)
