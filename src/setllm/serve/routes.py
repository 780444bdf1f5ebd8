"""The endpoints. Each parses its body (pydantic), asks the :class:`Service`, and shapes
the answer; errors are raised and become ``{"error": ...}`` in :mod:`.app`.

Adding an endpoint: a schema in :mod:`.schemas`, a method on the :class:`Service`, and a
handler here (``/v1/judge`` is the smallest example).
"""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from ..generation import GenerationConfig
from .errors import BadRequest
from .metrics import CONTENT_TYPE
from .schemas import (
    ChooseRequest,
    ChooseResponse,
    CompletionChoice,
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
    ranking, scores = await service_of(request).judge(body.instruction, body.candidates, body.input)
    return JudgeResponse(best=ranking[0], ranking=ranking, scores=scores.logprobs)


@router.post("/v1/generate", response_model=GenerateResponse, responses=ERRORS)
async def generate(body: GenerateRequest, request: Request) -> GenerateResponse:
    """Generate a response to a set prompt."""
    config = GenerationConfig(max_new_tokens=body.max_new_tokens, temperature=body.temperature, top_p=body.top_p, seed=body.seed, stop=body.stop)
    out = await service_of(request).generate(parse_prompt(body.prompt), config)
    return GenerateResponse(text=out.text)


@router.post("/v1/completions", response_model=CompletionResponse, responses=ERRORS)
async def completions(body: CompletionRequest, request: Request) -> CompletionResponse:
    """OpenAI-compatible text completion; the prompt may carry setllm markup."""
    service = service_of(request)
    prompt = parse_prompt(_one_prompt(body))
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    config = GenerationConfig(max_new_tokens=body.max_tokens or 16, temperature=body.temperature, top_p=body.top_p, seed=body.seed, stop=stop)
    out = await service.generate(prompt, config, field="max_tokens")
    return CompletionResponse(
        id=f"cmpl-{uuid.uuid4().hex}", created=int(time.time()), model=service.model_name,
        choices=[CompletionChoice(text=out.text, index=0, finish_reason=out.finish_reason)],
        usage=Usage(prompt_tokens=out.prompt_tokens, completion_tokens=out.n_tokens, total_tokens=out.prompt_tokens + out.n_tokens),
    )


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


UNSUPPORTED = {  # field -> (the one value we honour, why)
    "stream": (False, "streaming is not supported; send stream: false"),
    "n": (1, "only n=1 is supported"),
    "best_of": (None, "best_of is not supported"),
    "echo": (False, "echo is not supported"),
    "logprobs": (None, "logprobs are not supported"),
    "suffix": (None, "suffix is not supported"),
    "presence_penalty": (0.0, "penalties are not supported"),
    "frequency_penalty": (0.0, "penalties are not supported"),
}


def _one_prompt(body: CompletionRequest) -> str:
    for name, (ok, why) in UNSUPPORTED.items():
        value = getattr(body, name)
        if value != ok and not (name == "best_of" and value == 1):
            raise BadRequest(f"{name}: {why}")
    if body.logit_bias:
        raise BadRequest("logit_bias: not supported")
    if isinstance(body.prompt, list):
        if len(body.prompt) != 1:
            raise BadRequest(f"prompt: one prompt per request, got a list of {len(body.prompt)}")
        return body.prompt[0]
    return body.prompt
