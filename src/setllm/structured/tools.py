"""Tool calls decided by scoring, written under a grammar: whether to call one and which,
then the call's arguments under the grammar of that tool's parameters (:mod:`.plan`).

A call is written ``{"name":"<tool>","arguments":{...}}`` (:mod:`.toolset`). Which tool: its name
is a :class:`setllm.structured.plan.Pick` over the names, each scored after ``{"name":``
(order-free as an enum is). Whether to call one (``tool_choice: "auto"``): the call's opening
``{"name":"`` is scored as the answer's beginning, and a call is made where the model gives it
more than half of its probability; ``required`` always calls, a named function calls that one.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..core.forward.values import GenerationConfig
from ..core.tokens.encoding import EncodedPrompt
from .decode import Answer, prefix, run, text_ids
from .plan import Pick, Plan, Text, plan
from .spec import spec
from .toolset import ARGUMENTS, OPENING, Tool, name_of

CALL_SHARE = 0.5  # under "auto", the least probability of the call's opening that makes a call


@dataclass(frozen=True)
class Call:
    """A tool call: the tool's name and its arguments' JSON text (as OpenAI sends them)."""

    name: str
    arguments: str
    answer: Answer


def call(reader, prompt: EncodedPrompt, tools: Sequence[Tool], choice: str, config: GenerationConfig,
         on_call: Callable[[str], None] | None = None, on_piece: Callable[[str], None] | None = None) -> Call | None:
    """The call ``choice`` (``auto``, ``required`` or a tool's name) makes after ``prompt`` (the
    tools shown in it), or None where ``auto`` decides to answer with text. ``on_call(name)``:
    once the tool is chosen; ``on_piece``: each piece of the arguments' text."""
    head = which(reader, prompt, tools, choice, config)
    if head is None:
        return None
    if on_call is not None:
        on_call(name_of(head.text))
    return arguments(reader, prompt, tools, head, config, on_piece)


def which(reader, prompt: EncodedPrompt, tools: Sequence[Tool], choice: str, config: GenerationConfig) -> Answer | None:
    """The call's head, ``{"name":"<tool>"``, or None where ``auto`` decides to answer with text.
    It is written whole (the name is decided by scoring, not cut): :func:`arguments` counts its
    tokens against ``max_new_tokens``."""
    if choice == "auto" and not _calls(reader, prompt):
        return None
    names = [t.name for t in tools] if choice in ("auto", "required") else [choice]
    return run(reader, prompt, Plan((Text(OPENING), _name_step(names)), False), replace(config, max_new_tokens=sys.maxsize))


def arguments(reader, prompt: EncodedPrompt, tools: Sequence[Tool], head: Answer, config: GenerationConfig,
              on_piece: Callable[[str], None] | None = None) -> Call:
    """The call after its ``head``: the arguments under the grammar of that tool's parameters.
    Every token of the call counts against ``max_new_tokens`` (as OpenAI counts a call's): the
    head, ``,"arguments":`` and the closing ``}``; a call they leave no room for is cut there
    (``finish_reason`` ``length``, no arguments)."""
    tool = next(t for t in tools if t.name == name_of(head.text))
    ids, closing = head.token_ids + text_ids(reader, ARGUMENTS), text_ids(reader, "}")
    left = config.max_new_tokens - len(ids) - len(closing)
    if left < 1:
        cut = ids[: config.max_new_tokens]
        return Call(tool.name, "", Answer(reader.tokenizer.decode(cut, skip_special_tokens=True), cut, "length", len(prompt)))
    args = run(reader, prefix(prompt, ids), plan(spec(tool.parameters), reader.exact), replace(config, max_new_tokens=left), on_piece)
    done = args.finish_reason == "stop"  # a call cut short is not closed
    whole = Answer(f"{head.text}{ARGUMENTS}{args.text}{'}' if done else ''}", ids + args.token_ids + (closing if done else []), args.finish_reason, len(prompt))
    return Call(tool.name, args.text, whole)


def _name_step(names: list[str]):
    texts = tuple(sorted(json.dumps(n, ensure_ascii=False) for n in names))
    return Text(texts[0]) if len(texts) == 1 else Pick(texts, "tools.name")


def _calls(reader, prompt: EncodedPrompt) -> bool:
    """Whether the model opens its answer with a call: ``{"name":"`` more likely than not."""
    request = reader.encoded_request(prompt, [text_ids(reader, OPENING + '"')], "tool call")
    [[score]] = reader.score_encoded([request])
    return score.logprob > math.log(CALL_SHARE)
