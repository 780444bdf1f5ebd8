"""Tools read as a set, torch-free: a request's tool definitions checked and shown to the model
as one set (their order is not read), and how a call is written. :mod:`.tools` decides and
writes the call.

A call is written as ``{"name":"<tool>","arguments":{...}}``. Which tool: its name is a
:class:`setllm.structured.plan.Pick` over the names, each scored after ``{"name":`` (order-free
as an enum is). Whether to call one (``tool_choice: "auto"``): the call's opening
``{"name":"`` is scored as the answer's beginning, and a call is made where the model gives it
more than half of its probability; ``required`` always calls, a named function calls that one,
``none`` never does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.text.prompt import Segment, Set
from .spec import SchemaError, spec

OPENING = '{"name":'
ARGUMENTS = ',"arguments":'


@dataclass(frozen=True)
class Tool:
    """One function a request offers: its name, what it does, the JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict


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


def name_of(head_text: str) -> str:
    """The tool's name in a call's head, ``{"name":"<tool>"``."""
    return json.loads(head_text[len(OPENING):])
