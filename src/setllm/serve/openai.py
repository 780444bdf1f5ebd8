"""The OpenAI-compatible endpoints: ``/v1/completions``, ``/v1/chat/completions`` and
``/v1/models``, their request and response bodies, their streams (server-sent events,
:mod:`.streaming`), and what of OpenAI's API they honour; the pieces every OpenAI route shares
(``/v1/responses`` too, :mod:`.responses`).

A text prompt may carry setllm markup (``{{a||b}}`` makes a set); token ids are read as plain
text. pydantic resolves the (postponed) annotations in this module's namespace, so every type
named here is importable at module level.
"""

from __future__ import annotations

import functools
import time
import urllib.parse
import uuid
import warnings
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, WithJsonSchema

from ..core.forward.values import GenerationConfig
from ..core.text.prompt import SetPrompt, as_prompt
from ..errors import SetLLMWarning
from . import declare, structured, tools
from .errors import BadRequest, meant, printable
from .schemas import OPENAI_ERRORS as ERRORS  # OpenAI's error object on its routes
from .schemas import TOP_P_MIN, Count, Count0, Count1, Number, OpenAIStop, OpenAITemperature, TopLogprobs
from .streaming import DONE, Chunks, Started, sse, streamed

router = APIRouter()
IGNORED_HEADER = "setllm-ignored-fields"  # the request's fields this server does not know and ignored (:func:`name_ignored`)
MAX_UNKNOWN_FIELDS = 64  # more unknown fields in one body: 422 (no client of OpenAI's API sends that many)
IGNORED_HEADER_BYTES = 1024  # the header names the first fields that fit; the rest are counted


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


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` adds a last chunk with the usage (``choices: []``)."""

    model_config = ConfigDict(extra="ignore")

    include_usage: StrictBool = False


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


class ContentPart(BaseModel):
    """One of OpenAI's content parts: a text part (``{"type": "text", "text": ...}``) reads as
    its text; any other kind is refused with a 400 naming it (:func:`parts_text`)."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    """A message: its content a string or OpenAI's content parts (text parts only); an
    assistant's may hold ``tool_calls`` (then no content), a ``tool`` message the result of
    the call ``tool_call_id`` names."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[dict] | None = None
    tool_call_id: str | None = None

    def as_text(self, where: str) -> dict:
        """The message with its content as one string (``where``: its field, for the error)."""
        data = self.model_dump()
        if isinstance(self.content, list):
            data["content"] = parts_text(f"{where}.content", [p.model_dump() for p in self.content], ("text",))
        return data


class ChatRequest(OpenAIRequest):
    """``POST /v1/chat/completions``: ``{{a||b}}`` markup in a message's content makes a set."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Count1 | None = None
    max_completion_tokens: Count1 | None = None
    logprobs: StrictBool = False
    top_logprobs: Count | None = None
    tools: list | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None  # one call at most: either way
    response_format: dict | None = None


class AssistantMessage(BaseModel):
    """The answer: text, or (``content`` None) OpenAI's ``tool_calls`` (left out where there are none, as OpenAI does)."""

    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[dict] | None = Field(default=None, exclude_if=lambda v: v is None)


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: None = None
    finish_reason: Literal["stop", "length", "tool_calls"]


class ChatResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


# field -> (the one value we honour, why); the routes refuse any other value with a 400.
UNSUPPORTED = {
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
@declare.prompts(lambda d: [p for p in _prompt_list(d["prompt"]) if isinstance(p, SetPrompt)])  # token ids hold no set
async def completions(body: CompletionRequest, request: Request, response: Response) -> CompletionResponse | StreamingResponse:
    """OpenAI-compatible text completion (the legacy API, with ``echo`` and ``logprobs``);
    a text prompt may carry setllm markup, token ids are read as plain text. ``stream``:
    server-sent chunks, ``data: [DONE]`` last."""
    service = request.app.state.service
    shape = structured.vllm_constraint(body)  # before the ignored fields are named: vLLM's are read
    name_ignored(body, response)
    refuse_unsupported(body, COMPLETION_UNSUPPORTED)
    if body.max_tokens == 0 and not body.echo:
        raise BadRequest("max_tokens: 0 generates nothing; it is only useful with echo: true")
    if shape is not None and (body.echo or body.logprobs is not None or body.max_tokens == 0):
        raise BadRequest("structured_outputs: not with echo, logprobs or max_tokens 0")
    prompts = _prompt_list(body.prompt)
    config = config_of(body, body.max_tokens or 0) if body.max_tokens != 0 else None
    generate = generator_for(service, shape)
    if body.stream:
        service.check_prompts(len(prompts))
        jobs = [lambda sink, p=p: generate(p, config, "max_tokens", body.logprobs, body.echo, body.model, stream=sink) for p in prompts]
        return await stream_jobs(jobs, _CompletionChunks(body, service.answered_by(body.model)), response)
    outs = await service.generate_all(prompts, config, "max_tokens", body.logprobs, body.echo, body.model, using=generate)
    choices = [CompletionChoice(text=(out.prompt_text if body.echo else "") + out.text, index=i, finish_reason=out.finish_reason,
                                logprobs=_legacy_logprobs(out) if body.logprobs is not None else None) for i, out in enumerate(outs)]
    return CompletionResponse(id=f"cmpl-{uuid.uuid4().hex}", created=int(time.time()), model=service.answered_by(body.model), choices=choices,
                              usage=_usage(outs))


@router.post("/v1/chat/completions", response_model=ChatResponse, responses=ERRORS)
@declare.no_documents  # chat messages are text, no set
async def chat_completions(body: ChatRequest, request: Request, response: Response) -> ChatResponse | StreamingResponse:
    """OpenAI-compatible chat: the model's chat template around the messages; ``{{a||b}}``
    markup in a message makes a set (the template's own tokens are never inside one).
    ``stream``: server-sent ``chat.completion.chunk`` objects, ``data: [DONE]`` last."""
    service = request.app.state.service
    shape = structured.chat_constraint(body)  # before the ignored fields are named: vLLM's are read
    name_ignored(body, response)
    refuse_unsupported(body, CHAT_UNSUPPORTED)
    offer = tools.offered(body)
    shown = [tools.shown_message(offer, service.lm.exact)] if offer is not None else []
    prompt = service.chat([*shown, *tools.as_template([m.as_text(f"messages[{i}]") for i, m in enumerate(body.messages)])], body.model)
    field = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    config = config_of(body, body.max_completion_tokens or body.max_tokens or service.config.max_generate_tokens)
    generate = generator_for(service, shape)
    if offer is not None:  # a call, or (auto, none) the text answer
        generate = functools.partial(tools.answer, service, offer=offer, text=generate)
    if body.stream:
        job = lambda sink: generate(prompt, config, field, adapter=body.model, stream=sink)  # noqa: E731
        return await stream_jobs([job], tools.ToolChunks(_ChatChunks(body, service.answered_by(body.model))), response)
    out = await generate(prompt, config, field, adapter=body.model)
    calls = getattr(out, "tool_calls", None)
    message = AssistantMessage(content=None if calls else out.text, tool_calls=calls)
    choice = ChatChoice(index=0, message=message, finish_reason=out.finish_reason)
    return ChatResponse(id=f"chatcmpl-{uuid.uuid4().hex}", created=int(time.time()), model=service.answered_by(body.model),
                        choices=[choice], usage=_usage([out]))


# -- streams (:mod:`.streaming`) ------------------------------------------------------------
class OpenAIChunks(Chunks):
    """An OpenAI route's stream: one ``id`` and ``created`` for every chunk; with
    ``stream_options.include_usage`` a last chunk holds the usage (``choices: []``, and
    ``usage: null`` in every other chunk), then ``data: [DONE]``."""

    def __init__(self, body: OpenAIRequest, model: str, prefix: str):
        self.body, self.model = body, model
        self.id, self.created = f"{prefix}{uuid.uuid4().hex}", int(time.time())
        self.include_usage = body.stream_options is not None and body.stream_options.include_usage

    def tail(self, outs: list) -> list[bytes]:
        usage = [self.chunk([], usage=_usage(outs).model_dump())] if self.include_usage else []
        return [*usage, DONE]

    def chunk(self, choices: list[dict], **more: Any) -> bytes:
        raise NotImplementedError


def stream_jobs(jobs: list, chunks: Chunks, response: Response):
    """:func:`.streaming.streamed`, naming the ignored fields as an answer not streamed does."""
    return streamed(jobs, chunks, {k: v for k, v in response.headers.items() if k == IGNORED_HEADER})


class _CompletionChunks(OpenAIChunks):
    """``/v1/completions``: a ``text_completion`` chunk per piece; each choice's last carries its
    ``finish_reason`` and, with ``logprobs``, every token's log-probs (computed after the text by
    the scoring driver, as for a request not streamed); with ``echo`` the prompt comes first."""

    def __init__(self, body: CompletionRequest, model: str):
        super().__init__(body, model, "cmpl-")

    def chunk(self, choices: list[dict], **more: Any) -> bytes:
        usage = {"usage": None} if self.include_usage else {}
        return sse({"id": self.id, "object": "text_completion", "created": self.created, "model": self.model, "choices": choices,
                    **usage, **more})

    def choice(self, index: int, text: str, logprobs=None, finish: str | None = None) -> bytes:
        return self.chunk([{"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish}])

    def started(self, index: int, event: Started) -> list[bytes]:
        return [self.choice(index, event.prompt_text)] if event.prompt_text else []

    def piece(self, index: int, text: str) -> bytes:
        return self.choice(index, text)

    def finished(self, index: int, out, last: str) -> list[bytes]:
        logprobs = _legacy_logprobs(out).model_dump() if self.body.logprobs is not None else None
        return [self.choice(index, last, logprobs, out.finish_reason)]


class _ChatChunks(OpenAIChunks):
    """``/v1/chat/completions``: ``chat.completion.chunk`` objects: the assistant's role first,
    a ``delta`` per piece, then an empty ``delta`` with the ``finish_reason``."""

    def __init__(self, body: ChatRequest, model: str):
        super().__init__(body, model, "chatcmpl-")

    def chunk(self, choices: list[dict], **more: Any) -> bytes:
        usage = {"usage": None} if self.include_usage else {}
        return sse({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model, "choices": choices,
                    **usage, **more})

    def delta(self, delta: dict, finish: str | None = None) -> bytes:
        return self.chunk([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}])

    def started(self, index: int, event: Started) -> list[bytes]:
        return [self.delta({"role": "assistant", "content": ""})]

    def piece(self, index: int, text: str) -> bytes:
        return self.delta({"content": text})

    def finished(self, index: int, out, last: str) -> list[bytes]:
        return [*([self.delta({"content": last})] if last else []), self.delta({}, out.finish_reason)]


def generator_for(service, shape):
    """How a route generates: the service's batched generation, or the structured answer under
    ``shape`` (not shown to the model: the embedded 135M model answers worse with a JSON schema
    in its prompt, docs/structured.md)."""
    if shape is None:
        return service.generate
    return lambda prompt, config, field, logprobs=None, echo=False, adapter=None, stream=None: structured.answer(
        service, prompt, shape, config, field, adapter, stream)


def config_of(body, max_tokens: int) -> GenerationConfig:
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


@router.get("/v1/models")
async def models(request: Request) -> dict:
    """OpenAI's model list (clients ask for it on start-up): the model served, then each
    adapter a request may name in its ``model`` field."""
    served = request.app.state.service.served
    return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "setllm"} for name in served]}


def name_ignored(body: OpenAIRequest, response: Response) -> None:
    """Name the fields this server ignored in :data:`IGNORED_HEADER` (none: no header), each
    percent-encoded (a JSON name may hold any character; a header only some), comma-separated,
    at most :data:`IGNORED_HEADER_BYTES` (then ``+N more``); a name close to a field this
    route takes (``max_token``) is also a ``setllm-warning``."""
    names = sorted(body.model_extra or ())
    if len(names) > MAX_UNKNOWN_FIELDS:
        raise BadRequest(f"body: {len(names)} unknown fields; at most {MAX_UNKNOWN_FIELDS} per request")
    if not names:
        return
    response.headers[IGNORED_HEADER] = _listed([urllib.parse.quote(n, safe="") for n in names], IGNORED_HEADER_BYTES)
    for name in names:
        if close := meant(name, type(body).model_fields):
            warnings.warn(f"{printable(name)}: not a field of this route, ignored; did you mean {close!r}?", SetLLMWarning, stacklevel=2)


def _listed(names: list[str], limit: int) -> str:
    """``names`` comma-separated, the first that fit in ``limit`` bytes, then ``+N more``."""
    text, shown = "", 0
    for name in names:
        if len(text) + len(name) + 1 > limit - 16:
            return f"{text},+{len(names) - shown} more"
        text, shown = f"{text},{name}" if text else name, shown + 1
    return text


def refuse_unsupported(body, fields: dict) -> None:
    for name, (ok, why) in fields.items():
        value = getattr(body, name)
        if value == ok or (name == "logit_bias" and not value) or (name == "best_of" and value == 1):
            continue
        raise BadRequest(f"{name}: {why}")


def _prompt_list(prompt) -> list:
    """One entry per prompt: markup text (a set prompt) or a tuple of token ids."""
    if isinstance(prompt, str):
        return [as_prompt(prompt)]
    if prompt and isinstance(prompt[0], int):
        return [tuple(prompt)]
    return [tuple(p) if isinstance(p, list) else as_prompt(p) for p in prompt]
