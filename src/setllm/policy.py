"""Decision policy: which option or candidate wins, and what counts as a valid question.

Shared by every surface (the library, the CLI, the server, evaluation), so an answer cannot
depend on which door it came through: the same checks, the same tie rule.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from .core.forward.values import OptionScore
from .errors import InputError, SetLLMWarning


@dataclass(frozen=True)
class Choice:
    """The answer to one multiple-choice question."""

    answer: str
    index: int
    scores: list[OptionScore]


@dataclass(frozen=True)
class Verdict:
    """A judge's verdict over k candidates, indices into the caller's list.

    Attributes:
        best: the best candidate (None: a tie within ``tie_margin``).
        ranking: all candidates, best first.
        scores: one log-likelihood per candidate, in the caller's order.
    """

    best: int | None
    ranking: list[int]
    scores: list[float]


def check_candidates(candidates, where: str = "candidates") -> list[str]:
    """Judge candidates: at least two texts; outer whitespace is not part of a response. An
    empty response is a real candidate (scored as EOS alone)."""
    out = [c.strip() for c in option_list(candidates, where, empty=True)]
    if len(out) < 2:
        raise InputError(f"a judge needs at least two candidates, got {len(out)}")
    return out


def ranking(scores: Sequence[float], texts: Sequence[str]) -> list[int]:
    """Indices of the options (or candidates), best first. Equal scores go by text: the tie
    rule of every surface (library, CLI, server, eval), so that not even a tie (they happen in
    bf16) can make the answer depend on the order the options came in."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], texts[i]))


def verdict(scores: list[float], candidates: Sequence[str], tie_margin: float = 0.0) -> Verdict:
    """The judge's verdict on ``scores`` (one per candidate, the caller's order)."""
    order = ranking(scores, candidates)
    tied = len(scores) > 1 and scores[order[0]] - scores[order[1]] <= tie_margin and tie_margin > 0
    return Verdict(None if tied else order[0], order, scores)


def pick(scores: Sequence[OptionScore], normalize: bool = False) -> Choice:
    """The best-scoring option (equal bests: see :func:`ranking`)."""
    best = ranking([s.mean_logprob if normalize else s.logprob for s in scores], [s.text for s in scores])[0]
    return Choice(scores[best].text, best, list(scores))


def check_choices(options, where: str = "options") -> list[str]:
    """The options of a multiple-choice question: at least two, non-empty, distinct. Outer
    whitespace is stripped (with a warning): the template puts each option on its own line,
    and a trailing space would tokenize differently there than in the response."""
    options = option_list(options, where)
    if len(options) < 2:
        raise InputError(f"{where}: a question needs at least two options, got {len(options)}")
    stripped = [o.strip() for o in options]
    if stripped != options:
        warnings.warn(f"{where}: leading/trailing whitespace stripped from {sum(a != b for a, b in zip(stripped, options))} option(s)",
                      SetLLMWarning, stacklevel=4)  # the user's call: choose -> verbs.choose -> here
    dupes = sorted({o for o in stripped if stripped.count(o) > 1})
    if dupes:
        raise InputError(f"{where}: duplicate option {dupes[0]!r}; options must be distinct")
    return stripped


def check_text(value, where: str) -> str:
    """A question or an instruction: non-empty text (checked at the door, in one line)."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where} must be non-empty text, got {value!r}")
    return value


def option_list(options, where: str, empty: bool = False) -> list[str]:
    """Options as a list of strings (``empty``: blank text allowed); a bare string would be
    read one character per option."""
    if isinstance(options, str) or not isinstance(options, Sequence):
        raise InputError(f"{where} must be a list of strings, got {type(options).__name__}")
    bad = [i for i, o in enumerate(options) if not isinstance(o, str) or not (empty or o.strip())]
    if bad:
        raise InputError(f"{where}[{bad[0]}] must be {'text' if empty else 'non-empty text'}, got {options[bad[0]]!r}")
    return list(options)
