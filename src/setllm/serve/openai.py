"""The OpenAI-compatible endpoints: ``/v1/completions``, ``/v1/chat/completions`` and
``/v1/models``, their request and response bodies, and what of OpenAI's API they honour.

A text prompt may carry setllm markup (``{{a||b}}`` makes a set); token ids are read as plain
text. pydantic resolves the (postponed) annotations in this module's namespace, so every type
named here is importable at module level.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from ..core.generation import GenerationConfig
from .errors import BadRequest
from .schemas import ERRORS, SEED_MAX, stop_form
from .service import parse_prompt

router = APIRouter()
IGNORED_HEADER = "setllm-ignored-fields"  # the request's fields this server does not know and ignored, comma-separated


def _completion_prompt(value: Any) -> Any:
    """OpenAI's four prompt forms: a string, a list of strings, token ids, a list of those."""
    def ids(v):
        return isinstance(v, list) and bool(v) and all(isinstance(t, int) and not isinstance(t, bool) for t in v)

    if isinstance(value, str) or ids(value):
        return value
    if isinstance(value, list) and value and (all(isinstance(s, str) for s in value) or all(ids(v) for v in value)):
        return value
    raise ValueError("must be a string (setllm markup allowed), a list of strings, a list of token ids, or a list of those")


class OpenAIRequest(BaseModel):
    """The fields both OpenAI routes take. A field this server does not know is ignored and
    named in the response's :data:`IGNORED_HEADER`, on purpose: OpenAI's clients send fields
    newer than any server that speaks their API (``stream_options``, ``store``, ``metadata``,
    ``service_tier``, ...), and a 422 would break a client that worked yesterday. setllm's
    own routes refuse unknown fields (422): their clients are setllm's. A known field whose
    value we cannot honour is refused with a 400 naming it (:data:`UNSUPPORTED`), never
    ignored."""

    model_config = ConfigDict(extra="allow")  # kept in model_extra, to be named

    model: str | None = None
    temperature: float = Field(default=1.0, ge=0, le=2, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    n: int = 1
    stop: Annotated[Any, BeforeValidator(stop_form)] = None
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    stream: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None
    user: str | None = None


class CompletionRequest(OpenAIRequest):
    """``POST /v1/completions`` (the legacy API, with ``echo`` and ``logprobs``)."""

    prompt: Annotated[Any, BeforeValidator(_completion_prompt)]
    max_tokens: int | None = Field(default=16, ge=0)
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=5)
    best_of: int | None = None
    suffix: str | None = None


class CompletionLogprobs(BaseModel):
    """OpenAI's legacy ``logprobs``: per token its text, log-prob (None where not defined:
    the first token, and inside a set prompt; see docs/serving.md), the likeliest tokens at
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


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer"]
    content: str


class ChatRequest(OpenAIRequest):
    """``POST /v1/chat/completions``: ``{{a||b}}`` markup in a message's content makes a set."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list | None = None
    response_format: dict | None = None


class ChatChoice(BaseModel):
    index: int
    message: ChatMessage
    logprobs: None = None
    finish_reason: Literal["stop", "length"]


class ChatResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


# field -> (the one value we honour, why); the routes refuse any other value with a 400.
UNSUPPORTED = {
    "stream": (False, "streaming is not supported; send stream: false"),
    "n": (1, "only n=1 is supported"),
    "presence_penalty": (0.0, "penalties are not supported"),
    "frequency_penalty": (0.0, "penalties are not supported"),
    "logit_bias": (None, "not supported"),
}
COMPLETION_UNSUPPORTED = {**UNSUPPORTED, "best_of": (None, "best_of is not supported"), "suffix": (None, "suffix is not supported")}
CHAT_UNSUPPORTED = {**UNSUPPORTED,
                    "logprobs": (False, "logprobs are not supported on chat; /v1/completions has them"),
                    "top_logprobs": (None, "logprobs are not supported on chat; /v1/completions has them")}


@router.post("/v1/completions", response_model=CompletionResponse, responses=ERRORS)
async def completions(body: CompletionRequest, request: Request, response: Response) -> CompletionResponse:
    """OpenAI-compatible text completion (the legacy API, with ``echo`` and ``logprobs``);
    a text prompt may carry setllm markup, token ids are read as plain text."""
    service = request.app.state.service
    _name_ignored(body, response)
    _refuse_unsupported(body, COMPLETION_UNSUPPORTED)
    if body.max_tokens == 0 and not body.echo:
        raise BadRequest("max_tokens: 0 generates nothing; it is only useful with echo: true")
    prompts = _prompt_list(body.prompt)
    config = _generation_config(body, body.max_tokens or 0) if body.max_tokens != 0 else None
    outs = await asyncio.gather(*(service.generate(p, config, "max_tokens", body.logprobs, body.echo, body.model) for p in prompts))
    choices = [CompletionChoice(text=(out.prompt_text if body.echo else "") + out.text, index=i, finish_reason=out.finish_reason,
                                logprobs=_legacy_logprobs(out) if body.logprobs is not None else None) for i, out in enumerate(outs)]
    return CompletionResponse(id=f"cmpl-{uuid.uuid4().hex}", created=int(time.time()), model=service.answered_by(body.model), choices=choices,
                              usage=_usage(outs))


@router.post("/v1/chat/completions", response_model=ChatResponse, responses=ERRORS)
async def chat_completions(body: ChatRequest, request: Request, response: Response) -> ChatResponse:
    """OpenAI-compatible chat: the model's chat template around the messages; ``{{a||b}}``
    markup in a message makes a set (the template's own tokens are never inside one)."""
    service = request.app.state.service
    _name_ignored(body, response)
    _refuse_unsupported(body, CHAT_UNSUPPORTED)
    if body.tools:
        raise BadRequest("tools: not supported")
    if body.response_format and body.response_format.get("type", "text") != "text":
        raise BadRequest("response_format: only {\"type\": \"text\"} is supported")
    prompt = service.chat([m.model_dump() for m in body.messages])
    field = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    config = _generation_config(body, body.max_completion_tokens or body.max_tokens or service.config.max_generate_tokens)
    out = await service.generate(prompt, config, field, adapter=body.model)
    choice = ChatChoice(index=0, message=ChatMessage(role="assistant", content=out.text), finish_reason=out.finish_reason)
    return ChatResponse(id=f"chatcmpl-{uuid.uuid4().hex}", created=int(time.time()), model=service.answered_by(body.model),
                        choices=[choice], usage=_usage([out]))


def _generation_config(body, max_tokens: int) -> GenerationConfig:
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    return GenerationConfig(max_new_tokens=max_tokens, temperature=body.temperature, top_p=body.top_p, seed=body.seed, stop=stop)


def _usage(outs) -> Usage:
    prompt, completion = sum(o.prompt_tokens for o in outs), sum(o.n_tokens for o in outs)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


def _legacy_logprobs(out) -> CompletionLogprobs:
    offsets, at = [], 0
    for t in out.tokens:
        offsets.append(at)
        at += len(t.text)
    return CompletionLogprobs(tokens=[t.text for t in out.tokens], token_logprobs=[t.logprob for t in out.tokens],
                              top_logprobs=[t.top for t in out.tokens], text_offset=offsets)


@router.get("/v1/models")
async def models(request: Request) -> dict:
    """OpenAI's model list (clients ask for it on start-up): the model served, then each
    adapter a request may name in its ``model`` field."""
    served = request.app.state.service.served
    return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "setllm"} for name in served]}


def _name_ignored(body: OpenAIRequest, response: Response) -> None:
    """Name the fields this server ignored in :data:`IGNORED_HEADER` (none: no header)."""
    if body.model_extra:
        response.headers[IGNORED_HEADER] = ",".join(sorted(body.model_extra))


def _refuse_unsupported(body, fields: dict) -> None:
    for name, (ok, why) in fields.items():
        value = getattr(body, name)
        if value == ok or (name == "logit_bias" and not value) or (name == "best_of" and value == 1):
            continue
        raise BadRequest(f"{name}: {why}")


def _prompt_list(prompt) -> list:
    """One entry per prompt: markup text (a set prompt) or a tuple of token ids."""
    if isinstance(prompt, str):
        return [parse_prompt(prompt)]
    if prompt and isinstance(prompt[0], int):
        return [tuple(prompt)]
    return [tuple(p) if isinstance(p, list) else parse_prompt(p) for p in prompt]
