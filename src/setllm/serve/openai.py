"""The OpenAI-compatible endpoints: ``/v1/completions``, ``/v1/chat/completions``,
``/v1/responses`` (text) and ``/v1/models``, their request and response bodies, their streams
(server-sent events, :mod:`.streaming`), and what of OpenAI's API they honour.

A text prompt may carry setllm markup (``{{a||b}}`` makes a set); token ids are read as plain
text. pydantic resolves the (postponed) annotations in this module's namespace, so every type
named here is importable at module level.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from ..core.prompt import SetPrompt, as_prompt
from ..core.values import GenerationConfig
from . import declare, structured, tools
from .errors import BadRequest
from .schemas import ERRORS, SEED_MAX, stop_form
from .streaming import DONE, Chunks, Started, sse, streamed

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


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` adds a last chunk with the usage (``choices: []``)."""

    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


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
    stream_options: StreamOptions | None = None
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
    """A message; an assistant's may hold ``tool_calls`` (then no content), a ``tool`` message
    the result of the call ``tool_call_id`` names."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict] | None = None
    tool_calls: list[dict] | None = None
    tool_call_id: str | None = None


class ChatRequest(OpenAIRequest):
    """``POST /v1/chat/completions``: ``{{a||b}}`` markup in a message's content makes a set."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = None
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


class ResponsesRequest(OpenAIRequest):
    """``POST /v1/responses`` (OpenAI's Responses API, text only): ``input`` a string or a list
    of messages (``{"role", "content"}``, content a string or ``input_text``/``output_text``
    parts), ``instructions`` a system message before them; read as chat is."""

    input: str | list[dict] = Field(min_length=1)
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    tools: list | None = None
    tool_choice: Any = None
    text: dict | None = None
    previous_response_id: str | None = None
    conversation: Any = None


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
    _name_ignored(body, response)
    _refuse_unsupported(body, COMPLETION_UNSUPPORTED)
    if body.max_tokens == 0 and not body.echo:
        raise BadRequest("max_tokens: 0 generates nothing; it is only useful with echo: true")
    if shape is not None and (body.echo or body.logprobs is not None or body.max_tokens == 0):
        raise BadRequest("structured_outputs: not with echo, logprobs or max_tokens 0")
    prompts = _prompt_list(body.prompt)
    config = _generation_config(body, body.max_tokens or 0) if body.max_tokens != 0 else None
    generate = _generation(service, shape)
    if body.stream:
        jobs = [lambda sink, p=p: generate(p, config, "max_tokens", body.logprobs, body.echo, body.model, stream=sink) for p in prompts]
        return await _streamed(jobs, _CompletionChunks(body, service.answered_by(body.model)), response)
    outs = await asyncio.gather(*(generate(p, config, "max_tokens", body.logprobs, body.echo, body.model) for p in prompts))
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
    _name_ignored(body, response)
    _refuse_unsupported(body, CHAT_UNSUPPORTED)
    offer = tools.offered(body)
    shown = [tools.shown_message(offer, service.lm.exact)] if offer is not None else []
    prompt = service.chat([*shown, *tools.as_template([m.model_dump() for m in body.messages])], body.model)
    field = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    config = _generation_config(body, body.max_completion_tokens or body.max_tokens or service.config.max_generate_tokens)
    generate = _generation(service, shape)
    if offer is not None:  # a call, or (auto, none) the text answer
        generate = functools.partial(tools.answer, service, offer=offer, text=generate)
    if body.stream:
        job = lambda sink: generate(prompt, config, field, adapter=body.model, stream=sink)  # noqa: E731
        return await _streamed([job], tools.ToolChunks(_ChatChunks(body, service.answered_by(body.model))), response)
    out = await generate(prompt, config, field, adapter=body.model)
    calls = getattr(out, "tool_calls", None)
    message = AssistantMessage(content=None if calls else out.text, tool_calls=calls)
    choice = ChatChoice(index=0, message=message, finish_reason=out.finish_reason)
    return ChatResponse(id=f"chatcmpl-{uuid.uuid4().hex}", created=int(time.time()), model=service.answered_by(body.model),
                        choices=[choice], usage=_usage([out]))


# -- streams (:mod:`.streaming`) ------------------------------------------------------------
class _Chunks(Chunks):
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


def _streamed(jobs: list, chunks: Chunks, response: Response):
    """:func:`.streaming.streamed`, naming the ignored fields as an answer not streamed does."""
    return streamed(jobs, chunks, {k: v for k, v in response.headers.items() if k == IGNORED_HEADER})


class _CompletionChunks(_Chunks):
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


class _ChatChunks(_Chunks):
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


def _generation(service, shape):
    """How a route generates: the service's batched generation, or the structured answer under
    ``shape`` (not shown to the model: the embedded 135M model answers worse with a JSON schema
    in its prompt, docs/structured.md)."""
    if shape is None:
        return service.generate
    return lambda prompt, config, field, logprobs=None, echo=False, adapter=None, stream=None: structured.answer(
        service, prompt, shape, config, field, adapter, stream)


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


@router.post("/v1/responses", response_model=None, responses=ERRORS)
@declare.no_documents  # its input is text, no set
async def responses(body: ResponsesRequest, request: Request, response: Response) -> dict | StreamingResponse:
    """OpenAI's Responses API for text: one assistant message answers ``input`` (a string, or
    messages) after ``instructions``; ``stream``: OpenAI's events, ``response.completed`` (or
    ``response.incomplete`` when ``max_output_tokens`` ran out) last; ``tools``: a
    ``function_call`` item (:mod:`.tools`). No stored state."""
    service = request.app.state.service
    _name_ignored(body, response)
    _refuse_unsupported(body, UNSUPPORTED)
    _refuse_unsupported_responses(body)
    shape = structured.responses_constraint(body)
    offer = tools.offered(body)
    shown = [tools.shown_message(offer, service.lm.exact)] if offer is not None else []
    prompt = service.chat([*shown, *tools.as_template(_responses_messages(body))], body.model)
    config = _generation_config(body, body.max_output_tokens or service.config.max_generate_tokens)
    events = tools.ResponseToolEvents(_ResponseEvents(body, service.answered_by(body.model)))
    generate = _generation(service, shape)
    if offer is not None:  # a call, or (auto, none) the text answer
        generate = functools.partial(tools.answer, service, offer=offer, text=generate)
    if body.stream:
        job = lambda sink: generate(prompt, config, "max_output_tokens", adapter=body.model, stream=sink)  # noqa: E731
        return await _streamed([job], events, response)
    out = await generate(prompt, config, "max_output_tokens", adapter=body.model)
    return events.response(out)


def _refuse_unsupported_responses(body: ResponsesRequest) -> None:
    if body.previous_response_id is not None or body.conversation is not None:
        field = "previous_response_id" if body.previous_response_id is not None else "conversation"
        raise BadRequest(f"{field}: this server keeps no responses; send the whole conversation as input")


def _responses_messages(body: ResponsesRequest) -> list[dict]:
    """``instructions`` and ``input`` as chat messages (the Responses API's text items)."""
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    if isinstance(body.input, str):
        return [*system, {"role": "user", "content": body.input}]
    return [*system, *(_input_message(i, item) for i, item in enumerate(body.input))]


def _input_message(i: int, item: dict) -> dict:
    kind, role, content = item.get("type", "message"), item.get("role"), item.get("content")
    if kind in tools.CALL_ITEMS:
        return tools.CALL_ITEMS[kind](item)
    if kind != "message" or role not in ("user", "assistant", "system", "developer"):
        raise BadRequest(f"input[{i}]: only text messages (role user, assistant, system or developer) are supported, "
                         f"got {'type ' + repr(kind) if kind != 'message' else 'role ' + repr(role)}")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list) or any(not isinstance(p, dict) or p.get("type") not in TEXT_PARTS for p in content):
        raise BadRequest(f"input[{i}].content: a string or a list of text parts ({', '.join(TEXT_PARTS)})")
    return {"role": role, "content": "".join(str(p.get("text", "")) for p in content)}


TEXT_PARTS = ("input_text", "output_text", "text")


class _ResponseEvents(_Chunks):
    """The Responses API's objects and stream: ``response.created`` and ``in_progress``, the
    message item and its text part added, ``response.output_text.delta`` per piece, the text,
    part and item done, then ``response.completed`` (``response.incomplete`` when the tokens ran
    out), each an ``event:`` of its own with a ``sequence_number``, as OpenAI sends them."""

    def __init__(self, body: ResponsesRequest, model: str):
        super().__init__(body, model, "resp_")
        self.item_id, self.sequence = f"msg_{uuid.uuid4().hex}", 0

    def event(self, kind: str, **data: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.sequence, **data}
        self.sequence += 1
        return sse(data, event=kind)

    def response(self, text: str | None, out=None) -> dict:
        """The response object: in progress (``text`` None), else completed or incomplete."""
        status = "in_progress" if text is None else "incomplete" if out.finish_reason == "length" else "completed"
        output = [] if text is None else [self.message(text, "completed" if status == "completed" else "incomplete")]
        usage = None if out is None else {"input_tokens": out.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
                                          "output_tokens": out.n_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                                          "total_tokens": out.prompt_tokens + out.n_tokens}
        b = self.body
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status, "model": self.model,
                "output": output, "usage": usage, "error": None,
                "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
                "instructions": b.instructions, "max_output_tokens": b.max_output_tokens, "parallel_tool_calls": False,
                "temperature": b.temperature, "top_p": b.top_p, "tool_choice": b.tool_choice or "auto", "tools": [],
                "text": b.text or {"format": {"type": "text"}}, "truncation": "disabled", "store": False, "metadata": {}, "reasoning": None,
                "previous_response_id": None}

    def message(self, text: str, status: str) -> dict:
        return {"id": self.item_id, "type": "message", "role": "assistant", "status": status, "content": [self.part(text)]}

    @staticmethod
    def part(text: str) -> dict:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def at(self) -> dict:
        return {"item_id": self.item_id, "output_index": 0, "content_index": 0}

    def started(self, index: int, event: Started) -> list[bytes]:
        begun = self.response(None)
        return [self.event("response.created", response=begun), self.event("response.in_progress", response=begun),
                self.event("response.output_item.added", output_index=0,
                           item={"id": self.item_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}),
                self.event("response.content_part.added", **self.at(), part=self.part(""))]

    def piece(self, index: int, text: str) -> bytes:
        return self.event("response.output_text.delta", **self.at(), delta=text, logprobs=[])

    def finished(self, index: int, out, last: str) -> list[bytes]:
        done = self.response(out.text, out)
        return [*([self.piece(index, last)] if last else []),
                self.event("response.output_text.done", **self.at(), text=out.text, logprobs=[]),
                self.event("response.content_part.done", **self.at(), part=self.part(out.text)),
                self.event("response.output_item.done", output_index=0, item=done["output"][0]),
                self.event(f"response.{done['status']}", response=done)]

    def failed(self, err) -> bytes:
        return self.event("error", code=str(err.status), message=err.message, param=None)

    def tail(self, outs: list) -> list[bytes]:
        return []  # the Responses API ends with its terminal event, no [DONE]


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
        return [as_prompt(prompt)]
    if prompt and isinstance(prompt[0], int):
        return [tuple(prompt)]
    return [tuple(p) if isinstance(p, list) else as_prompt(p) for p in prompt]
