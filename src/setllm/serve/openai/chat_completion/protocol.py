"""``POST /v1/chat/completions``' request and response bodies (messages, tools, ``response_format``)
and the values of its fields not honoured."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from ...schemas import Count, Count1
from ..protocol import UNSUPPORTED, OpenAIRequest, Usage, parts_text


class ContentPart(BaseModel):
    """One of OpenAI's content parts: a text part (``{"type": "text", "text": ...}``) reads as
    its text; any other kind is refused with a 400 naming it (:func:`..protocol.parts_text`)."""

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


CHAT_UNSUPPORTED = {**UNSUPPORTED,
                    "logprobs": (False, "logprobs are not supported on chat; /v1/completions has them"),
                    "top_logprobs": (None, "logprobs are not supported on chat; /v1/completions has them")}
