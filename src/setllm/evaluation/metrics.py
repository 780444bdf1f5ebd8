"""Evaluation modes as registered metrics: what each means and which orderings it needs.

Each metric maps one question's recorded answers to a number in [0, 1]; the summary reports
the mean over questions in percent. A question's record lists the orderings tested (the
dataset's order first) and the option picked under each, as an index into the dataset's
choices, so answers under different orderings compare directly.

Where one run stands for every ordering (an invariant variant reading its options as a set,
or a template with no options in the prompt), the record holds that one run and every mode
reads it: random == adversarial == majority == single by construction.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import InputError
from .orderings import Ordering

# How many of a question's orderings a metric needs, from least to most.
PLANS = ("first", "until_failure", "all")


@dataclass(frozen=True)
class QuestionResult:
    """What an evaluation recorded for one question.

    Attributes:
        id: the question id.
        label: index of the correct option in the dataset's order.
        orderings: the orderings tested, in test order (the dataset's order first).
        predictions: the option picked under each ordering (index into the dataset's order).
        plan: which orderings were due (see :data:`PLANS`); ``until_failure`` records stop
            at the first wrong answer.
    """

    id: str
    label: int
    orderings: tuple[Ordering, ...]
    predictions: tuple[int, ...]
    plan: str = "all"

    def __post_init__(self):
        if len(self.orderings) != len(self.predictions) or not self.predictions:
            raise ValueError(f"question {self.id}: {len(self.orderings)} orderings but {len(self.predictions)} predictions")
        if self.plan not in PLANS:
            raise ValueError(f"question {self.id}: unknown plan {self.plan!r}")


@dataclass(frozen=True)
class Metric:
    """A registered metric.

    Attributes:
        name: the name used in ``--modes`` and in ``summary.json``.
        meaning: one line saying what it measures.
        higher_is_better: the direction of improvement.
        needs: the least plan (see :data:`PLANS`) whose records it can be computed from.
        per_question: ``(result, seed) -> value in [0, 1]``; the aggregate is the mean.
    """

    name: str
    meaning: str
    higher_is_better: bool
    needs: str
    per_question: Callable[[QuestionResult, int], float]

    def aggregate(self, results: Sequence[QuestionResult], seed: int = 0) -> float:
        """Mean over questions, in percent."""
        values = self._values(results, seed)
        return 100.0 * sum(values) / len(values)

    def stderr(self, results: Sequence[QuestionResult], seed: int = 0) -> float:
        """Standard error of that mean over questions, in percent (lm-eval's ``acc_stderr``:
        sample standard deviation / sqrt(n); 0 for a single question)."""
        values = self._values(results, seed)
        n = len(values)
        if n < 2:
            return 0.0
        mean = sum(values) / n
        return 100.0 * math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)

    def _values(self, results: Sequence[QuestionResult], seed: int) -> list[float]:
        if not results:
            raise ValueError(f"metric {self.name}: no questions to aggregate")
        for r in results:
            if PLANS.index(r.plan) < PLANS.index(self.needs):
                raise ValueError(f"metric {self.name} needs plan {self.needs!r}, but question {r.id} was run with {r.plan!r}")
        return [self.per_question(r, seed) for r in results]


METRICS: dict[str, Metric] = {}


def register_metric(name: str, meaning: str, higher_is_better: bool, needs: str):
    """Decorator: register ``fn(result, seed) -> float`` as a metric."""
    if needs not in PLANS:
        raise ValueError(f"unknown plan {needs!r}")

    def wrap(fn):
        METRICS[name] = Metric(name, meaning, higher_is_better, needs, fn)
        return fn

    return wrap


def majority_vote(result: QuestionResult, seed: int = 0) -> tuple[int, dict[int, int]]:
    """The most-voted option over the tested orderings, and the vote counts.

    Ties are broken uniformly at random by ``random.Random(f"{seed}:{id}")``: seeded per
    question, so the pick does not depend on which other questions ran, or in what order.
    """
    votes = Counter(result.predictions)
    top = max(votes.values())
    tied = sorted(option for option, count in votes.items() if count == top)
    pick = tied[0] if len(tied) == 1 else random.Random(f"{seed}:{result.id}").choice(tied)
    return pick, dict(sorted(votes.items()))


@register_metric("single", "accuracy with the options in the dataset's order (one run)", True, "first")
def _single(r: QuestionResult, seed: int) -> float:
    return float(r.predictions[0] == r.label)


@register_metric("random", "mean accuracy over the tested orderings (the paper's Rand.)", True, "all")
def _random(r: QuestionResult, seed: int) -> float:
    return sum(p == r.label for p in r.predictions) / len(r.predictions)


@register_metric("adversarial", "correct under every tested ordering (the paper's Adv.)", True, "until_failure")
def _adversarial(r: QuestionResult, seed: int) -> float:
    return float(all(p == r.label for p in r.predictions))


@register_metric("majority", "the most-voted option over the tested orderings is correct (ties: seeded random)", True, "all")
def _majority(r: QuestionResult, seed: int) -> float:
    return float(majority_vote(r, seed)[0] == r.label)


@register_metric("flip", "share of orderings whose answer differs from the majority vote (the paper's flip probability)", False, "all")
def _flip(r: QuestionResult, seed: int) -> float:
    pick = majority_vote(r, seed)[0]
    return sum(p != pick for p in r.predictions) / len(r.predictions)


MODES = ("single", "random", "adversarial", "majority")


def plan_for(modes: Sequence[str]) -> str:
    """The least plan that serves every mode in ``modes``."""
    for m in modes:
        if m not in MODES:
            raise InputError(f"unknown mode {m!r}; choose from: {', '.join(MODES)}")
    return max((METRICS[m].needs for m in modes), key=PLANS.index)


def answer_changes(result: QuestionResult) -> int:
    """Orderings whose answer differs from the answer under the dataset's order."""
    return sum(p != result.predictions[0] for p in result.predictions[1:])
