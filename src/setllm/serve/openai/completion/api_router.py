"""``POST /v1/completions``: the route, and what its body holds for the document cache (:mod:`...declare`)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from ....core.text.prompt import SetPrompt
from ... import declare
from ...schemas import OPENAI_ERRORS as ERRORS  # OpenAI's error object on its routes
from .protocol import CompletionRequest, CompletionResponse
from .serving import create_completion, prompt_list

router = APIRouter()


@router.post("/v1/completions", response_model=CompletionResponse, responses=ERRORS)
@declare.prompts(lambda d: [p for p in prompt_list(d["prompt"]) if isinstance(p, SetPrompt)])  # token ids hold no set
async def completions(body: CompletionRequest, request: Request, response: Response) -> CompletionResponse | StreamingResponse:
    """OpenAI-compatible text completion (the legacy API, with ``echo`` and ``logprobs``);
    a text prompt may carry setllm markup, token ids are read as plain text. ``stream``:
    server-sent chunks, ``data: [DONE]`` last."""
    return await create_completion(body, request.app.state.service, response)
