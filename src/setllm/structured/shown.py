"""What the model is shown of a constraint, as OpenAI's models are shown a schema: one line of
instruction and the schema's JSON, with every finite list (an ``enum``, a ``choice`` list, the
tools of a request) as a set, so that the order a request lists them in is not read. Under exact
mode the schema's keys are written sorted, so the properties' order is not read either."""

from __future__ import annotations

import json
import re
from typing import Any

from ..core.text.prompt import Segment, Set, SetPrompt, template_prompt
from .spec import Spec

_HOLE = "\ue002{}\ue003"  # private-use characters: a placeholder no schema holds
_HOLES = re.compile('"\ue002(\\d+)\ue003"')


def shown(spec: Spec, exact: bool) -> list[Segment]:
    """The constraint as the model reads it, ending with a newline."""
    if spec.kind == "choice":
        return ["Answer with one of these, exactly:\n", Set([f"{c}\n" for c in spec.value])]
    if spec.kind == "regex":
        return [f"Answer with text matching the regular expression {spec.value}\n"]
    if spec.kind == "grammar":
        return [f"Answer in this grammar (Lark):\n{spec.value}\n"]
    return ["Answer with JSON that follows this schema:\n", *json_segments(spec.value, exact), "\n"]


def json_segments(value: Any, exact: bool) -> list[Segment]:
    """``value`` as JSON text, each ``enum`` list in it a set of its values."""
    lists: list[list] = []
    text = json.dumps(_holed(value, lists), ensure_ascii=False, sort_keys=exact)
    parts = _HOLES.split(text)
    return [Set([json.dumps(v, ensure_ascii=False) + "," for v in lists[int(p)]]) if i % 2 else p
            for i, p in enumerate(parts) if i % 2 or p]


def _holed(node: Any, lists: list[list]) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "enum" and isinstance(v, list) and len(v) > 1:
                out[k] = [_HOLE.format(len(lists))]
                lists.append(v)
            else:
                out[k] = _holed(v, lists)
        return out
    if isinstance(node, list):
        return [_holed(v, lists) for v in node]
    return node


def with_shown(prompt: SetPrompt, spec: Spec, exact: bool) -> SetPrompt:
    """``prompt`` after the constraint shown."""
    return template_prompt([*shown(spec, exact), "\n", *prompt.segments])

