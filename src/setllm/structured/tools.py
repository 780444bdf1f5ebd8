"""Tools read as a set: a request's tool definitions shown to the model as one set (their order
is not read), whether to call one and which decided by scoring, and the call's arguments
generated under the grammar of that tool's parameters (:mod:`.plan`).

A call is written as ``{"name":"<tool>","arguments":{...}}``. Which tool: its name is a
:class:`setllm.structured.plan.Pick` over the names, each scored after ``{"name":`` (order-free
as an enum is). Whether to call one (``tool_choice: "auto"``): the call's opening
``{"name":"`` is scored as the answer's beginning, and a call is made where the model gives it
more than half of its probability; ``required`` always calls, a named function calls that one,
``none`` never does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..core.encoding import EncodedPrompt
from ..core.prompt import Segment, Set
from ..core.values import GenerationConfig
from .decode import Answer, prefix, run, text_ids
from .plan import Pick, Plan, Text, plan
from .spec import SchemaError, spec

OPENING = '{"name":'
ARGUMENTS = ',"arguments":'
CALL_SHARE = 0.5  # under "auto", the least probability of the call's opening that makes a call


@dataclass(frozen=True)
class Tool:
    """One function a request offers: its name, what it does, the JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict


@dataclass(frozen=True)
class Call:
    """A tool call: the tool's name and its arguments' JSON text (as OpenAI sends them)."""

    name: str
    arguments: str
    answer: Answer


def tools_of(items: Sequence[Any], where: str = "tools") -> list[Tool]:
    """OpenAI's ``tools`` (``{"type": "function", "function": {...}}`` on chat, the function's
    fields flat on the Responses API), checked: distinct names, a JSON schema each."""
    if not isinstance(items, (list, tuple)) or not items:
        raise SchemaError(f"{where}: a non-empty list of tools")
    out = []
    for i, item in enumerate(items):
        fn = item.get("function", item) if isinstance(item, dict) else None
        if not isinstance(item, dict) or item.get("type", "function") != "function" or not isinstance(fn, dict):
            raise SchemaError(f"{where}[{i}]: only function tools are supported ({{\"type\": \"function\", ...}})")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise SchemaError(f"{where}[{i}]: a function needs a name")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        spec(params, where=f"{where}[{i}].parameters")  # checked now, compiled when called
        out.append(Tool(name, str(fn.get("description") or ""), params))
    names = [t.name for t in out]
    if len(set(names)) != len(names):
        raise SchemaError(f"{where}: two tools are named {next(n for n in names if names.count(n) > 1)!r}")
    return out


def shown(tools: Sequence[Tool], exact: bool) -> list[Segment]:
    """The tools as the model reads them: one set of their definitions, one per line."""
    lines = [json.dumps({"name": t.name, "description": t.description, "parameters": t.parameters}, ensure_ascii=False, sort_keys=exact) + "\n"
             for t in tools]
    return ["You can call these tools:\n", Set(lines) if len(lines) > 1 else lines[0],
            'To call one, answer with JSON only: {"name": <the tool\'s name>, "arguments": <its arguments>}.\n']


def call(reader, prompt: EncodedPrompt, tools: Sequence[Tool], choice: str, config: GenerationConfig,
         on_piece: Callable[[str], None] | None = None) -> Call | None:
    """The call ``choice`` (``auto``, ``required`` or a tool's name) makes after ``prompt`` (the
    tools shown in it), or None where ``auto`` decides to answer with text; ``on_piece``: each
    piece of the arguments' text."""
    head = which(reader, prompt, tools, choice, config)
    return None if head is None else arguments(reader, prompt, tools, head, config, on_piece)


def which(reader, prompt: EncodedPrompt, tools: Sequence[Tool], choice: str, config: GenerationConfig) -> Answer | None:
    """The call's head, ``{"name":"<tool>"``, or None where ``auto`` decides to answer with text."""
    if choice == "auto" and not _calls(reader, prompt):
        return None
    names = [t.name for t in tools] if choice in ("auto", "required") else [choice]
    return run(reader, prompt, Plan((Text(OPENING), _name_step(names)), False), config)


def name_of(head: Answer) -> str:
    return json.loads(head.text[len(OPENING):])


def arguments(reader, prompt: EncodedPrompt, tools: Sequence[Tool], head: Answer, config: GenerationConfig,
              on_piece: Callable[[str], None] | None = None) -> Call:
    """The call after its ``head``: the arguments under the grammar of that tool's parameters."""
    tool = next(t for t in tools if t.name == name_of(head))
    ids = head.token_ids + text_ids(reader, ARGUMENTS)
    left = replace(config, max_new_tokens=max(config.max_new_tokens - len(ids), 1))
    args = run(reader, prefix(prompt, ids), plan(spec(tool.parameters), reader.exact), left, on_piece)
    whole = Answer(f"{head.text}{ARGUMENTS}{args.text}}}", ids + args.token_ids + text_ids(reader, "}"), args.finish_reason, len(prompt))
    return Call(tool.name, args.text, whole)


def _name_step(names: list[str]):
    texts = tuple(sorted(json.dumps(n, ensure_ascii=False) for n in names))
    return Text(texts[0]) if len(texts) == 1 else Pick(texts, "tools.name")


def _calls(reader, prompt: EncodedPrompt) -> bool:
    """Whether the model opens its answer with a call: ``{"name":"`` more likely than not."""
    request = reader.encoded_request(prompt, [text_ids(reader, OPENING + '"')], "tool call")
    [[score]] = reader.score_encoded([request])
    return score.logprob > math.log(CALL_SHARE)
