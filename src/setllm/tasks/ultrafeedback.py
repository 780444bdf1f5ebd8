"""UltraFeedback (Cui et al. 2023) as instruction data: instruction -> chosen response.

The paper's "Ultra" models are first instruction-tuned on it. Local rows (``--data-dir D`` or ``$SETLLM_DATA_DIR``)
are ``{"instruction", "response", "rejected"}``; the hub's binarized set has ``prompt`` and
``chosen`` (a chat list). The prompt is ``Question: <instruction>\\nAnswer:``: the cue the
benchmark template ends with, so both stages teach one prompt/answer format.

Sets in an instruction (:func:`instruction_segments`): a list whose order carries no meaning
becomes a set, one element per item (its marker and newline included, so the elements read in
the given order are the original text). A list is two or more consecutive lines that start
with the same kind of marker:

- bullets (``-``, ``*``, ``•``) and letter labels (``A)``, ``(b)``, ``C.``): options,
  alternatives, facts: a set;
- numbers (``1.``, ``2)``): steps and ranks are ordered, so they stay text, unless the line
  before says ``Options:``/``Choices:`` (then they are labels of options);
- a list stays text when the response refers to its items by place ("the first option",
  "the second sentence", "the last one"): reading it as a set would hide what that means;
- and when no text line comes right before it (a blank line, or the instruction's start): the
  text before the set would end in whitespace ("\\n\\n", or the space of ``Question: ``), which
  tokenizes differently alone than joined (see :mod:`setllm.core.text.templates`).

Everything else stays text. Under the order-sensitive variants a set is read in the given
order, so the causal baseline trains on the same text.
"""

from __future__ import annotations

import re

from ..core.text.prompt import Segment, Set, SetPrompt, template_prompt
from ..io.records import DataError

NAME = "ultrafeedback"


_MARKERS = {  # kind -> an item line's start
    "bullet": re.compile(r"[ \t]*[-*•][ \t]+\S"),
    "letter": re.compile(r"[ \t]*(\([A-Ha-h]\)|[A-Ha-h][).])[ \t]*\S"),  # not "A:": dialogue turns are ordered
    "number": re.compile(r"[ \t]*(\(\d{1,2}\)|\d{1,2}[).])[ \t]+\S"),
}
_CUE = re.compile(r"(?i)\b(options|choices|answer choices|candidates)\s*:?\s*$")
_BY_PLACE = re.compile(r"(?i)\b(first|second|third|fourth|fifth|last|former|latter)\s+(one|option|choice|sentence|statement|item|answer)\b")


def _kind(line: str) -> str | None:
    return next((k for k, pattern in _MARKERS.items() if pattern.match(line)), None)


def _lists(lines: list[str]) -> list[tuple[int, int]]:
    """``(start, end)`` line ranges of the lists to read as sets (see the module docstring)."""
    out, i = [], 0
    while i < len(lines):
        kind = _kind(lines[i])
        j = i
        while j < len(lines) and kind is not None and _kind(lines[j]) == kind:
            j += 1
        before = lines[i - 1].strip() if i > 0 else ""
        if j - i >= 2 and before and (kind != "number" or _CUE.search(before)):
            out.append((i, j))
        i = max(j, i + 1)
    return out


def instruction_segments(instruction: str, response: str = "") -> list[Segment]:
    """``instruction`` as text and sets: every unordered list in it a set (module docstring)."""
    if _BY_PLACE.search(response):
        return [instruction]
    lines = instruction.splitlines(keepends=True)
    segments: list[Segment] = []
    at = 0
    for start, end in _lists(lines):
        segments += ["".join(lines[at:start]), Set(lines[start:end])]
        at = end
    segments.append("".join(lines[at:]))
    return segments


def instruction_pair(obj: object, where: str) -> tuple[SetPrompt, str]:
    """``(prompt, response)`` of one row; a malformed row raises :class:`DataError`."""
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    instruction = obj.get("instruction", obj.get("prompt"))
    response = obj.get("response", obj.get("chosen"))
    if isinstance(response, list):  # the hub's chat form: [user, assistant]
        response = response[-1].get("content") if response and isinstance(response[-1], dict) else None
    if not isinstance(instruction, str) or not instruction.strip():
        raise DataError(f"{where}: missing or empty 'instruction'")
    if not isinstance(response, str) or not response.strip():
        raise DataError(f"{where}: missing or empty 'response' (the chosen answer)")
    # Strip: trailing spaces/newlines would tokenize differently on their own (see templates).
    instruction, response = instruction.strip(), response.strip()
    # The newline before "Answer:" goes with the instruction: a list at its end then has
    # every item ending alike.
    return template_prompt(["Question: ", *instruction_segments(instruction + "\n", response), "Answer:"]), response
