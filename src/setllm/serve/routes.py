"""The endpoints. Each parses its body (pydantic), asks the :class:`Service`, and shapes
the answer; errors are raised and become ``{"error": ...}`` in :mod:`.app`.

Adding an endpoint: a schema in :mod:`.schemas`, a method on the :class:`Service`, and a
handler here (``/v1/judge`` is the smallest example).
"""

from __future__ import annotations

import asyncio
import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from ..generation import GenerationConfig
from .errors import BadRequest
from .metrics import CONTENT_TYPE
from .schemas import (
    ChatChoice,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    ChooseRequest,
    ChooseResponse,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    ErrorResponse,
    GenerateRequest,
    GenerateResponse,
    JudgeRequest,
    JudgeResponse,
    ScoreRequest,
    ScoreResponse,
    Usage,
)
from .service import Service, parse_prompt

router = APIRouter()
ERRORS = {code: {"model": ErrorResponse} for code in (400, 413, 422, 500, 503, 504)}


def service_of(request: Request) -> Service:
    return request.app.state.service


@router.post("/v1/choose", response_model=ChooseResponse, responses=ERRORS)
async def choose(body: ChooseRequest, request: Request) -> ChooseResponse:
    """Answer a multiple-choice question; the options are read as a set."""
    options, best, scores = await service_of(request).choose(body.question, body.options, body.context)
    return ChooseResponse(answer=options[best], index=best, scores=scores.logprobs)


@router.post("/v1/score", response_model=ScoreResponse, responses=ERRORS)
async def score(body: ScoreRequest, request: Request) -> ScoreResponse:
    """Log-likelihood of each option as the response to a set prompt."""
    service = service_of(request)
    prompt = parse_prompt(body.prompt)
    scores = await service.score(prompt, service.score_options(prompt, body.options))
    return ScoreResponse(scores=scores.logprobs)


@router.post("/v1/judge", response_model=JudgeResponse, responses=ERRORS)
async def judge(body: JudgeRequest, request: Request) -> JudgeResponse:
    """Which candidate response is best; no order or label bias (the candidates are a set)."""
    ranking, scores = await service_of(request).judge(body.instruction, body.candidates, body.input, body.readout)
    return JudgeResponse(best=ranking[0], ranking=ranking, scores=scores)


@router.post("/v1/generate", response_model=GenerateResponse, responses=ERRORS)
async def generate(body: GenerateRequest, request: Request) -> GenerateResponse:
    """Generate a response to a set prompt."""
    config = GenerationConfig(max_new_tokens=body.max_new_tokens, temperature=body.temperature, top_p=body.top_p, seed=body.seed, stop=body.stop)
    out = await service_of(request).generate(parse_prompt(body.prompt), config)
    return GenerateResponse(text=out.text)


@router.post("/v1/completions", response_model=CompletionResponse, responses=ERRORS)
async def completions(body: CompletionRequest, request: Request) -> CompletionResponse:
    """OpenAI-compatible text completion (the legacy API, with ``echo`` and ``logprobs``);
    a text prompt may carry setllm markup, token ids are read as plain text."""
    service = service_of(request)
    _refuse_unsupported(body, COMPLETION_UNSUPPORTED)
    if body.max_tokens == 0 and not body.echo:
        raise BadRequest("max_tokens: 0 generates nothing; it is only useful with echo: true")
    prompts = _prompt_list(body.prompt)
    config = _generation_config(body, body.max_tokens or 0) if body.max_tokens != 0 else None
    outs = await asyncio.gather(*(service.generate(p, config, "max_tokens", body.logprobs, body.echo) for p in prompts))
    choices = [CompletionChoice(text=(out.prompt_text if body.echo else "") + out.text, index=i, finish_reason=out.finish_reason,
                                logprobs=_legacy_logprobs(out) if body.logprobs is not None else None) for i, out in enumerate(outs)]
    return CompletionResponse(id=f"cmpl-{uuid.uuid4().hex}", created=int(time.time()), model=service.model_name, choices=choices,
                              usage=_usage(outs))


@router.post("/v1/chat/completions", response_model=ChatResponse, responses=ERRORS)
async def chat_completions(body: ChatRequest, request: Request) -> ChatResponse:
    """OpenAI-compatible chat: the model's chat template around the messages; ``{{a||b}}``
    markup in a message makes a set (the template's own tokens are never inside one)."""
    service = service_of(request)
    _refuse_unsupported(body, CHAT_UNSUPPORTED)
    if body.tools:
        raise BadRequest("tools: not supported")
    if body.response_format and body.response_format.get("type", "text") != "text":
        raise BadRequest("response_format: only {\"type\": \"text\"} is supported")
    prompt = service.chat([m.model_dump() for m in body.messages])
    field = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    config = _generation_config(body, body.max_completion_tokens or body.max_tokens or service.config.max_generate_tokens)
    out = await service.generate(prompt, config, field)
    choice = ChatChoice(index=0, message=ChatMessage(role="assistant", content=out.text), finish_reason=out.finish_reason)
    return ChatResponse(id=f"chatcmpl-{uuid.uuid4().hex}", created=int(time.time()), model=service.model_name, choices=[choice], usage=_usage([out]))


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
    """OpenAI's model list: the one model served (clients ask for it on start-up)."""
    return {"object": "list", "data": [{"id": service_of(request).model_name, "object": "model", "created": 0, "owned_by": "setllm"}]}


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    """200 while serving, 503 while shutting down (so a load balancer stops sending)."""
    service = service_of(request)
    body = service.health()
    if service.draining:
        return JSONResponse({"error": "server is shutting down", **body}, status_code=503, headers={"Retry-After": "1"})
    return JSONResponse(body)


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> PlainTextResponse:
    service = service_of(request)
    return PlainTextResponse(service.metrics.render(service.gauges()), media_type=CONTENT_TYPE)


COMPLETION_UNSUPPORTED = {  # field -> (the one value we honour, why)
    "stream": (False, "streaming is not supported; send stream: false"),
    "n": (1, "only n=1 is supported"),
    "best_of": (None, "best_of is not supported"),
    "suffix": (None, "suffix is not supported"),
    "presence_penalty": (0.0, "penalties are not supported"),
    "frequency_penalty": (0.0, "penalties are not supported"),
    "logit_bias": (None, "not supported"),
}
CHAT_UNSUPPORTED = {
    "stream": (False, "streaming is not supported; send stream: false"),
    "n": (1, "only n=1 is supported"),
    "logprobs": (False, "logprobs are not supported on chat; /v1/completions has them"),
    "top_logprobs": (None, "logprobs are not supported on chat; /v1/completions has them"),
    "presence_penalty": (0.0, "penalties are not supported"),
    "frequency_penalty": (0.0, "penalties are not supported"),
    "logit_bias": (None, "not supported"),
}


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
