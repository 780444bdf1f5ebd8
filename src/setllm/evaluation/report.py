"""``setllm report``: the paper-style tables and the majority-vote figures from run directories.

Table: one row per (model, training, eval mode), two columns per dataset, Rand. and Adv.
(the paper's Table 1). A run with ``majority`` adds a "Majority Vote" row, whose two columns
are equal by construction. Figures (the paper's Appendix E.8): for each run with a majority
vote, accuracy by the winning option's vote count; for each pair of an order-sensitive
majority-vote run and an invariant-variant run on the same dataset and split, the rate at
which the two pick the same option, by vote count.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ..data import DataError
from ..tasks import TASKS, column
from .metrics import majority_vote
from .store import PREDICTIONS_FILE, SUMMARY_FILE
from .summary import to_result

PAPER_NAMES = {
    "causal-pe": "Causal Mask+PE", "causal-nope": "Causal Mask+NoPE", "prefix-nope": "Prefix Mask+NoPE",
    "prefix-pe": "Prefix Mask+PE", "prefix-setpe": "Prefix Mask+SetPE", "setmask-setpe": "SetMask+SetPE",
}


@dataclass
class Run:
    """One run directory: its summary and its per-question rows."""

    path: Path
    summary: dict
    rows: list[dict]

    @property
    def name(self) -> str:
        s = self.summary
        return s.get("label") or PAPER_NAMES.get(s["variant"], s["variant"]) + ("*" if s["template"] == "original" else "")

    @property
    def order_sensitive(self) -> bool:
        """Its answers may depend on the option order (not an invariant variant reading a set)."""
        s = self.summary
        return not (s["invariant"] and s["template"] == "modified") and not s["one_run_per_question"]

    @property
    def training(self) -> str:
        return "Finetuned" if self.summary.get("adapter") else "Pretrained"

    @property
    def title(self) -> str:
        """Name and training: a pretrained and a finetuned run of one label stay apart."""
        return f"{self.name} ({self.training})"

    def votes(self, seed: int) -> dict[str, tuple[int, int]]:
        """Per question: (majority pick, its vote count)."""
        out = {}
        for row in self.rows:
            pick, counts = majority_vote(to_result(row), seed)
            out[row["id"]] = (pick, counts[pick])
        return out


def load_run(path: str | Path) -> Run:
    path = Path(path)
    summary_path = path / SUMMARY_FILE
    if not summary_path.is_file():
        raise DataError(f"{path}: no {SUMMARY_FILE} (not a finished `setllm eval --out` directory)")
    summary = json.loads(summary_path.read_text())
    rows: dict[str, dict] = {}
    preds = path / PREDICTIONS_FILE
    for line in preds.read_text().splitlines() if preds.exists() else []:
        if line.strip():
            row = json.loads(line)
            rows[row["id"]] = row
    ids = summary.get("ids") or list(rows)  # the file may hold more questions than this summary
    missing = [i for i in ids if i not in rows]
    if missing:
        raise DataError(f"{preds}: no predictions for {len(missing)} questions of the summary (first: {missing[0]})")
    return Run(path, summary, [rows[i] for i in ids])


def markdown_table(runs: list[Run]) -> str:
    """The accuracy table (%), Rand./Adv. per dataset, and a runtime table (s)."""
    datasets = _datasets(runs)
    acc: dict[tuple, dict[str, tuple]] = defaultdict(dict)
    time: dict[tuple, dict[str, float]] = defaultdict(dict)
    for run in runs:
        a, t, d = run.summary["accuracy"], run.summary["runtime_s"], run.summary["dataset"]
        if {"random", "adversarial"} & set(a):
            acc[(run.name, run.training, "Single run")][d] = (a.get("random", a.get("single")), a.get("adversarial"))
        elif "single" in a:
            acc[(run.name, run.training, "Single run")][d] = (a["single"], None)
        if "majority" in a and run.order_sensitive:  # for an invariant run it equals the single run
            acc[(run.name, run.training, "Majority Vote")][d] = (a["majority"], a["majority"])
        for mode in ("single", "majority") if run.order_sensitive else ("single",):
            if mode in t:
                time[(run.name, run.training, "Majority Vote" if mode == "majority" else "Single run")][d] = t[mode]
    head = "| Model | Training | Eval. Mode | " + " | ".join(f"{column(d)} Rand. | {column(d)} Adv." for d in datasets) + " |"
    lines = [head, "|" + "---|" * (3 + 2 * len(datasets))]
    for key, cells in acc.items():
        vals = [v for d in datasets for v in cells.get(d, (None, None))]
        lines.append("| " + " | ".join(key) + " | " + " | ".join(_pct(v) for v in vals) + " |")
    lines += ["", "Runtime (s) of the scoring passes each mode needs:", "",
              "| Model | Training | Eval. Mode | " + " | ".join(column(d) for d in datasets) + " |",
              "|" + "---|" * (3 + len(datasets))]
    for key, cells in time.items():
        lines.append("| " + " | ".join(key) + " | " + " | ".join(_num(cells.get(d)) for d in datasets) + " |")
    return "\n".join(lines + [""] + _notes(runs))


def agreement(baseline: Run, setllm: Run, seed: int = 0) -> dict[int, tuple[int, int]]:
    """Vote count -> (questions where the baseline's majority pick equals Set-LLM's, questions)."""
    theirs = {row["id"]: row["predictions"][0] for row in setllm.rows}
    out: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for qid, (pick, count) in baseline.votes(seed).items():
        if qid in theirs:
            out[count][0] += pick == theirs[qid]
            out[count][1] += 1
    return {k: (v[0], v[1]) for k, v in sorted(out.items())}


def vote_accuracy(run: Run, seed: int = 0) -> dict[int, tuple[int, int]]:
    """Vote count -> (questions whose majority pick is correct, questions)."""
    labels = {row["id"]: row["label"] for row in run.rows}
    out: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for qid, (pick, count) in run.votes(seed).items():
        out[count][0] += pick == labels[qid]
        out[count][1] += 1
    return {k: (v[0], v[1]) for k, v in sorted(out.items())}


def pairs(runs: list[Run]) -> list[tuple[Run, Run]]:
    """(order-sensitive majority-vote run, invariant run) on the same dataset and split."""
    base = [r for r in runs if "majority" in r.summary["accuracy"] and r.order_sensitive]
    inv = [r for r in runs if r.summary["invariant"] and r.summary["template"] == "modified"]
    return [(b, s) for b in base for s in inv if (b.summary["dataset"], b.summary["split"]) == (s.summary["dataset"], s.summary["split"])]


def save_plots(runs: list[Run], out_dir: str | Path) -> list[Path]:
    """The two appendix figures as PNGs; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for run in runs:
        if "majority" in run.summary["accuracy"] and run.order_sensitive:
            title = f"{run.title}, majority vote: {column(run.summary['dataset'])}"
            path = out_dir / f"votes_accuracy_{run.summary['dataset']}_{_slug(run.title)}.png"
            written.append(_bar_plot(plt, vote_accuracy(run, _seed(run)), "accuracy (%)", title, path))
    for base, inv in pairs(runs):
        title = f"agreement: {base.title} majority vs {inv.title}: {column(base.summary['dataset'])}"
        path = out_dir / f"agreement_{base.summary['dataset']}_{_slug(base.title)}_vs_{_slug(inv.title)}.png"
        written.append(_bar_plot(plt, agreement(base, inv, _seed(base)), "agreement rate (%)", title, path))
    return written


def _bar_plot(plt, data: dict[int, tuple[int, int]], ylabel: str, title: str, path: Path) -> Path:
    counts = list(data)
    rates = [100 * hit / n for hit, n in data.values()]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bars = ax.bar([str(c) for c in counts], rates, color="#4c72b0")
    for bar, (_, n) in zip(bars, data.values()):  # how many questions each bar stands on
        ax.annotate(f"n={n}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=7)
    ax.set(xlabel="majority vote count", ylabel=ylabel, ylim=(0, 105), title=textwrap.fill(title, 70))
    ax.title.set_fontsize(9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _notes(runs: list[Run]) -> list[str]:
    notes = []
    for run in runs:
        s = run.summary
        o = s.get("orderings", {})
        line = f"- {run.title} on {column(s['dataset'])} {s['split']}: n={s['n']}"
        if o.get("max") and not s["one_run_per_question"]:
            line += f", at most {o['max']} orderings per question ({o['choice']}, seed {o['seed']})"
        if "invariance_flips" in s:
            line += f", answer changes across orderings: {s['invariance_flips']} of {s['invariance_runs']} runs"
        notes.append(line)
    for base, inv in pairs(runs):
        hits = agreement(base, inv, _seed(base))
        agree, n = sum(h for h, _ in hits.values()), sum(m for _, m in hits.values())
        if n:
            notes.append(f"- agreement {base.title} majority vote vs {inv.title} on {base.summary['dataset']}: {100 * agree / n:.2f}% of {n}")
    return notes


def _datasets(runs: list[Run]) -> list[str]:
    have = {r.summary["dataset"] for r in runs}
    return [d for d in TASKS if d in have] + sorted(have - set(TASKS))


def _seed(run: Run) -> int:
    return run.summary.get("orderings", {}).get("seed", 0)


def _pct(v) -> str:
    return "" if v is None else f"{v:.2f}"


def _num(v) -> str:
    return "" if v is None else f"{v:.3g}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()
