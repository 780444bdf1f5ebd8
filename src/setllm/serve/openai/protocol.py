"""What every OpenAI route's body shares: the fields both APIs take (:class:`OpenAIRequest`),
the usage object, OpenAI's content parts read as text, and the values of OpenAI's fields this
server does not honour (:data:`UNSUPPORTED`: refused with a 400, never ignored).

pydantic resolves the (postponed) annotations in each protocol module's namespace, so every
type named in one is importable at its module level.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from ..errors import BadRequest
from ..schemas import TOP_P_MIN, Count, Count0, Number, OpenAIStop, OpenAITemperature

IGNORED_HEADER = "setllm-ignored-fields"  # the request's fields this server does not know and ignored (.serving.name_ignored)
MAX_UNKNOWN_FIELDS = 64  # more unknown fields in one body: 400 (no client of OpenAI's API sends that many)
IGNORED_HEADER_BYTES = 1024  # the header names the first fields that fit; the rest are counted


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` adds a last chunk with the usage (``choices: []``)."""

    model_config = ConfigDict(extra="ignore")

    include_usage: StrictBool = False


class OpenAIRequest(BaseModel):
    """The fields every OpenAI route takes. A field this server does not know is ignored and
    named in the response's :data:`IGNORED_HEADER`, on purpose: OpenAI's clients send fields
    newer than any server that speaks their API (``stream_options``, ``store``, ``metadata``,
    ``service_tier``, ...), and a 422 would break a client that worked yesterday. setllm's
    own routes refuse unknown fields (422): their clients are setllm's. A known field whose
    value we cannot honour is refused with a 400 naming it (:data:`UNSUPPORTED`), never
    ignored."""

    model_config = ConfigDict(extra="allow")  # kept in model_extra, to be named

    model: str | None = None
    temperature: OpenAITemperature = 1.0
    top_p: Number = Field(default=1.0, ge=TOP_P_MIN, le=1, allow_inf_nan=False)
    n: Count = 1
    stop: OpenAIStop = None
    seed: Count0 | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    presence_penalty: Number = 0.0
    frequency_penalty: Number = 0.0
    logit_bias: dict[str, Number] | None = None
    user: str | None = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


# field -> (the one value we honour, why); the routes refuse any other value with a 400.
UNSUPPORTED = {
    "n": (1, "only n=1 is supported"),
    "presence_penalty": (0.0, "penalties are not supported"),
    "frequency_penalty": (0.0, "penalties are not supported"),
    "logit_bias": (None, "not supported"),
}


def parts_text(where: str, parts: list[dict], kinds: tuple[str, ...]) -> str:
    """Content parts as their text, joined: only text parts (``kinds``); another kind (an
    image, audio, a file) is a 400 naming it, never read as nothing."""
    other = sorted({repr(p.get("type")) for p in parts if p.get("type") not in kinds})
    if other:
        raise BadRequest(f"{where}: a string or a list of text parts ({', '.join(kinds)}); this server reads text only, got part type {', '.join(other)}")
    empty = [i for i, p in enumerate(parts) if not isinstance(p.get("text"), str)]
    if empty:
        raise BadRequest(f"{where}[{empty[0]}].text: a text part needs its text (a string)")
    return "".join(p["text"] for p in parts)
