"""Tools on chat completions: a request's ``tools`` and ``tool_choice`` read
(:mod:`setllm.structured.tools`: the tools shown as one set, the call decided by scoring, its
arguments under the grammar of the tool's parameters), OpenAI's ``tool_calls`` in the answer
and in its stream, and a conversation that holds calls and their results read back as text
the chat template takes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...core.forward.values import GenerationConfig
from ...structured import SchemaError
from ...structured import toolset as calls
from ..errors import BadRequest
from ..streaming import Chunks, Started
from .structured import Out, as_content


@dataclass(frozen=True)
class Offered:
    """The tools a request offers and its ``tool_choice``: ``auto``, ``required``, ``none`` or a tool's name."""

    tools: list[calls.Tool]
    choice: str


def offered(body) -> Offered | None:
    """The request's tools, checked (a 400 naming the field), or None where it offers none."""
    if not body.tools:
        if body.tool_choice not in (None, "none", "auto"):
            raise BadRequest("tool_choice: names a tool, but the request offers no tools")
        return None
    try:
        tools = calls.tools_of(body.tools)
    except SchemaError as e:
        raise BadRequest(str(e)) from None
    choice = body.tool_choice or "auto"
    if isinstance(choice, dict):
        choice = (choice.get("function") or choice).get("name")
        if choice not in [t.name for t in tools]:
            raise BadRequest(f"tool_choice: names {choice!r}, which is not among the tools offered")
    elif choice not in ("auto", "required", "none"):
        raise BadRequest(f"tool_choice: auto, required, none or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got {choice!r}")
    return Offered(tools, choice)


def shown_message(offer: Offered, exact: bool) -> dict:
    """The system message that shows the model the tools, as one set."""
    return {"role": "system", "content": as_content(calls.shown(offer.tools, exact))}


def as_template(messages: list[dict]) -> list[dict]:
    """A conversation as the chat template reads it: content parts joined, an assistant's calls
    written as it writes them, a tool's result as a user turn naming the tool."""
    names = {c.get("id"): (c.get("function") or {}).get("name") for m in messages for c in m.get("tool_calls") or []}
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if m.get("tool_calls"):
            _check_calls(m["tool_calls"])
            # as the call was written (its arguments' text as sent: a call cut short by its tokens too)
            content = "\n".join(f'{calls.OPENING}{json.dumps(c["function"]["name"])}{calls.ARGUMENTS}{c["function"].get("arguments") or "{}"}}}'
                                for c in m["tool_calls"])
        if m["role"] == "tool":
            out.append({"role": "user", "content": f"Result of {names.get(m.get('tool_call_id')) or 'the tool'}: {content or ''}"})
        else:
            out.append({"role": m["role"], "content": content or ""})
    return out


@dataclass(frozen=True)
class CallStarted(Started):
    """A streamed answer that is a call: its id and the tool's name, sent first."""

    call_id: str = ""
    name: str = ""


async def answer(service, prompt, config: GenerationConfig, field: str, adapter: str | None = None, stream: Callable[[Any], None] | None = None,
                 *, offer: Offered, text: Callable) -> Out:
    """A call (``tool_calls`` set, ``finish_reason`` ``tool_calls``), or where ``auto`` answers
    with text, ``text``'s answer (the route's own generation)."""
    call_id = f"call_{uuid.uuid4().hex[:24]}"

    def on_call(name: str) -> None:
        if stream is not None:
            stream(CallStarted("", call_id, name))

    made = None
    if offer.choice != "none":
        service.config.check_new_tokens(config.max_new_tokens, field)
        made = await service.call(lambda lm, enc: lm.call_tool(enc, offer.tools, offer.choice, config, on_call, stream, False), adapter, prompt)
    if made is None:
        return await text(prompt, config, field, adapter=adapter, stream=stream)
    finish = "tool_calls" if made.answer.finish_reason == "stop" else "length"
    return Out(made.arguments, len(made.answer.token_ids), made.answer.prompt_tokens, finish,
               tool_calls=[{"id": call_id, "type": "function", "function": {"name": made.name, "arguments": made.arguments}}])


class ToolChunks(Chunks):
    """A chat stream that may be a call: as ``chat`` streams text, or, after a
    :class:`CallStarted`, OpenAI's ``tool_calls`` deltas: the id and name first, then the
    arguments in pieces, then ``finish_reason: tool_calls``."""

    def __init__(self, chat: Chunks):
        self.chat = chat
        self.calling = False

    def started(self, index: int, event: Started) -> list[bytes]:
        self.calling = isinstance(event, CallStarted)
        role = self.chat.started(index, event)
        if not self.calling:
            return role
        call = {"index": 0, "id": event.call_id, "type": "function", "function": {"name": event.name, "arguments": ""}}
        return [self.chat.delta({"role": "assistant", "content": None, "tool_calls": [call]})]

    def piece(self, index: int, text: str) -> bytes:
        if not self.calling:
            return self.chat.piece(index, text)
        return self.chat.delta({"tool_calls": [{"index": 0, "function": {"arguments": text}}]})

    def finished(self, index: int, out, last: str) -> list[bytes]:
        if not self.calling:
            return self.chat.finished(index, out, last)
        return [*([self.piece(index, last)] if last else []), self.chat.delta({}, out.finish_reason)]

    def failed(self, err) -> bytes:
        return self.chat.failed(err)

    def tail(self, outs: list) -> list[bytes]:
        return self.chat.tail(outs)


# The Responses API's call items, as the chat messages :func:`as_template` reads.
CALL_ITEMS = {
    "function_call": lambda item: {"role": "assistant", "content": None, "tool_calls": [
        {"id": item.get("call_id"), "type": "function", "function": {"name": item.get("name"), "arguments": item.get("arguments")}}]},
    "function_call_output": lambda item: {"role": "tool", "tool_call_id": item.get("call_id"), "content": str(item.get("output", ""))},
}


class ResponseToolEvents(Chunks):
    """The Responses API's answer and stream, which may be a call: as ``events`` (the text
    answer's) writes them, or, after a :class:`CallStarted`, a ``function_call`` item:
    ``response.output_item.added``, ``response.function_call_arguments.delta`` per piece, its
    ``.done``, the item done, then ``response.completed``, as OpenAI sends them."""

    def __init__(self, events):
        self.events = events
        self.call: dict | None = None

    def item(self, call_id: str, name: str, arguments: str, status: str) -> dict:
        return {"id": f"fc_{call_id.removeprefix('call_')}", "type": "function_call", "call_id": call_id, "name": name,
                "arguments": arguments, "status": status}

    def response(self, out) -> dict:
        """The response object: the text answer's, or (a call) its ``function_call`` item."""
        done = self.events.response(out.text, out)
        if getattr(out, "tool_calls", None):
            fn = out.tool_calls[0]
            done["output"] = [self.item(fn["id"], fn["function"]["name"], fn["function"]["arguments"], "completed")]
        return done

    def started(self, index: int, event: Started) -> list[bytes]:
        if not isinstance(event, CallStarted):
            return self.events.started(index, event)
        ev = self.events
        begun = ev.response(None)
        self.call = self.item(event.call_id, event.name, "", "in_progress")
        return [ev.event("response.created", response=begun), ev.event("response.in_progress", response=begun),
                ev.event("response.output_item.added", output_index=0, item=self.call)]

    def piece(self, index: int, text: str) -> bytes:
        if self.call is None:
            return self.events.piece(index, text)
        return self.events.event("response.function_call_arguments.delta", item_id=self.call["id"], output_index=0, delta=text)

    def finished(self, index: int, out, last: str) -> list[bytes]:
        if self.call is None:
            return self.events.finished(index, out, last)
        done = self.response(out)
        ev, item = self.events, done["output"][0]
        return [*([self.piece(index, last)] if last else []),
                ev.event("response.function_call_arguments.done", item_id=item["id"], output_index=0, arguments=item["arguments"]),
                ev.event("response.output_item.done", output_index=0, item=item), ev.event(f"response.{done['status']}", response=done)]

    def failed(self, err) -> bytes:
        return self.events.failed(err)

    def tail(self, outs: list) -> list[bytes]:
        return self.events.tail(outs)


def _check_calls(tool_calls) -> None:
    """An assistant's ``tool_calls`` as OpenAI writes them (each ``{"function": {"name", "arguments"}}``),
    else a 400 naming the call: a client's malformed history is its error, never a 500."""
    for i, c in enumerate(tool_calls):
        function = c.get("function") if isinstance(c, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or \
                not isinstance(function.get("arguments", ""), (str, type(None))):
            raise BadRequest(f"tool_calls[{i}]: a call is {{\"function\": {{\"name\": str, \"arguments\": str}}}}")

