"""``POST /v1/completions``' request and response bodies (OpenAI's legacy API, with ``echo``
and ``logprobs``) and the values of its fields not honoured."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, StrictBool, WithJsonSchema

from ...schemas import Count, Count0, TopLogprobs
from ..protocol import UNSUPPORTED, OpenAIRequest, Usage


def _completion_prompt(value: Any) -> Any:
    """OpenAI's four prompt forms: a string, a list of strings, token ids, a list of those."""
    def ids(v):
        return isinstance(v, list) and bool(v) and all(isinstance(t, int) and not isinstance(t, bool) for t in v)

    if isinstance(value, str) or ids(value):
        return value
    if isinstance(value, list) and value and (all(isinstance(s, str) for s in value) or all(ids(v) for v in value)):
        return value
    raise ValueError("must be a string (setllm markup allowed), a list of strings, a list of token ids, or a list of those")


_IDS = {"type": "array", "items": {"type": "integer"}, "minItems": 1}
COMPLETION_PROMPT = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}, _IDS,
                               {"type": "array", "items": _IDS, "minItems": 1}]}  # what _completion_prompt takes


class CompletionRequest(OpenAIRequest):
    """``POST /v1/completions`` (the legacy API, with ``echo`` and ``logprobs``)."""

    prompt: Annotated[Any, BeforeValidator(_completion_prompt), WithJsonSchema(COMPLETION_PROMPT)]
    max_tokens: Count0 | None = 16
    echo: StrictBool = False
    logprobs: TopLogprobs | None = None
    best_of: Count | None = None
    suffix: str | None = None


class CompletionLogprobs(BaseModel):
    """OpenAI's legacy ``logprobs``: per token its text, log-prob (None where not defined:
    the first token, and inside a set prompt; see docs/serving-openai.md), the likeliest tokens at
    its place and its offset in the text of the tokens."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    text: str
    index: int
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length"]


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


COMPLETION_UNSUPPORTED = {**UNSUPPORTED, "best_of": (None, "best_of is not supported"), "suffix": (None, "suffix is not supported")}
