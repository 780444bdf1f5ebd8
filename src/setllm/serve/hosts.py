"""The ``Host`` names a listening server answers (``--allowed-hosts``).

A server without ``--api-key`` on a loopback address trusts whoever can connect, and a web
page can connect: it rebinds its own DNS name to 127.0.0.1 (DNS rebinding) and its script
then reads the answers as its own origin's. Such a request still names the page's host in
its ``Host`` header, so answering loopback names only (``localhost``, ``127.0.0.1``,
``[::1]``) closes it. With a key, or on a network address, any name is answered unless
``--allowed-hosts`` says otherwise (:attr:`.config.ServeConfig.hosts`).

It wraps the app where the server listens (:func:`.server.make_server`), not inside
:func:`.app.create_app`: an app served in-process (tests, a Ray replica behind its ingress)
has no Host to trust; the Ray ingress, where ``--replicas`` listens, checks it by the same rule
(:func:`refused_host`). starlette's ``TrustedHostMiddleware`` answers a plain-text 400; this
answers in the server's error shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import BadRequest


class HostCheck:
    """``app``, answering only requests whose ``Host`` is one of ``hosts`` (lower case, no port)."""

    def __init__(self, app, hosts: frozenset[str], error: Callable[[BadRequest, str], Any]):
        self.app, self.hosts, self.error = app, hosts, error

    async def __call__(self, scope, receive, send) -> None:
        refusal = refused_host(dict(scope["headers"]).get(b"host", b""), self.hosts) if scope["type"] == "http" else None
        if refusal is not None:
            await self.error(refusal, scope["path"])(scope, receive, send)
            return
        await self.app(scope, receive, send)


def refused_host(header: bytes, hosts: frozenset[str] | None) -> BadRequest | None:
    """The 400 for a request whose ``Host`` header is not among ``hosts`` (None: any is answered),
    the one rule of the single server and of the Ray ingress."""
    if hosts is None or host_name(header) in hosts:
        return None
    return BadRequest(f"this server answers requests for {', '.join(sorted(hosts))} only (--allowed-hosts)")


def host_name(header: bytes) -> str:
    """The name of a ``Host`` header, lower case, without its port (``[::1]:8000`` -> ``::1``)."""
    text = header.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1:].partition("]")[0]
    return text.rpartition(":")[0] if text.count(":") == 1 else text
