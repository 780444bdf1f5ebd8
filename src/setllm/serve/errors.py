"""HTTP errors of the server: each is a status code and one line, sent as ``{"error": ...}``.

The model worker turns every outcome of a request into either a result or one of these,
so a failing request can only ever fail itself.
"""

from __future__ import annotations

from ..core.prompt import PromptTooLong
from ..errors import SetLLMError


class ApiError(Exception):
    """A request's failure as the client sees it."""

    status = 500

    def __init__(self, message: str, headers: dict[str, str] | None = None):
        super().__init__(one_line(message))
        self.message = one_line(message)
        self.headers = headers or {}


class BadRequest(ApiError):
    status = 400


class NotFound(ApiError):
    """A request names a model or adapter this server does not hold."""

    status = 404


class Unprocessable(ApiError):
    status = 422


class TooLong(ApiError):
    """A prompt (or prompt + response) longer than the server or the model takes."""

    status = 413


class QueueFull(ApiError):
    status = 503

    def __init__(self, message: str, retry_after_s: int = 1):
        super().__init__(message, {"Retry-After": str(retry_after_s)})


class ShuttingDown(QueueFull):
    """The server drains: requests already accepted finish, new ones are turned away."""


class Timeout(ApiError):
    status = 504


class Internal(ApiError):
    status = 500


def one_line(text: str) -> str:
    lines = str(text).strip().splitlines()
    return lines[0] if lines else "error"


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
