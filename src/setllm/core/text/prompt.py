"""Set prompts: text segments interleaved with sets of text elements.

A :class:`SetPrompt` is the one internal form. It is built from the Python API
(``["Question: ...", Set(["Paris", "Budapest"]), "\\nAnswer:"]``), from JSON
(``{"prompt": ["Question: ...", {"set": ["Paris", "Budapest"]}, "\\nAnswer:"]}``, see
:func:`from_json`) or from the inline markup (see :func:`parse_markup`).

Validation is strict and every error is a :class:`PromptError` whose message names the
problem and where it is (``prompt[1].set[0]`` for JSON and Python, a character offset for
markup), so a CLI can print it on one line.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Union

from ...errors import InputError, SetLLMWarning


class PromptError(InputError):
    """A set prompt is malformed; the message says what and where."""


class PromptTooLong(PromptError):
    """A prompt, or a prompt and its response, past the model's context (the server answers
    413); raised by the one fit rule, :func:`setllm.core.model.fit.check_fits`."""


@dataclass(frozen=True, init=False)
class Set:
    """An unordered collection of text elements inside a prompt.

    Elements keep the order they were given in (the order-sensitive variants read them in
    that order); duplicates are allowed, they are a multiset.
    """

    elements: tuple[str, ...]

    def __init__(self, elements: Iterable[str]):
        if isinstance(elements, str):
            raise PromptError("Set(...) takes a list of strings, not one string")
        object.__setattr__(self, "elements", tuple(elements))

    def __len__(self) -> int:
        return len(self.elements)

    def __iter__(self) -> Iterator[str]:
        return iter(self.elements)


Segment = Union[str, Set]


@dataclass(frozen=True)
class SetPrompt:
    """A validated prompt: a tuple of text segments (``str``) and :class:`Set` s.

    One-element sets are stored as plain text (they are plain text, by definition),
    neighbouring text is joined and empty text dropped.
    """

    segments: tuple[Segment, ...]

    @property
    def sets(self) -> list[Set]:
        return [s for s in self.segments if isinstance(s, Set)]

    def text(self) -> str:
        """The prompt read in the given order, elements concatenated."""
        return "".join(s if isinstance(s, str) else "".join(s.elements) for s in self.segments)

    def canonical(self) -> SetPrompt:
        """The same prompt with every set's elements sorted.

        Invariant variants give the same output for any element order mathematically, but
        floating-point sums depend on the order; sorting first makes outputs bit-identical.
        """
        return SetPrompt(tuple(Set(sorted(s.elements)) if isinstance(s, Set) else s for s in self.segments))

    def permuted(self, orders: Sequence[Sequence[int]]) -> SetPrompt:
        """Reorder the elements of set ``i`` by ``orders[i]`` (a permutation of its indices)."""
        if len(orders) != len(self.sets):
            raise InputError(f"got {len(orders)} orders for {len(self.sets)} sets")
        it = iter(orders)
        out: list[Segment] = []
        for seg in self.segments:
            if isinstance(seg, Set):
                order = next(it)
                if sorted(order) != list(range(len(seg))):
                    raise InputError(f"{list(order)} is not a permutation of range({len(seg)})")
                seg = Set(seg.elements[i] for i in order)
            out.append(seg)
        return SetPrompt(tuple(out))

    def to_json(self) -> dict[str, Any]:
        return {"prompt": [s if isinstance(s, str) else {"set": list(s.elements)} for s in self.segments]}


PromptLike = Union[SetPrompt, str, Set, Sequence[Any], dict]


def as_prompt(obj: PromptLike, *, warn_markup: bool = True) -> SetPrompt:
    """Validate and convert any accepted prompt form into a :class:`SetPrompt`.

    Accepts a ``SetPrompt``; a string (read as markup, :func:`parse_markup`, as on every
    surface); a sequence of strings (plain text), :class:`Set`, Python ``set``/
    ``frozenset`` (elements then sorted, since a Python set has no stable order) or
    ``{"set": [...]}``; or a JSON-style ``{"prompt": [...]}`` dict. List text that looks like
    markup is read as text, with a warning (``warn_markup=False``: silently, see
    :func:`template_prompt`).
    """
    if isinstance(obj, SetPrompt):
        return obj
    if isinstance(obj, dict):
        if set(obj) - {"prompt", "response"} or "prompt" not in obj:
            raise PromptError(f"a prompt object needs a 'prompt' key, got keys {sorted(obj)}")
        return as_prompt(obj["prompt"], warn_markup=warn_markup)
    if isinstance(obj, str):
        # One rule on every surface (library, CLI, server, lm-eval): a prompt given as one
        # string is setllm markup, `{{a||b}}` making a set (plain text parses as itself).
        return parse_markup(obj)
    if isinstance(obj, Set):
        obj = [obj]
    if not isinstance(obj, Sequence):
        raise PromptError(f"a prompt is a list of text and sets, got {type(obj).__name__}")
    segments = _merge_text([_segment(item, f"prompt[{i}]", warn_markup) for i, item in enumerate(obj)])
    if not segments:
        raise PromptError("the prompt is empty")
    return SetPrompt(tuple(segments))


def template_prompt(segments: Sequence[Any]) -> SetPrompt:
    """A prompt a template builds around the user's text (a question, options, responses): that
    text is text, whatever braces it holds (code does), so no markup warning."""
    return as_prompt(segments, warn_markup=False)


def _merge_text(segments: list[Segment]) -> list[Segment]:
    """Join neighbouring text (a one-element set included): plain text is tokenized as
    one piece, as the model saw it in training; only set boundaries split tokenization."""
    out: list[Segment] = []
    for seg in segments:
        if isinstance(seg, str) and out and isinstance(out[-1], str):
            out[-1] += seg
        elif seg != "":
            out.append(seg)
    return out


def _segment(item: Any, where: str, warn_markup: bool = True) -> Segment:
    if isinstance(item, str):
        if warn_markup and "{{" in item and "}}" in item.split("{{", 1)[1]:
            warnings.warn(f"{where}: text that looks like set markup ({{{{...}}}}) is read as plain text inside a list prompt; "
                          "pass the string alone to read it as markup, or write the set as a Set", SetLLMWarning, stacklevel=4)
        return item
    if isinstance(item, dict):
        if list(item) != ["set"]:
            raise PromptError(f"{where}: a set is written {{\"set\": [...]}}, got keys {sorted(item)}")
        item = item["set"]
        if not isinstance(item, list):
            raise PromptError(f"{where}.set: expected a list of strings, got {type(item).__name__}")
    elif isinstance(item, (set, frozenset)):
        item = sorted(item) if all(isinstance(e, str) for e in item) else list(item)
    elif isinstance(item, Set):
        item = list(item.elements)
    else:
        raise PromptError(f"{where}: expected text or a set, got {type(item).__name__}")
    return _set(item, where)


def _set(elements: list[Any], where: str) -> Segment:
    if not elements:
        raise PromptError(f"{where}: empty set")
    for j, e in enumerate(elements):
        if isinstance(e, (dict, list, set, frozenset, Set)):
            raise PromptError(f"{where}.set[{j}]: nested sets are not supported")
        if not isinstance(e, str):
            raise PromptError(f"{where}.set[{j}]: set elements must be strings, got {type(e).__name__}")
        if e == "":
            raise PromptError(f"{where}.set[{j}]: empty element")
    # A one-element set has nothing to be invariant over: it is plain text.
    return elements[0] if len(elements) == 1 else Set(elements)


def from_json(text: str) -> SetPrompt:
    """Parse a JSON prompt: ``{"prompt": [...]}`` or a bare list.

    >>> from_json('{"prompt": ["Q: ", {"set": ["a", "b"]}, "\\\\nA:"]}').sets[0].elements
    ('a', 'b')
    """
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise PromptError(f"malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    if not isinstance(obj, (dict, list)):
        raise PromptError(f"a JSON prompt is an object {{\"prompt\": [...]}} or a list, got {type(obj).__name__}")
    return as_prompt(obj)


# -- markup ------------------------------------------------------------------------------
# Inline markup for set prompts, for text files and the shell.
#
# Inline markup for set prompts, for text files and the shell.
#
# Grammar (everything else is literal text)::
#
#     {{ a || b || c }}   a set of three elements: "a", "b", "c" (spaces inside are kept)
#     \\n  \\t            newline, tab (handy in a shell argument)
#     \\{  \\}  \\|  \\\\     a literal brace, bar or backslash
#
# Example: ``Question: Capital of France?\\nChoices:\\n{{Paris\\n||Zurich\\n}}Answer:``.
#
# A single ``{``, ``}`` or ``|`` is literal text; only the doubled forms are markup. Sets
# cannot nest. Errors name the character offset (0-based) where the problem starts.

_ESCAPES = {"n": "\n", "t": "\t", "{": "{", "}": "}", "|": "|", "\\": "\\"}


def parse_markup(text: str) -> SetPrompt:
    """Parse inline markup into a :class:`SetPrompt` (see the module docstring)."""
    segments: list[object] = []
    buf: list[str] = []
    elements: list[str] | None = None  # not None while inside {{ ... }}
    set_start = 0
    i = 0
    while i < len(text):
        two = text[i : i + 2]
        if text[i] == "\\":
            buf.append(_escape(text, i))
            i += 2
            continue
        if two == "{{":
            if elements is not None:
                raise PromptError(f"markup offset {i}: nested sets are not supported ('{{{{' inside a set opened at {set_start})")
            segments.append("".join(buf))
            buf, elements, set_start = [], [], i
        elif two == "||":
            if elements is None:
                raise PromptError(f"markup offset {i}: '||' outside a set (escape it as \\|\\|)")
            elements.append(_element(buf, i))
            buf = []
        elif two == "}}":
            if elements is None:
                raise PromptError(f"markup offset {i}: '}}}}' closes no set")
            elements.append(_element(buf, i))
            segments.append({"set": elements})
            buf, elements = [], None
        else:
            buf.append(text[i])
            i += 1
            continue
        i += 2
    if elements is not None:
        raise PromptError(f"markup offset {set_start}: set opened with '{{{{' is never closed")
    segments.append("".join(buf))
    return as_prompt(segments)


def _escape(text: str, i: int) -> str:
    if i + 1 >= len(text):
        raise PromptError(f"markup offset {i}: trailing backslash")
    ch = text[i + 1]
    if ch not in _ESCAPES:
        raise PromptError(f"markup offset {i}: unknown escape '\\{ch}' (known: \\n \\t \\{{ \\}} \\| \\\\)")
    return _ESCAPES[ch]


def _element(buf: list[str], i: int) -> str:
    if not buf:
        raise PromptError(f"markup offset {i}: empty set element")
    return "".join(buf)


def to_markup(prompt: SetPrompt) -> str:
    """Render a prompt back to markup (``parse_markup(to_markup(p)) == p``)."""

    def esc(s: str) -> str:
        s = s.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
        return s.replace("{", "\\{").replace("}", "\\}").replace("|", "\\|")

    return "".join(esc(s) if isinstance(s, str) else "{{" + "||".join(map(esc, s.elements)) + "}}" for s in prompt.segments)
