"""Run an evaluation: score each question under its orderings, write predictions as they
finish, and summarise every requested mode.

The ladder: ``run_eval -> evaluate_chunk -> score_batch``. Questions go in chunks of
``batch_size``; within a chunk the due (question, ordering) pairs are scored
``batch_size`` prompts per forward. Only ``adversarial`` (without ``random``/``majority``)
stops a question at its first wrong answer, so it scores orderings round by round.

Cost per mode is what that mode alone would have run: each scored ordering carries its
share of its batch's time (batch time / prompts in the batch) and the batch's peak memory;
``single`` counts the first ordering, ``adversarial`` the orderings up to the first failure,
``random`` and ``majority`` all of them.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__
from ..api import pick
from ..data import MCRecord
from . import store
from .metrics import METRICS, MODES, PLANS, QuestionResult, answer_changes, majority_vote, plan_for
from .orderings import ORDERING_CHOICES, Ordering, identity, orderings
from .resources import memory_measure, peak_memory_mb, reset_peak_memory
from .tasks import TASKS, TEMPLATES, Template, TaskSpec, get_task, load_records


def _help(text: str, **extra) -> dict:
    return {"help": text, **extra}


@dataclass
class EvalConfig:
    """One ``setllm eval`` run (the model flags are :class:`setllm.cli.common.ModelOptions`)."""

    dataset: str | None = field(default=None, metadata=_help("benchmark to evaluate", choices=list(TASKS)))
    split: str | None = field(default=None, metadata=_help("split; default: the paper's (ARC test, others validation)", metavar="S"))
    data_dir: str | None = field(default=None, metadata=_help("read <D>/<dataset>/<split>.jsonl instead of the HF hub", metavar="D"))
    data_file: str | None = field(default=None, metadata=_help(
        "your own JSONL of {question, choices, label, context?} (with --dataset: that benchmark's templates)", metavar="F"))
    template: str = field(default="modified", metadata=_help(
        "'modified': options in the prompt as a set; 'original': the paper's original prompt", choices=list(TEMPLATES)))
    modes: str = field(default="single,random,adversarial,majority", metadata=_help(
        "comma-separated modes: " + ", ".join(MODES), metavar="M[,M...]"))
    max_orderings: int | None = field(default=None, metadata=_help(
        "test at most N orderings per question (the dataset's order always included); default: all k!", metavar="N"))
    ordering_choice: str = field(default="random", metadata=_help(
        "which orderings under --max-orderings: 'random' (seeded per question) or 'first' (lexicographic; the paper's CSQA choice)",
        choices=list(ORDERING_CHOICES)))
    verify_invariance: bool = field(default=False, metadata=_help(
        "for invariant variants: run every tested ordering anyway, unsorted, and count answer changes (expected 0)"))
    normalize: bool = field(default=False, metadata=_help("pick by mean per-token log-likelihood instead of the sum (the paper: sum)"))
    limit: int | None = field(default=None, metadata=_help("evaluate at most N questions", metavar="N"))
    subset_seed: int | None = field(default=None, metadata=_help("with --limit: a seeded random subset instead of the first N", metavar="S"))
    seed: int = field(default=0, metadata=_help("seed for sampled orderings and majority-vote tie-breaks", metavar="S"))
    label: str | None = field(default=None, metadata=_help("row name in `setllm report`; default: the variant's paper name", metavar="TEXT"))
    out: str = field(default="", metadata=_help("run directory: run.json, predictions.jsonl, summary.json (required)", metavar="DIR"))
    overwrite: bool = field(default=False, metadata=_help("discard an earlier run in --out instead of resuming it"))
    progress: bool = field(default=True, metadata=_help("show a progress bar"))

    def __post_init__(self) -> None:
        if not self.out:
            raise ValueError("no output directory: pass --out DIR")
        if self.dataset is None and not self.data_file:
            raise ValueError("pass --dataset (one of: " + ", ".join(TASKS) + ") or --data-file FILE.jsonl")
        if self.dataset is not None:
            get_task(self.dataset)
        if isinstance(self.modes, (list, tuple)):  # from a config file
            self.modes = ",".join(self.modes)
        plan_for(self.mode_list)
        if not self.mode_list:
            raise ValueError("--modes is empty; choose from: " + ", ".join(MODES))
        if self.template not in TEMPLATES:
            raise ValueError(f"--template must be one of {', '.join(TEMPLATES)}, got {self.template!r}")
        if self.ordering_choice not in ORDERING_CHOICES:
            raise ValueError(f"--ordering-choice must be one of {', '.join(ORDERING_CHOICES)}, got {self.ordering_choice!r}")
        for name in ("max_orderings", "limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}")

    @property
    def mode_list(self) -> list[str]:
        return [m.strip() for m in self.modes.split(",") if m.strip()]


@dataclass
class _Question:
    """One question's due orderings and what scoring them gave so far."""

    record: MCRecord
    due: list[Ordering]
    picks: dict[Ordering, tuple[int, list[float], float, float]] = field(default_factory=dict)

    def next(self, plan: str) -> list[Ordering]:
        """Orderings to score in this round."""
        left = [o for o in self.due if o not in self.picks]
        if plan == "all":
            return left
        failed = any(p[0] != self.record.label for p in self.picks.values())
        if plan == "first":
            return left[:1] if not self.picks else []
        return [] if failed or not left else left[:1]

    def add(self, order: Ordering, scores, seconds: float, peak_mb: float, normalize: bool) -> None:
        logprobs = [0.0] * len(order)
        for position, s in enumerate(scores):
            logprobs[order[position]] = s.logprob  # back to the dataset's option order
        self.picks[order] = (order[pick(scores, normalize).index], logprobs, seconds, peak_mb)

    def row(self, plan: str, one_run: bool, seed: int) -> dict:
        tested = [o for o in self.due if o in self.picks]
        first = self.picks[tested[0]][1]
        diffs = [max(abs(a - b) for a, b in zip(self.picks[o][1], first)) for o in tested[1:]]
        predictions = [self.picks[o][0] for o in tested]
        pick_, votes = majority_vote(QuestionResult(self.record.id, self.record.label, tuple(tested), tuple(predictions)), seed)
        return {
            "id": self.record.id, "label": self.record.label, "n_choices": len(self.record.choices),
            "plan": "all" if one_run else plan, "one_run": one_run,
            "orderings": [list(o) for o in tested], "predictions": predictions,
            # Vote counts over the tested orderings (all of them only under plan "all").
            "votes": {str(k): v for k, v in votes.items()}, "majority": pick_,
            "logprobs": first, "max_logprob_diff": max(diffs) if diffs else None,
            "time_s": [round(self.picks[o][2], 6) for o in tested], "peak_mb": [round(self.picks[o][3], 1) for o in tested],
        }


def run_eval(lm, cfg: EvalConfig, records: Sequence[MCRecord] | None = None, meta: dict | None = None) -> dict:
    """Evaluate ``lm`` (a :class:`setllm.SetLLM`) as ``cfg`` says; returns the summary.

    ``records`` default to those ``cfg`` names. A rerun with the same ``--out`` resumes.
    """
    task = get_task(cfg.dataset)
    source = (meta or {}).get("source", "given")
    if records is None:
        records, source = load_records(task, cfg.split, cfg.data_dir, cfg.data_file, cfg.limit, cfg.subset_seed)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.overwrite:
        store.clear(out)
    template = task.template(cfg.template)
    # Verifying means running every tested ordering, whatever the modes would need.
    plan = "all" if cfg.verify_invariance else plan_for(cfg.mode_list)
    one_run = not template.shows_options or (template.options_as_set and lm.variant.invariant and not cfg.verify_invariance)
    meta = {"model": getattr(lm.model.config, "_name_or_path", None), "adapter": None, **(meta or {})}
    settings = _settings(lm, cfg, task, source, meta)
    store.check_settings(out, settings)
    done = store.load_predictions(out)
    todo = [r for r in records if not _covers(done.get(r.id), plan)]
    started = time.perf_counter()
    if cfg.verify_invariance and lm.variant.invariant:
        lm = lm.with_options(exact=False)  # verifying means reading the orderings unsorted
    with _progress(cfg, len(records), len(records) - len(todo)) as bar:
        for lo in range(0, len(todo), lm.batch_size):
            rows = evaluate_chunk(lm, template, todo[lo : lo + lm.batch_size], plan, one_run, cfg)
            store.append_predictions(out, rows)
            done.update((row["id"], row) for row in rows)
            bar.update(len(rows))
    summary = summarize([done[r.id] for r in records], cfg, settings, lm)
    summary.update(wall_time_s=round(time.perf_counter() - started, 3), resumed_questions=len(records) - len(todo))
    store.write_json(out / store.SUMMARY_FILE, summary)
    return summary


def evaluate_chunk(lm, template: Template, records: Sequence[MCRecord], plan: str, one_run: bool, cfg: EvalConfig) -> list[dict]:
    """Score a chunk of questions under their due orderings; one row per question."""
    questions = [_Question(r, _due(r, one_run, cfg)) for r in records]
    while items := [(q, o) for q in questions for o in q.next(plan)]:
        for lo in range(0, len(items), lm.batch_size):
            score_batch(lm, template, items[lo : lo + lm.batch_size], cfg.normalize)
    return [q.row(plan, one_run, cfg.seed) for q in questions]


def score_batch(lm, template: Template, items: list[tuple[_Question, Ordering]], normalize: bool) -> None:
    """One forward batch; records each item's pick, its share of the time, the batch's peak memory."""
    rendered = [template.render(q.record, o) for q, o in items]
    device = lm.model.device
    reset_peak_memory(device)
    start = time.perf_counter()
    scores = lm.score([r.prompt for r in rendered], [r.options for r in rendered])
    seconds = (time.perf_counter() - start) / len(items)
    peak = peak_memory_mb(device)
    for (q, order), s in zip(items, scores):
        q.add(order, s, seconds, peak, normalize)


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
    summary["metrics"] = {m.name: {"meaning": m.meaning, "higher_is_better": m.higher_is_better, "unit": "%"}
                          for m in METRICS.values() if m.name in modes or (m.name == "flip" and "flip_rate" in summary)}
    summary.update(memory_measure=memory_measure(lm.model.device) if lm is not None else None, settings=settings,
                   setllm_version=__version__, python=platform.python_version(),
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


def _due(record: MCRecord, one_run: bool, cfg: EvalConfig) -> list[Ordering]:
    k = len(record.choices)
    return [identity(k)] if one_run else orderings(k, cfg.max_orderings, cfg.ordering_choice, cfg.seed, record.id)


def _covers(row: dict | None, plan: str) -> bool:
    return row is not None and PLANS.index(row["plan"]) >= PLANS.index(plan)


def _settings(lm, cfg: EvalConfig, task: TaskSpec, source: str, meta: dict) -> dict:
    """What makes two runs' predictions comparable; a resumed run must match them."""
    import torch

    return {
        "dataset": task.name, "split": cfg.split or task.eval_split, "source": source, "template": cfg.template,
        "variant": lm.variant.name, "invariant": lm.variant.invariant, "exact": lm.exact, "chat": lm.chat, "eos": lm.options.eos,
        "model": meta.get("model"), "adapter": meta.get("adapter"), "dtype": str(next(lm.model.parameters()).dtype),
        "max_orderings": cfg.max_orderings, "ordering_choice": cfg.ordering_choice, "verify_invariance": cfg.verify_invariance,
        "normalize": cfg.normalize, "seed": cfg.seed, "torch": torch.__version__,
    }


@contextmanager
def _progress(cfg: EvalConfig, total: int, initial: int) -> Iterator:
    from tqdm.auto import tqdm

    bar = tqdm(total=total, initial=initial, desc=f"eval {cfg.dataset or 'custom'}", unit="q", disable=not cfg.progress)
    try:
        yield bar
    finally:
        bar.close()
