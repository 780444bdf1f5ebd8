"""``POST /v1/responses``' request body (OpenAI's Responses API, text only) and what of it is not honoured."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, WithJsonSchema

from ...errors import BadRequest
from ...schemas import Count1
from ..protocol import OpenAIRequest

TEXT_PARTS = ("input_text", "output_text", "text")  # the content parts read as text


class ResponsesRequest(OpenAIRequest):
    """``POST /v1/responses`` (OpenAI's Responses API, text only): ``input`` a string or a list
    of messages (``{"role", "content"}``, content a string or ``input_text``/``output_text``
    parts), ``instructions`` a system message before them; read as chat is."""

    input: Annotated[str | list[dict], Field(min_length=1), WithJsonSchema(  # as enforced; one message, not one per branch
        {"anyOf": [{"type": "string", "minLength": 1}, {"type": "array", "items": {"type": "object"}, "minItems": 1}]})]
    instructions: str | None = None
    max_output_tokens: Count1 | None = None
    tools: list | None = None
    tool_choice: Any = None
    text: dict | None = None
    previous_response_id: str | None = None
    conversation: Any = None


def refuse_stored_state(body: ResponsesRequest) -> None:
    """A 400 for the fields that point at a stored response or conversation: none is kept."""
    if body.previous_response_id is not None or body.conversation is not None:
        field = "previous_response_id" if body.previous_response_id is not None else "conversation"
        raise BadRequest(f"{field}: this server keeps no responses; send the whole conversation as input")
