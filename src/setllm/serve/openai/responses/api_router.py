"""``POST /v1/responses``: the route, and what its body holds for the document cache (:mod:`...declare`)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from ... import declare
from ...schemas import OPENAI_ERRORS as ERRORS  # OpenAI's error object on its routes
from .protocol import ResponsesRequest
from .serving import create_response

router = APIRouter()


@router.post("/v1/responses", response_model=None, responses=ERRORS)
@declare.no_documents  # its input is text, no set
async def responses(body: ResponsesRequest, request: Request, response: Response) -> dict | StreamingResponse:
    """OpenAI's Responses API for text: one assistant message answers ``input`` (a string, or
    messages) after ``instructions``; ``stream``: OpenAI's events, ``response.completed`` (or
    ``response.incomplete`` when ``max_output_tokens`` ran out) last; ``tools``: a
    ``function_call`` item (:mod:`..tools`). No stored state."""
    return await create_response(body, request.app.state.service, response)
