"""``POST /v1/chat/completions``: the route, and what its body holds for the document cache (:mod:`...declare`)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from ... import declare
from ...schemas import OPENAI_ERRORS as ERRORS  # OpenAI's error object on its routes
from .protocol import ChatRequest, ChatResponse
from .serving import create_chat_completion

router = APIRouter()


@router.post("/v1/chat/completions", response_model=ChatResponse, responses=ERRORS)
@declare.no_documents  # chat messages are text, no set
async def chat_completions(body: ChatRequest, request: Request, response: Response) -> ChatResponse | StreamingResponse:
    """OpenAI-compatible chat: the model's chat template around the messages; ``{{a||b}}``
    markup in a message makes a set (the template's own tokens are never inside one).
    ``stream``: server-sent ``chat.completion.chunk`` objects, ``data: [DONE]`` last."""
    return await create_chat_completion(body, request.app.state.service, response)
