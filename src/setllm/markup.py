"""Inline markup for set prompts, for text files and the shell.

Grammar (everything else is literal text)::

    {{ a || b || c }}   a set of three elements: "a", "b", "c" (spaces inside are kept)
    \\n  \\t            newline, tab (handy in a shell argument)
    \\{  \\}  \\|  \\\\     a literal brace, bar or backslash

Example: ``Question: Capital of France?\\nChoices:\\n{{Paris\\n||Zurich\\n}}Answer:``.

A single ``{``, ``}`` or ``|`` is literal text; only the doubled forms are markup. Sets
cannot nest. Errors name the character offset (0-based) where the problem starts.
"""

from __future__ import annotations

from .prompt import PromptError, SetPrompt, as_prompt

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
