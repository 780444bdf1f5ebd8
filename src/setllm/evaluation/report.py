"""``setllm report``: the paper-style tables and the majority-vote figures from run directories.

Table: one row per (model, training, eval mode), two columns per dataset, Rand. and Adv.
(the paper's Table 1). A cell shows only what its run measured: Rand. is ``random``, Adv. is
``adversarial`` ("-" where the run did not measure it; ``single``, the dataset's own order, is
not Rand. and goes to the notes), except that a run with one run per question stands for every
ordering, so its one accuracy is all of them. A run with ``majority`` adds a "Majority Vote"
row, whose two columns are equal by construction. Runs of one variant and training on
different models or adapters get rows of their own, named with the part of the model or
adapter path that tells them apart; two runs landing in one cell are refused, and a ``|`` in a
name is escaped. Figures (the paper's Appendix E.8): for each run with a majority vote,
accuracy by the winning option's vote count; for each pair of an order-sensitive majority-vote
run and an invariant-variant run of the same base model on the same dataset and split, the rate
at which the two pick the same option, by vote count.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..core.layout.variants import VARIANTS
from ..errors import SetLLMWarning
from ..io.records import DataError
from ..tasks import TASKS, column
from .metrics import majority_vote
from .store import PREDICTIONS_FILE, SUMMARY_FILE
from .summary import to_result


def _paper_name(variant: str) -> str:
    """The paper's name of a variant; a name this version does not know, as written."""
    return VARIANTS[variant].paper_name if variant in VARIANTS else variant


@dataclass
class Run:
    """One run directory: its summary and its per-question rows."""

    path: Path
    summary: dict
    rows: list[dict]
    tag: str = ""  # what tells it from runs of the same name and training (set by :func:`_prepare`)

    @property
    def base_name(self) -> str:
        s = self.summary
        return s.get("label") or _paper_name(s["variant"]) + ("*" if s["template"] == "original" else "")

    @property
    def name(self) -> str:
        return f"{self.base_name} [{self.tag}]" if self.tag else self.base_name

    @property
    def order_sensitive(self) -> bool:
        """Its answers may depend on the option order (not an invariant variant reading a set)."""
        s = self.summary
        return not (s["invariant"] and s["template"] in SET_TEMPLATES) and not s["one_run_per_question"]

    @property
    def single_cost(self) -> str:
        """The mode whose runtime its single-run row shows: ``single``, else (a run of other
        modes alone, ``--modes random,adversarial``) the cheapest it measured, named in the notes."""
        t = self.summary["runtime_s"]
        return "single" if "single" in t else min(t, key=t.get)

    @property
    def training(self) -> str:
        return "Finetuned" if self.summary.get("adapter") else "Pretrained"

    @property
    def source(self) -> tuple[str, str]:
        """What was evaluated: (model, adapter)."""
        return str(self.summary.get("model") or "?"), str(self.summary.get("adapter") or "")

    def measured(self) -> dict[str, float]:
        """Accuracy per mode it measured. One run per question stands for every ordering
        (see :mod:`.metrics`), so there ``single`` is also random, adversarial and majority."""
        acc = dict(self.summary["accuracy"])
        if self.summary["one_run_per_question"] and "single" in acc:
            acc = {m: acc["single"] for m in ("random", "adversarial", "majority")} | acc
        return acc

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


SET_TEMPLATES = ("modified", "held-out")  # the templates whose options are one set

SUMMARY_KEYS = {"dataset": str, "split": str, "n": int, "variant": str, "template": str, "invariant": bool,
                "one_run_per_question": bool, "accuracy": dict, "runtime_s": dict}
ROW_KEYS = ("id", "label", "orderings", "predictions", "plan")


def load_run(path: str | Path) -> Run:
    """One ``setllm eval --out`` directory; a user's mistake is one line naming the file."""
    path = Path(path)
    summary = _read_summary(path)
    rows = _read_predictions(path / PREDICTIONS_FILE)
    ids = summary.get("ids") or list(rows)  # the file may hold more questions than this summary
    missing = [i for i in ids if i not in rows]
    if missing:
        raise DataError(f"{path / PREDICTIONS_FILE}: no predictions for {len(missing)} questions of the summary (first: {missing[0]})")
    for i in ids:
        if lacking := [k for k in ROW_KEYS if k not in rows[i]]:
            raise DataError(f"{path / PREDICTIONS_FILE}: question {i} has no {', '.join(map(repr, lacking))}")
    return Run(path, summary, [rows[i] for i in ids])


def _read_summary(path: Path) -> dict:
    """``summary.json`` of a run directory, checked: a partial or foreign file is refused
    here, naming it, instead of failing later with a KeyError."""
    if not path.is_dir():
        raise DataError(f"{path}: no such directory" if not path.exists() else
                        f"{path}: not a directory; pass a `setllm eval --out` run directory")
    summary_path = path / SUMMARY_FILE
    if not summary_path.is_file():
        why = "unfinished run? rerun its `setllm eval` to finish it" if (path / PREDICTIONS_FILE).exists() else \
            "not a `setllm eval --out` run directory"
        raise DataError(f"{path}: no {SUMMARY_FILE} ({why})")
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except OSError as e:
        raise DataError(f"{summary_path}: cannot read it ({e.strerror})") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{summary_path}: not a valid setllm eval summary (not JSON: {e})") from None
    if problem := _summary_problem(summary):
        raise DataError(f"{summary_path}: not a valid setllm eval summary ({problem})")
    return summary


def _summary_problem(summary) -> str | None:
    """What makes ``summary`` unusable here, if anything."""
    if not isinstance(summary, dict):
        return f"a JSON {type(summary).__name__}, not an object"
    if missing := [k for k in SUMMARY_KEYS if k not in summary]:
        return "no " + ", ".join(map(repr, missing))
    for key, kind in SUMMARY_KEYS.items():
        if not isinstance(summary[key], kind):
            return f"{key!r} is {summary[key]!r}, not a {kind.__name__}"
    for key in ("accuracy", "runtime_s"):
        if bad := [m for m, v in summary[key].items() if not isinstance(v, (int, float)) or isinstance(v, bool)]:
            return f"{key}[{bad[0]!r}] is {summary[key][bad[0]]!r}, not a number"
    if not isinstance(summary.get("orderings", {}), dict) or not isinstance(summary.get("ids", []), list):
        return "'orderings' must be an object and 'ids' a list"
    return None


def _read_predictions(path: Path) -> dict[str, dict]:
    """Rows by question id (the last line of a question counts, as in :mod:`.store`)."""
    rows: dict[str, dict] = {}
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except ValueError as e:
                raise DataError(f"{path}:{lineno}: malformed JSON ({e})") from None
            if not isinstance(row, dict) or "id" not in row:
                raise DataError(f"{path}:{lineno}: not a prediction row (no 'id')")
            rows[row["id"]] = row
    return rows


def markdown_table(runs: list[Run]) -> str:
    """The accuracy table (%), Rand./Adv. per dataset, and a runtime table (s)."""
    _prepare(runs)
    datasets = _datasets(runs)
    acc: dict[tuple, dict[str, tuple]] = defaultdict(dict)
    time: dict[tuple, dict[str, float]] = defaultdict(dict)
    for run in runs:
        a, t, d = run.measured(), run.summary["runtime_s"], run.summary["dataset"]
        # Every run has its single-run row, so it shows in the table even where it measured neither.
        acc[(run.name, run.training, "Single run")][d] = (a.get("random", "-"), a.get("adversarial", "-"))
        if "majority" in a and run.order_sensitive:  # for an invariant run it equals the single run
            acc[(run.name, run.training, "Majority Vote")][d] = (a["majority"], a["majority"])
        if t:
            time[(run.name, run.training, "Single run")][d] = t[run.single_cost]
        if "majority" in t and run.order_sensitive:
            time[(run.name, run.training, "Majority Vote")][d] = t["majority"]
    cols = [c for d in datasets for c in (f"{column(d)} Rand.", f"{column(d)} Adv.")]
    lines = [_row(["Model", "Training", "Eval. Mode", *cols]), "|" + "---|" * (3 + len(cols))]
    for key, cells in acc.items():
        lines.append(_row([*key, *(_pct(v) for d in datasets for v in cells.get(d, (None, None)))]))
    lines += ["", "Runtime (s) of the scoring passes each mode needs:", "",
              _row(["Model", "Training", "Eval. Mode", *map(column, datasets)]), "|" + "---|" * (3 + len(datasets))]
    for key, cells in time.items():
        lines.append(_row([*key, *(_num(cells.get(d)) for d in datasets)]))
    mismatched = _different_questions(runs)
    for d in mismatched:
        warnings.warn(f"the runs on {column(d)} were measured on different questions ({mismatched[d]}): their rows are not comparable",
                      SetLLMWarning, stacklevel=2)
    warn = [f"**Not comparable:** the runs on {column(d)} were measured on different questions ({n})." for d, n in mismatched.items()]
    return "\n".join(warn + ([""] if warn else []) + lines + [""] + _notes(runs))


def _different_questions(runs: list[Run]) -> dict[str, str]:
    """Dataset -> "n = 5, 10" where its runs did not answer the same questions."""
    by_dataset: dict[str, set] = defaultdict(set)
    counts: dict[str, set] = defaultdict(set)
    for run in runs:
        d = run.summary["dataset"]
        by_dataset[d].add((run.summary.get("split"), frozenset(row["id"] for row in run.rows)))
        counts[d].add(run.summary["n"])
    return {d: "n = " + ", ".join(map(str, sorted(counts[d]))) for d, sets in by_dataset.items() if len(sets) > 1}


def check_writable(path: Path, what: str, *, folder: bool = True) -> None:
    """Refuse an output path that cannot be written, before any work is done: a read-only or
    misplaced ``--plot-dir``/``--markdown`` is one line naming it, not a traceback after the
    table. ``folder``: ``path`` is a folder to write into (else a file to write)."""
    path = Path(path)
    if path.exists():
        if path.is_dir() != folder:
            raise DataError(f"{what} {path}: not writable ({'a folder' if path.is_dir() else 'a file'}, "
                            f"not {'a folder' if folder else 'a file'})")
        mode = os.W_OK | os.X_OK if folder else os.W_OK
        if not os.access(path, mode):
            raise DataError(f"{what} {path}: not writable (permission denied)")
        return
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise DataError(f"{what} {path}: not writable ({parent} is a file, not a folder)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise DataError(f"{what} {path}: not writable (cannot create it in {parent}: permission denied)")


def write_markdown(path: str | Path, text: str) -> None:
    """Write the tables to ``path`` (its folder made); a failure is one line naming it."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    except OSError as e:
        raise DataError(f"{path}: cannot write the markdown tables ({e.strerror or e})") from None


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
    """(order-sensitive majority-vote run, invariant run) on the same dataset and split and of
    the same base model: how often one model's two readings agree (an adapter is a reading of
    its base model; another model's picks say nothing about it)."""
    base = [r for r in runs if "majority" in r.summary["accuracy"] and r.order_sensitive]
    inv = [r for r in runs if r.summary["invariant"] and r.summary["template"] in SET_TEMPLATES]
    return [(b, s) for b in base for s in inv if _paired_on(b) == _paired_on(s)]


def _paired_on(run: Run) -> tuple[str, str, str]:
    return run.summary["dataset"], run.summary["split"], run.source[0]


def save_plots(runs: list[Run], out_dir: str | Path, what: str = "plot folder") -> list[Path]:
    """The two appendix figures as PNGs; returns the files written. ``what`` names
    ``out_dir`` in errors (the flag it came from)."""
    out_dir = Path(out_dir)
    _prepare(runs)
    check_writable(out_dir, what)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"{what} {out_dir}: not writable ({e.strerror})") from None
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
    by_dataset = defaultdict(list)
    for run in runs:
        if "accuracy_by_gold_position" in run.summary:
            by_dataset[run.summary["dataset"]].append(run)
    for dataset, group in by_dataset.items():
        written.append(_position_plot(plt, group, out_dir / f"gold_position_{dataset}.png"))
    return written


def _position_plot(plt, runs: list[Run], path: Path) -> Path:
    """Accuracy vs the gold document's position, one line per run (a one-run invariant
    variant is flat by construction); the x axis keeps the asked order ("-1" last)."""
    fig, ax = plt.subplots(figsize=(8, 3.5))
    keys = list(runs[0].summary["accuracy_by_gold_position"])
    for run in runs:
        acc = run.summary["accuracy_by_gold_position"]
        ax.plot(range(len(keys)), [acc.get(k) for k in keys], marker="o", label=run.title)
    ax.set_xticks(range(len(keys)), keys)
    ax.set(xlabel="gold document position", ylabel="exact match (%)", ylim=(-2, 102), title=f"accuracy by gold position: {column(runs[0].summary['dataset'])}")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # beside the plot: never over a line
    fig.tight_layout()
    return _save(plt, fig, path)


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
    return _save(plt, fig, path)


def _save(plt, fig, path: Path) -> Path:
    """Write ``fig`` as a PNG (an unwritable folder is one line) and free it."""
    try:
        fig.savefig(path, dpi=120)
    except OSError as e:
        raise DataError(f"{path}: cannot write the figure ({e.strerror or e})") from None
    finally:
        plt.close(fig)
    return path


def _prepare(runs: list[Run]) -> None:
    """Tag runs that share a name and training but not a model/adapter, so they get rows (and
    figure files) of their own; refuse two runs that would still fill one cell."""
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        run.tag = ""
        groups[(run.base_name, run.training)].append(run)
    for group in groups.values():
        sources = [run.source for run in group]
        parts = [_tails([s[i] for s in sources]) for i in (0, 1)]
        varying = [i for i in (0, 1) if len({s[i] for s in sources}) > 1]
        for run in group:
            run.tag = " + ".join(parts[i][run.source[i]] for i in varying)
    seen: dict[tuple, Run] = {}
    for run in runs:
        key = (run.name, run.training, run.summary["dataset"])
        if key in seen:
            raise DataError(f"{seen[key].path} and {run.path}: both are {run.title} on {run.summary['dataset']}, "
                            "one table cell; report them separately or give one a different `setllm eval --label`")
        seen[key] = run


def _tails(values: list[str]) -> dict[str, str]:
    """Each value's shortest trailing path part that tells the distinct values apart."""
    distinct = set(values)
    depth = max(len(PurePosixPath(v).parts) for v in distinct)
    for k in range(1, depth):
        short = {v: "/".join(PurePosixPath(v).parts[-k:]) for v in distinct}
        if len(set(short.values())) == len(distinct):
            return short
    return {v: v for v in distinct}


def _notes(runs: list[Run]) -> list[str]:
    notes = []
    for run in runs:
        s = run.summary
        o = s.get("orderings", {})
        line = f"- {run.title} on {column(s['dataset'])} {s['split']}: n={s['n']}"
        if run.order_sensitive and "single" in s["accuracy"]:  # not Rand.: it has no column
            line += f", accuracy in the dataset's option order (single): {s['accuracy']['single']:.2f}%"
        if s["runtime_s"] and run.single_cost != "single":
            line += f", runtime of its single-run row: its {run.single_cost} mode's (no single run measured)"
        if o.get("max") and not s["one_run_per_question"]:
            line += f", at most {o['max']} orderings per question ({o['choice']}, seed {o['seed']})"
        if "invariance_flips" in s:
            line += f", answer changes across orderings: {s['invariance_flips']} of {s['invariance_runs']} runs"
        if "accuracy_by_gold_position" in s:
            line += ", exact match by gold position: " + ", ".join(f"{k}: {v:.2f}%" for k, v in s["accuracy_by_gold_position"].items())
            line += f" (gap {s['gold_position_gap']:.2f}, mean {s['gold_position_mean']:.2f})"
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


def _row(cells: list[str]) -> str:
    """A markdown table row; a ``|`` inside a cell (a label, a path) is escaped, not a column break."""
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def _pct(v) -> str:
    """Blank: no run of this row on the dataset; "-": its run did not measure this."""
    return "" if v is None else v if isinstance(v, str) else f"{v:.2f}"


def _num(v) -> str:
    return "" if v is None else f"{v:.3g}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()
