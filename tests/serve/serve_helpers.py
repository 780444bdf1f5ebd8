"""Helpers of the server tests: an app per config, a slow model, concurrent requests
through the ASGI app (no network)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import httpx
from fastapi.testclient import TestClient

from setllm.serve import ServeConfig, create_app


async def settled(service) -> None:
    """Wait until the service's batching check (if one runs) has its verdict."""
    task = service.check._task  # the test looks inside: the server itself never waits for the check
    if task is not None:
        await asyncio.shield(task)


def checking(service) -> bool:
    """Whether the service's batching check still runs in the background."""
    task = service.check._task
    return task is not None and not task.done()


@contextlib.contextmanager
def serving(lm, judge_lm=None, **config):
    """A started app (lifespan run) and a client for it."""
    app = create_app(lm, ServeConfig(**config), judge_lm=judge_lm)
    with TestClient(app, raise_server_exceptions=False) as client:
        client.portal.call(settled, app.state.service)  # batching as checked, not as while checking
        yield client


@contextlib.contextmanager
def slow_forwards(lm, seconds: float):
    """Every forward of ``lm``'s model sleeps first: a slow model, for queue and timeout tests."""
    import time

    handle = lm.model.register_forward_pre_hook(lambda *_: time.sleep(seconds))
    try:
        yield
    finally:
        handle.remove()


def concurrently(app, requests: list[tuple[str, dict]], before=None) -> list[httpx.Response]:
    """POST all ``(path, body)`` at once through the ASGI app, with its lifespan running;
    ``before(app)`` runs after start-up (e.g. to slow the model)."""

    async def main():
        async with app.router.lifespan_context(app):
            await settled(app.state.service)
            if before is not None:
                before(app)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as client:
                return await asyncio.gather(*(client.post(path, json=body) for path, body in requests))

    return asyncio.run(main())


@contextlib.contextmanager
def running(lm, settle: bool = True, **config):
    """The real uvicorn server of `setllm serve` on a loopback port, in a thread; the test
    stops it as a signal would (``handle_exit``)."""
    from setllm.serve import ServeConfig, create_app
    from setllm.serve.server import make_server, open_socket

    cfg = ServeConfig(port=0, **config)
    sock = open_socket("127.0.0.1", 0)
    app = create_app(lm, cfg)
    server = make_server(app, cfg, sock)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    while settle and checking(app.state.service) and time.monotonic() < deadline:  # batching as checked, not as while checking
        time.sleep(0.02)
    try:
        yield server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def openai_client(url: str):
    """The openai SDK's client of the server at ``url``, as a user makes it (no retries: a test sees each failure)."""
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
