"""How a judge turns the model's probabilities into one score per candidate.

A readout is a list of things to score (prompts and their options) and a rule combining the
scores into one number per candidate. Every readout here is symmetric in the candidates
(each candidate gets the same computation, the candidates enter as one set) and label-free
(no trained head, no names like "A"/"B"), so under an order-invariant variant the verdict
cannot depend on the order the candidates came in. The library, ``setllm judge``,
``POST /v1/judge`` and ``setllm eval --dataset judge`` all read through :data:`READOUTS`.

- ``likelihood``: each candidate's summed log-likelihood as the continuation of the judge
  prompt (which already holds every candidate: it measures, in part, how easy a response is
  to copy, and short responses are easier).
- ``mean``: the same per token (length-normalised).
- ``pmi``: ``likelihood`` minus the candidate's log-likelihood after the instruction alone,
  with no candidates shown: what seeing the set of candidates adds to this one (pointwise
  mutual information), which discounts how likely a text is anyway.
- ``verdict``: after the set, each candidate is named again in a question ("Is this the best
  response?"); the score is log p(Yes) - log p(No). One prompt per candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .core.forward.values import OptionScore
from .core.text.prompt import SetPrompt, template_prompt
from .errors import InputError
from .loading.record import READOUT_NAMES
from .tasks.judge import judge_head, judge_prompt


@dataclass(frozen=True)
class JudgeRow:
    instruction: str
    candidates: tuple[str, ...]
    input: str | None = None


Asks = list[tuple[SetPrompt, list[str]]]  # what to score: prompts and their options
Scorer = Callable[[list[SetPrompt], list[list[str]]], list[list[OptionScore]]]


@dataclass(frozen=True)
class Readout:
    """``asks(row)``: what to score; ``combine(row, scores)``: one score per candidate from
    the scores of those asks (in their order)."""

    name: str
    asks: Callable[[JudgeRow], Asks]
    combine: Callable[[JudgeRow, list[list[OptionScore]]], list[float]]


YES, NO = "Yes", "No"
QUESTION = "\nIs this the best response? Answer Yes or No.\nAnswer:"


def alone_prompt(row: JudgeRow) -> SetPrompt:
    """The instruction with no candidates shown: the reference of ``pmi``."""
    return template_prompt([judge_head(row.instruction, row.input) + "Response:"])


def verdict_prompt(row: JudgeRow, i: int) -> SetPrompt:
    """The judge prompt's set, then candidate ``i`` named again in a yes/no question."""
    base = judge_prompt(row.instruction, list(row.candidates), row.input)
    text = row.candidates[i].strip()
    return template_prompt([*base.segments[:-1], ("Candidate: " + text if text else "Candidate:") + QUESTION])


def _judge(row: JudgeRow) -> Asks:
    return [(judge_prompt(row.instruction, list(row.candidates), row.input), list(row.candidates))]


READOUTS: dict[str, Readout] = {
    r.name: r
    for r in (
        Readout("likelihood", _judge, lambda row, s: [x.logprob for x in s[0]]),
        Readout("mean", _judge, lambda row, s: [x.mean_logprob for x in s[0]]),
        Readout("pmi", lambda row: [*_judge(row), (alone_prompt(row), list(row.candidates))],
                lambda row, s: [a.logprob - b.logprob for a, b in zip(s[0], s[1])]),
        Readout("verdict", lambda row: [(verdict_prompt(row, i), [YES, NO]) for i in range(len(row.candidates))],
                lambda row, s: [yes.logprob - no.logprob for yes, no in s]),
    )
}
assert tuple(READOUTS) == READOUT_NAMES, "setllm.loading.record.READOUT_NAMES lists every readout"
DEFAULT_READOUT = "likelihood"
# Readouts that score the judge prompt alone, so any judge template's own prompt reads them
# (``setllm eval --template held-out``); the others build prompts of their own on the trained one.
PROMPT_READOUTS = tuple(name for name, r in READOUTS.items() if r.asks is _judge)


def trained_readout(info) -> str:
    """The readout a judge reads with unless told: the one its adapter (or model folder)
    records in ``setllm.json`` (``info``: its :class:`setllm.loading.AdapterInfo`), else
    :data:`DEFAULT_READOUT`. Known before any model loads."""
    return info.readout or DEFAULT_READOUT


def get_readout(name: str) -> Readout:
    if name not in READOUTS:
        raise InputError(f"unknown readout {name!r}; choose one of: {', '.join(READOUTS)}")
    return READOUTS[name]


def candidate_scores(score: Scorer, rows: Sequence[JudgeRow], readout: str = DEFAULT_READOUT) -> list[list[float]]:
    """The judge's ask -> score -> combine: one score per candidate of every row, higher is
    better. ``score(prompts, options)`` scores every ask of every row at once (the library
    passes :meth:`setllm.SetLLM.score`; the server its engine's, on the model thread)."""
    r = get_readout(readout)
    asks = [r.asks(row) for row in rows]
    flat = [a for row_asks in asks for a in row_asks]
    scores = score([p for p, _ in flat], [o for _, o in flat]) if flat else []
    out, at = [], 0
    for row, row_asks in zip(rows, asks):
        out.append(r.combine(row, scores[at : at + len(row_asks)]))
        at += len(row_asks)
    return out
