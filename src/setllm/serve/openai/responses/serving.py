"""``/v1/responses``: ``instructions`` and ``input`` read as chat messages (calls and their
results included, :mod:`..tools`), answered as one message item, a structured one under
``text.format``, or a ``function_call`` item; the response object and its stream of named
events, as OpenAI sends them. No stored state: a request carries its whole conversation."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import Response
from fastapi.responses import StreamingResponse

from ...errors import BadRequest
from ...streaming import Started, sse
from .. import structured, tools
from ..protocol import UNSUPPORTED, parts_text
from ..serving import OpenAIChunks, chat_reading, config_of, name_ignored, refuse_unsupported, stream_jobs
from .protocol import TEXT_PARTS, ResponsesRequest, refuse_stored_state


async def create_response(body: ResponsesRequest, service, response: Response) -> dict | StreamingResponse:
    """The response object answering ``body`` (its events, streamed, with ``stream``)."""
    name_ignored(body, response)
    refuse_unsupported(body, UNSUPPORTED)
    refuse_stored_state(body)
    shape = structured.responses_constraint(body)
    prompt, generate = chat_reading(service, body, _messages(body), shape)
    config = config_of(body, body.max_output_tokens or service.config.max_generate_tokens)
    events = tools.ResponseToolEvents(_ResponseEvents(body, service.answered_by(body.model)))
    if body.stream:
        job = lambda sink: generate(prompt, config, "max_output_tokens", adapter=body.model, stream=sink)  # noqa: E731
        return await stream_jobs([job], events, response)
    out = await generate(prompt, config, "max_output_tokens", adapter=body.model)
    return events.response(out)


def _messages(body: ResponsesRequest) -> list[dict]:
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
    if not isinstance(content, list) or any(not isinstance(p, dict) for p in content):
        raise BadRequest(f"input[{i}].content: a string or a list of text parts ({', '.join(TEXT_PARTS)})")
    return {"role": role, "content": parts_text(f"input[{i}].content", content, TEXT_PARTS)}


class _ResponseEvents(OpenAIChunks):
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
