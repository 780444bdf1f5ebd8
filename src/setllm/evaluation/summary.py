"""``summary.json`` from finished prediction rows: accuracy per mode, what each mode alone
would have cost, and the invariance check.

Cost per mode is what that mode alone would have run: each scored ordering carries its
share of its batch's time (batch time / prompts in the batch) and the batch's peak memory;
``single`` counts the first ordering, ``adversarial`` the orderings up to the first failure,
``random`` and ``majority`` all of them.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from datetime import datetime, timezone

from .. import __version__
from ..tasks import get_task
from .config import EvalConfig
from .metrics import METRICS, QuestionResult, answer_changes, plan_for
from .resources import memory_measure


def summarize(rows: Sequence[dict], cfg: EvalConfig, settings: dict, lm=None) -> dict:
    """``summary.json`` from finished rows (one per question, in evaluation order)."""
    results = [to_result(r) for r in rows]
    modes = cfg.mode_list
    multi = [r for r in rows if len(r["predictions"]) > 1]
    summary = {
        "dataset": settings["dataset"], "split": settings["split"], "n": len(rows), "variant": settings["variant"],
        "template": settings["template"], "model": settings["model"], "adapter": settings["adapter"], "label": cfg.label,
        "invariant": settings["invariant"], "modes": modes,
        "accuracy": {m: round(METRICS[m].aggregate(results, cfg.seed), 4) for m in modes},
        "accuracy_stderr": {m: round(METRICS[m].stderr(results, cfg.seed), 4) for m in modes},
        **_mode_costs(rows, modes),
        "one_run_per_question": all(r["one_run"] for r in rows),
        "orderings": {"max": cfg.max_orderings, "choice": cfg.ordering_choice, "seed": cfg.seed,
                      "mean_tested": round(sum(len(r["orderings"]) for r in rows) / len(rows), 3)},
    }
    if multi:
        summary["invariance_flips"] = sum(answer_changes(to_result(r)) for r in multi)
        summary["invariance_runs"] = sum(len(r["predictions"]) - 1 for r in multi)
        summary["max_logprob_diff"] = max(r["max_logprob_diff"] for r in multi)
        summary["invariance_verified"] = cfg.verify_invariance
    if plan_for(modes) == "all" and multi:
        summary["flip_rate"] = round(METRICS["flip"].aggregate(results, cfg.seed), 4)
    if get_task(settings["dataset"]).kind == "judge":
        summary.update(judge_metrics(rows))
    summary["metrics"] = {m.name: {"meaning": m.meaning, "higher_is_better": m.higher_is_better, "unit": "%"}
                          for m in METRICS.values() if m.name in modes or (m.name == "flip" and "flip_rate" in summary)}
    summary.update(memory_measure=memory_measure(lm.model.device) if lm is not None else None, settings=settings,
                   setllm_version=__version__, versions=_versions(), python=platform.python_version(),
                   finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                   ids=[r["id"] for r in rows])  # which rows of predictions.jsonl this summary covers
    return summary


def to_result(row: dict) -> QuestionResult:
    return QuestionResult(row["id"], row["label"], tuple(tuple(o) for o in row["orderings"]), tuple(row["predictions"]), row["plan"])


def _mode_costs(rows: Sequence[dict], modes: Sequence[str]) -> dict:
    """Time, peak memory and runs of what each mode alone would have scored."""
    return {
        "runtime_s": {m: round(sum(sum(r["time_s"][i] for i in _cost(r, m)) for r in rows), 3) for m in modes},
        "peak_memory_mb": {m: max(max(r["peak_mb"][i] for i in _cost(r, m)) for r in rows) for m in modes},
        "runs_per_question": {m: round(sum(len(_cost(r, m)) for r in rows) / len(rows), 3) for m in modes},
    }


def _cost(row: dict, mode: str) -> list[int]:
    """Indices of the orderings ``mode`` alone would have run for this question."""
    n = len(row["predictions"])
    if row["one_run"] or mode == "single":
        return [0]
    if mode == "adversarial":
        wrong = [i for i, p in enumerate(row["predictions"]) if p != row["label"]]
        return list(range(wrong[0] + 1 if wrong else n))
    return list(range(n))


def _versions() -> dict[str, str | None]:
    """The library versions a result depends on (what lm-eval records too)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("torch", "transformers", "peft", "accelerate"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def judge_metrics(rows: Sequence[dict]) -> dict:
    """A judge's numbers over its verdicts in the data's order and reversed (a pair: swapped).

    ``accuracy_swapped``: right with the order reversed (``accuracy.single`` is the data's
    order, ``accuracy.adversarial`` right in both: JudgeBench's both-orders aggregate). ``position_consistency``: share
    of questions whose pick survives the swap. ``first_slot_rate``: share of verdicts (both
    orders) that pick the candidate shown first; 0.5 is unbiased. A question run once (an
    invariant judge) gives the same candidate under both orders by construction: consistent,
    and first in exactly one of the two orders (0.5). All in percent, like the accuracies.
    """
    right_swapped, consistent, first = [], [], []
    for r in rows:
        picks = r["predictions"] if len(r["predictions"]) > 1 else r["predictions"] * 2
        right_swapped.append(picks[1] == r["label"])
        consistent.append(picks[0] == picks[1])
        if len(r["predictions"]) > 1:
            first += [p == o[0] for p, o in zip(picks, r["orderings"])]
        else:
            first += [True, False]  # the same candidate is first in one of the two orders
    pct = lambda xs: round(100.0 * sum(xs) / len(xs), 4)  # noqa: E731
    return {"accuracy_swapped": pct(right_swapped), "position_consistency": pct(consistent),
            "first_slot_rate": pct(first)}
