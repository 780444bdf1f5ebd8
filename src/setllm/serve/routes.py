"""setllm's own endpoints (``/v1/choose``, ``/v1/score``, ``/v1/judge``, ``/v1/generate``, ``/v1/answer``)
and the server's (``/health``, ``/metrics``); the OpenAI-compatible ones are in :mod:`.openai` (a folder per endpoint family).
Each parses its body (pydantic), asks the :class:`Service`, and shapes the answer; errors
are raised and become ``{"error": ...}`` in :mod:`.app`.

Adding an endpoint: its request and response bodies in :mod:`.schemas`, and its handler here
(``/v1/judge`` is the smallest example) declaring, under its ``@router.post``, what its body
holds for the document cache (:mod:`.declare`: the prompts it is read as, or none): all that
``--replicas`` needs to route it. A method on the :class:`Service` only where the handler asks
the model what no method asks yet (``score`` and ``generate`` queue, batch and bound any prompt).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from .. import verbs
from ..core.forward.values import GenerationConfig
from ..core.text.prompt import as_prompt
from . import declare, openai
from .auth import authorized
from .metrics import CONTENT_TYPE
from .schemas import (
    ERRORS,
    STREAMED,
    AnswerRequest,
    AnswerResponse,
    ChooseRequest,
    ChooseResponse,
    GenerateRequest,
    GenerateResponse,
    JudgeRequest,
    JudgeResponse,
    ScoreRequest,
    ScoreResponse,
)
from .streaming import Chunks, sse, streamed

if TYPE_CHECKING:  # the routes import no torch: the Ray ingress reads their declarations (.declare)
    from .service import Service

router = APIRouter()


def service_of(request: Request) -> Service:
    return request.app.state.service


@router.post("/v1/choose", response_model=ChooseResponse, responses=ERRORS)
@declare.prompts(lambda d: [verbs.choose(d["question"], d["options"], d.get("context")).prompt])  # as Service.choose builds it
async def choose(body: ChooseRequest, request: Request) -> ChooseResponse:
    """Answer a multiple-choice question; the options are read as a set."""
    options, best, scores = await service_of(request).choose(body.question, body.options, body.context, body.adapter, body.variant)
    return ChooseResponse(answer=options[best], index=best, scores=scores.logprobs, **service_of(request).reading(body.adapter, variant=body.variant))


@router.post("/v1/score", response_model=ScoreResponse, responses=ERRORS)
@declare.prompts(lambda d: [as_prompt(d["prompt"])])
async def score(body: ScoreRequest, request: Request) -> ScoreResponse:
    """Log-likelihood of each option as the response to a set prompt."""
    service = service_of(request)
    prompt = as_prompt(body.prompt)
    scores = await service.score(prompt, service.score_options(prompt, body.options), body.adapter, body.variant)
    return ScoreResponse(scores=scores.logprobs, **service.reading(body.adapter, variant=body.variant))


@router.post("/v1/judge", response_model=JudgeResponse, responses=ERRORS)
@declare.no_documents  # a judge's candidates are responses, read after the instruction
async def judge(body: JudgeRequest, request: Request) -> JudgeResponse:
    """Which candidate response is best; no order or label bias (the candidates are a set)."""
    ranking, scores = await service_of(request).judge(body.instruction, body.candidates, body.input, body.readout, body.adapter, body.variant)
    return JudgeResponse(best=ranking[0], ranking=ranking, scores=scores, **service_of(request).reading(body.adapter, "judge", body.variant))


@router.post("/v1/generate", response_model=GenerateResponse, responses={**ERRORS, **STREAMED})
@declare.prompts(lambda d: [as_prompt(d["prompt"])])
async def generate(body: GenerateRequest, request: Request) -> GenerateResponse | StreamingResponse:
    """Generate a response to a set prompt (``stream``: its text as it grows)."""
    service = service_of(request)
    config = GenerationConfig(max_new_tokens=body.max_new_tokens, temperature=body.temperature, top_p=body.top_p, seed=body.seed, stop=body.stop)
    prompt = as_prompt(body.prompt)
    if body.stream:
        job = lambda sink: service.generate(prompt, config, adapter=body.adapter, variant=body.variant, stream=sink)  # noqa: E731
        return await streamed([job], _GenerateChunks(service.reading(body.adapter, variant=body.variant)))
    out = await service.generate(prompt, config, adapter=body.adapter, variant=body.variant)
    return GenerateResponse(text=out.text, **service.reading(body.adapter, variant=body.variant))


class _GenerateChunks(Chunks):
    """``/v1/generate``'s stream: ``{"text": piece}`` per piece, then the route's own answer."""

    def __init__(self, reading: dict):
        self.reading = reading

    def piece(self, index: int, text: str) -> bytes:
        return sse({"text": text})

    def finished(self, index: int, out, last: str) -> list[bytes]:
        return [*([self.piece(index, last)] if last else []), sse(GenerateResponse(text=out.text, **self.reading).model_dump())]


@router.post("/v1/answer", response_model=AnswerResponse, responses=ERRORS)
@declare.prompts(lambda d: [verbs.answer(d["documents"], d["question"]).prompt])  # as Service.answer builds it
async def answer(body: AnswerRequest, request: Request) -> AnswerResponse:
    """Answer a question from documents read as one set (greedy, up to a newline: SetLLM.answer)."""
    service = service_of(request)
    text, model, variant = await service.answer(body.documents, body.question, body.max_new_tokens, body.adapter, body.variant)
    return AnswerResponse(answer=text, **service.reading(body.adapter, model, variant))


@router.head("/health", include_in_schema=False)  # a load balancer's probe; one operation in the schema
@router.get("/health")  # registered first: a 405 here names GET
async def health(request: Request) -> JSONResponse:
    """200 while serving, 503 while shutting down (so a load balancer stops sending). Under
    ``--api-key``, without the key: the status and that a key is needed, nothing of what is served."""
    service = service_of(request)
    body = service.health(full=authorized(request.headers.get("authorization"), service.config.api_key))
    if service.draining:
        return JSONResponse({"error": "server is shutting down", **body}, status_code=503, headers={"Retry-After": "1"})
    return JSONResponse(body)


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> PlainTextResponse:
    service = service_of(request)
    return PlainTextResponse(service.metrics.render(service.gauges()), media_type=CONTENT_TYPE)


# Every API router, as the app serves them (:mod:`.app`) and ``--replicas`` reads their
# declarations (:mod:`.ray.documents`): setllm's own endpoints, then the OpenAI-compatible ones.
ROUTERS = (router, *openai.ROUTERS)
OPENAI_PATHS = openai.PATHS  # their errors are OpenAI's error object (.errors.body)
