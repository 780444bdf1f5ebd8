"""``/v1/chat/completions``: the messages read through the model's chat template (the tools
offered shown before them as one set, :mod:`..tools`), answered as text, as structured output
or as a tool call, in one piece or streamed as ``chat.completion.chunk`` objects."""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import Response
from fastapi.responses import StreamingResponse

from ...streaming import Started, sse
from .. import structured, tools
from ..serving import OpenAIChunks, chat_reading, config_of, name_ignored, refuse_unsupported, stream_jobs, usage_of
from .protocol import CHAT_UNSUPPORTED, AssistantMessage, ChatChoice, ChatRequest, ChatResponse


async def create_chat_completion(body: ChatRequest, service, response: Response) -> ChatResponse | StreamingResponse:
    """The assistant's answer to ``body.messages`` (streamed with ``stream``)."""
    shape = structured.chat_constraint(body)  # before the ignored fields are named: vLLM's are read
    name_ignored(body, response)
    refuse_unsupported(body, CHAT_UNSUPPORTED)
    prompt, generate = chat_reading(service, body, [m.as_text(f"messages[{i}]") for i, m in enumerate(body.messages)], shape)
    field = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    config = config_of(body, body.max_completion_tokens or body.max_tokens or service.config.max_generate_tokens)
    if body.stream:
        job = lambda sink: generate(prompt, config, field, adapter=body.model, stream=sink)  # noqa: E731
        return await stream_jobs([job], tools.ToolChunks(_ChatChunks(body, service.answered_by(body.model))), response)
    out = await generate(prompt, config, field, adapter=body.model)
    calls = getattr(out, "tool_calls", None)
    message = AssistantMessage(content=None if calls else out.text, tool_calls=calls)
    choice = ChatChoice(index=0, message=message, finish_reason=out.finish_reason)
    return ChatResponse(id=f"chatcmpl-{uuid.uuid4().hex}", created=int(time.time()), model=service.answered_by(body.model),
                        choices=[choice], usage=usage_of([out]))


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
