"""HTTP errors of the server: each is a status code and one line, sent as ``{"error": ...}``:
the line itself on setllm's own routes, OpenAI's error object (``{"message", "type", "param",
"code"}``: what OpenAI's SDKs raise with) on the OpenAI-compatible ones (:func:`body`).

The model worker turns every outcome of a request into either a result or one of these,
so a failing request can only ever fail itself.
"""

from __future__ import annotations

import difflib
import re

from ..core.text.prompt import PromptTooLong
from ..errors import SetLLMError


class ApiError(Exception):
    """A request's failure as the client sees it."""

    status = 500
    kind = "invalid_request_error"  # OpenAI's error ``type``
    code: str | None = None  # OpenAI's error ``code``

    def __init__(self, message: str, headers: dict[str, str] | None = None, param: str | None = None):
        super().__init__(one_line(message))
        self.message = one_line(message)
        self.headers = headers or {}
        self.param = param if param is not None else named_field(self.message)


class BadRequest(ApiError):
    status = 400


class NotFound(ApiError):
    """A request names a model or adapter this server does not hold."""

    status = 404
    code = "model_not_found"


class Unprocessable(ApiError):
    status = 422


class TooLong(ApiError):
    """A prompt (or prompt + response) longer than the server or the model takes."""

    status = 413


class QueueFull(ApiError):
    status = 503
    kind = "server_error"

    def __init__(self, message: str, retry_after_s: int = 1):
        super().__init__(message, {"Retry-After": str(retry_after_s)})


class ShuttingDown(QueueFull):
    """The server drains: requests already accepted finish, new ones are turned away."""


class Timeout(ApiError):
    status = 504
    kind = "timeout"


class Internal(ApiError):
    status = 500
    kind = "server_error"


def one_line(text: str) -> str:
    lines = str(text).strip().splitlines()
    return lines[0] if lines else "error"


# Every message about one field starts with its path ("messages[0].content: ...", "n: ..."):
# the field's path is OpenAI's ``param``.
_FIELD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:\[\d+\]|\.[A-Za-z_][A-Za-z0-9_]*)*): ")


def named_field(message: str) -> str | None:
    """The field a message is about (its leading ``path: ``), None where it names none."""
    match = _FIELD.match(message)
    return match.group(1) if match else None


def meant(name: str, known) -> str | None:
    """The field of ``known`` a client most likely meant by the unknown ``name`` (a typo), if any."""
    close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.8)  # a typo, not a neighbour (store, stream)
    return close[0] if close else None


def printable(name: str, limit: int = 80) -> str:
    """A client's field name as it may appear in a message: escaped (a name may hold any
    character, a newline included) and cut short."""
    text = str(name).encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def openai_error(err: ApiError) -> dict:
    """OpenAI's error object: its SDKs raise ``APIStatusError`` subclasses whose ``message``,
    ``type``, ``param`` and ``code`` come from it."""
    return {"message": err.message, "type": err.kind, "param": err.param, "code": err.code}


def body(err: ApiError, openai: bool) -> dict:
    """An error response's body: OpenAI's shape on its routes (``openai``), else the line."""
    return {"error": openai_error(err) if openai else err.message}


def as_api_error(exc: BaseException) -> ApiError:
    """The client-facing form of anything a request raised: a user's mistake
    (:class:`SetLLMError`) is a 400 with its own message, a prompt past the model's context
    (:class:`PromptTooLong`, the one fit rule's refusal) a 413, anything else is a bug (500)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, PromptTooLong):
        return TooLong(str(exc))
    if isinstance(exc, SetLLMError):
        return BadRequest(str(exc) or type(exc).__name__)
    return Internal(f"internal error ({type(exc).__name__}); the request was not answered, the server goes on")
