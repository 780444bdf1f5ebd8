"""Helpers of the server tests: an app per config, a slow model, concurrent requests
through the ASGI app (no network)."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
from fastapi.testclient import TestClient

from setllm.serve import ServeConfig, create_app


@contextlib.contextmanager
def serving(lm, **config):
    """A started app (lifespan run) and a client for it."""
    app = create_app(lm, ServeConfig(**config))
    with TestClient(app, raise_server_exceptions=False) as client:
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
            if before is not None:
                before(app)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as client:
                return await asyncio.gather(*(client.post(path, json=body) for path, body in requests))

    return asyncio.run(main())
