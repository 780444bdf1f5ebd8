"""``--api-key``: every route but ``/health`` and the playground page needs
``Authorization: Bearer KEY``, as vLLM's ``--api-key`` and OpenAI's clients do it.
``/health`` answers anyone, but without the key only whether the server is up and needs one:
what it serves (model, adapter folders: absolute paths on the server's disk) is for the key.

The key is compared in constant time (:func:`hmac.compare_digest`), so the time of a refusal
says nothing about how much of a guess was right. ``/health`` stays open (a load balancer
probes it without a key; it says whether a key is needed), and so does the page at ``/``
(a static file that holds nothing of the model: it asks for the key and sends it).
"""

from __future__ import annotations

import hmac

from .errors import ApiError

OPEN_PATHS = frozenset({"/health", "/"})  # answered without a key
ENV_VAR = "SETLLM_API_KEY"


class Unauthorized(ApiError):
    status = 401
    code = "invalid_api_key"

    def __init__(self, message: str):
        super().__init__(message, {"WWW-Authenticate": "Bearer"})


def refusal(path: str, authorization: str | None, key: str | None) -> Unauthorized | None:
    """Why a request for ``path`` with header ``authorization`` is refused (None: it may go on)."""
    if key is None or path in OPEN_PATHS:
        return None
    return _credentials(authorization, key)


def authorized(authorization: str | None, key: str | None) -> bool:
    """Whether a request with header ``authorization`` may see what the server holds: no key
    set, or the right one."""
    return key is None or _credentials(authorization, key) is None


def _credentials(authorization: str | None, key: str) -> Unauthorized | None:
    if not authorization:
        return Unauthorized("this server needs an API key: send the header 'Authorization: Bearer KEY'")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        # Not a word of what was sent: a key pasted without "Bearer " is the whole header.
        return Unauthorized("the Authorization header must be 'Bearer KEY'")
    if not hmac.compare_digest(token.strip().encode(), key.encode()):
        return Unauthorized("wrong API key")
    return None
