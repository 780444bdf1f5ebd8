"""The general grid: each evaluated model on every task and format, subset seeds 0 and 1.

Reads the ``summary.json`` files ``research/general_adapter.sh eval NAME ...`` writes
(``RUNS/eval/NAME/<task>-<template>-s<seed>``, documents ``kv<k>-held-out-s<seed>``, k = 8, 10, 20, the judge
``ultrafeedback-pairs-held-out-s<seed>``) and prints
one markdown row per task and format, one column per NAME and seed: the ``random`` accuracy
(the mean over orderings, or over gold positions for documents, or over both orders of a
judge's pair; an invariant run's one
answer stands for every ordering), then one standard error. A cell not run yet is "-".

``--paired A,B`` prints instead A minus B per cell, question by question (the same questions:
a paired standard error, much smaller than either cell's), and over all multiple-choice
cells (the standard error clustered by question: both templates ask the same ones).
``--by-task`` prints each NAME's mean accuracy per benchmark over its four cells (both
templates, both seeds), one row per NAME. ``--seeds all`` reads runs on a whole split instead
(folders ``<task>-<template>-all``).

Usage: python research/general_table.py --runs runs/general/eval --names untrained-set,mixed,mixed-no-ultra
       python research/general_table.py --runs runs/general/eval --paired mixed,mixed-no-ultra
       python research/general_table.py --runs runs/general/eval --names untrained-set,shipped --by-task
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # report_io, shared with the speed scripts
from report_io import mean_se  # noqa: E402

TASKS = {"piqa": "PIQA", "social_iqa": "SIQA", "arc_challenge": "ARC", "commonsense_qa": "CSQA"}
FORMATS = {"modified": "trained template", "held-out": "held-out template"}
SEEDS = ("0", "1")


def folder(stem: str, seed: str) -> str:
    """A cell's run folder: ``<stem>-s<seed>``, or ``<stem>-all`` for a whole split (no subset)."""
    return f"{stem}-all" if seed == "all" else f"{stem}-s{seed}"


def seed_label(seed: str) -> str:
    return "whole split" if seed == "all" else f"seed {seed}"


def rows() -> list[tuple[str, str]]:
    """(label, run folder stem without the seed) in table order."""
    out = [(f"{col}, {fmt}", f"{task}-{template}") for task, col in TASKS.items() for template, fmt in FORMATS.items()]
    docs = [(f"key-value documents ({k}), held-out phrasings", f"kv{k}-held-out") for k in (8, 10, 20)]
    docs.append(("key-value documents (8), second held-out phrasings", "kv8-held-out-2"))
    return out + docs + [("judge, UltraFeedback test pairs, held-out prompt", "ultrafeedback-pairs-held-out")]


def multiple_choice(stem: str) -> bool:
    return stem.split("-")[0] in TASKS


def cell(path: Path) -> str:
    if not (path / "summary.json").is_file():
        return "-"
    s = json.loads((path / "summary.json").read_text())
    return f"{s['accuracy']['random']:.2f} ± {s['accuracy_stderr']['random']:.2f}"


def scores(path: Path) -> dict[str, float] | None:
    """Per question id: the share of its orderings (or gold positions) answered right."""
    if not (path / "summary.json").is_file():
        return None
    out = {}
    for line in (path / "predictions.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        right = r["correct"] if "correct" in r else [p == r["label"] for p in r["predictions"]]
        out[r["id"]] = 100 * sum(right) / len(right)
    return out


def paired(a: dict[str, float], b: dict[str, float]) -> tuple[float, float]:
    """Mean of a - b over the questions both scored, and its standard error."""
    return mean_se([a[q] - b[q] for q in a if q in b])


def clustered(diffs: dict[str, list[float]]) -> tuple[float, float, int]:
    """Mean of all differences and its standard error with each question's differences as one cluster."""
    n = sum(len(v) for v in diffs.values())
    mean = sum(sum(v) for v in diffs.values()) / n
    var = sum((sum(v) - mean * len(v)) ** 2 for v in diffs.values()) * len(diffs) / (len(diffs) - 1)
    return mean, math.sqrt(var) / n, n


def print_paired(runs: Path, a: str, b: str, seeds=SEEDS) -> None:
    print(" | ".join(["| task, format", f"{a} - {b}, {seed_label(seeds[0])}", *map(seed_label, seeds[1:])]) + " |")
    print("|---" * (len(seeds) + 1) + "|")
    pooled = defaultdict(list)
    for label, stem in rows():
        cells = []
        for s in seeds:
            sa, sb = scores(runs / a / folder(stem, s)), scores(runs / b / folder(stem, s))
            if sa is None or sb is None:
                cells.append("-")
                continue
            cells.append(pm(*paired(sa, sb)))
            if multiple_choice(stem):
                for q in sa.keys() & sb.keys():
                    pooled[f"s{s}:{q}"].append(sa[q] - sb[q])
        if set(cells) != {"-"}:
            print(f"| {label} | " + " | ".join(cells) + " |")
    if pooled:
        mean, se, n = clustered(pooled)
        print(f"\nAll multiple-choice cells: {mean:+.2f} ± {se:.2f} points ({n} question-format pairs, {len(pooled)} questions)")


def print_against(runs: Path, names: list[str], ref: str, seeds=SEEDS) -> None:
    """One row per name: name minus ``ref`` question by question in every cell both ran, the
    subset seeds pooled (a question drawn by both seeds is one cluster), then over all
    multiple-choice cells: the view of :func:`print_paired` for many readings at once."""
    base = {(stem, s): scores(runs / ref / folder(stem, s)) for _, stem in rows() for s in seeds}
    stems = [(label, stem) for label, stem in rows() if any(base[stem, s] for s in seeds)]
    print("| reading - " + ref + " | " + " | ".join(label for label, _ in stems) + " | all multiple-choice cells |")
    print("|---" * (len(stems) + 2) + "|")
    for name in names:
        out, pooled = [], defaultdict(list)
        for _, stem in stems:
            diffs = defaultdict(list)
            for s in seeds:
                sa, sb = scores(runs / name / folder(stem, s)), base[stem, s]
                for q in (sa.keys() & sb.keys()) if sa and sb else ():
                    diffs[q].append(sa[q] - sb[q])
                    if multiple_choice(stem):
                        pooled[q].append(sa[q] - sb[q])
            out.append(pm(*clustered(diffs)[:2]) if len(diffs) > 1 else "-")
        out.append(pm(*clustered(pooled)[:2]) if len(pooled) > 1 else "-")
        print(f"| {name} | " + " | ".join(out) + " |")


def pm(mean: float, se: float) -> str:
    """A difference as the tables print it: signed, two decimals, its standard error."""
    return f"{round(mean, 2) + 0.0:+.2f} ± {se:.2f}"  # + 0.0: no "-0.00"


def print_by_task(runs: Path, names: list[str], seeds=SEEDS) -> None:
    """Each name's mean accuracy per benchmark over its cells (every question-format-seed once)."""
    print("| model | " + " | ".join(f"{col}, mean of {len(FORMATS) * len(seeds)} cells" for col in TASKS.values()) + " |")
    print("|---" * (len(TASKS) + 1) + "|")
    for name in names:
        means = []
        for task in TASKS:
            cells = [scores(runs / name / folder(f"{task}-{template}", s)) for template in FORMATS for s in seeds]
            got = [] if None in cells else [x for c in cells for x in c.values()]
            means.append(f"{sum(got) / len(got):.2f}" if got else "-")
        print(f"| {name} | " + " | ".join(means) + " |")


def print_cost(runs: Path, names: list[str], seeds=SEEDS) -> None:
    """What each reading cost on the cells it ran: forward runs per question (every ordering a
    causal reading needs, one for an invariant one; the measure that does not depend on the
    machine), seconds of scoring (its ``random`` mode) and the peak memory."""
    print("| model | cells | runs per question (mean over cells) | scoring time (s) | peak memory (MB) |\n|---|---|---|---|---|")
    for name in names:
        summaries = [json.loads((runs / name / folder(stem, s) / "summary.json").read_text()) for _, stem in rows() for s in seeds
                     if (runs / name / folder(stem, s) / "summary.json").is_file()]
        per_question = [s["runs_per_question"]["random"] for s in summaries if "runs_per_question" in s]
        mean_runs = f"{sum(per_question) / len(per_question):.2f}" if per_question else "-"
        seconds = sum(s["runtime_s"]["random"] for s in summaries)
        peak = max((s["peak_memory_mb"]["random"] for s in summaries), default=0.0)
        print(f"| {name} | {len(summaries)} | {mean_runs} | {seconds:.1f} | {peak:.1f} |")


def print_invariance(runs: Path) -> None:
    """What ``setllm eval --verify-invariance`` counted for each reading under ``runs`` (one
    folder per reading, one run folder per cell): every ordering read unsorted, and how many
    answers differ from the first ordering's."""
    print("| reading | cell | questions | orderings compared with the first | answer changes | largest log-prob difference |\n|---|---|---|---|---|---|")
    for path in sorted(runs.glob("*/*/summary.json")):
        s = json.loads(path.read_text())
        if "invariance_flips" in s:
            print(f"| {path.parent.parent.name} | {path.parent.name} | {s['n']} | {s['invariance_runs']} | {s['invariance_flips']} "
                  f"| {s['max_logprob_diff']:.2e} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default="runs/general/eval", help="the eval folder of general_adapter.sh")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--names", help="comma-separated NAMEs of `general_adapter.sh eval NAME ...`")
    group.add_argument("--paired", metavar="A,B", help="A minus B per cell, question by question")
    group.add_argument("--invariance", action="store_true", help="the answer changes of the --verify-invariance runs under --runs")
    p.add_argument("--against", metavar="REF", help="with --names: each NAME minus REF per task, the seeds pooled, one row per NAME")
    p.add_argument("--by-task", action="store_true", help="with --names: mean accuracy per benchmark over its cells (both templates, every seed)")
    p.add_argument("--cost", action="store_true", help="with --names: each NAME's scoring time and peak memory, summed / maxed over its cells")
    p.add_argument("--seeds", default="0,1", help="subset seeds, the columns; 'all': runs on a whole split (folders <task>-<template>-all)")
    args = p.parse_args()
    if args.invariance:
        return print_invariance(Path(args.runs))
    if (args.by_task or args.against) and not args.names:
        p.error("--by-task and --against go with --names")
    names = (args.names or args.paired).split(",")
    if args.paired and len(names) != 2:
        p.error("--paired takes two names: A,B")
    runs = Path(args.runs)
    missing = [n for n in names if not (runs / n).is_dir()]
    if missing:
        p.error(f"no runs named {', '.join(missing)} in {runs}")
    seeds = tuple(args.seeds.split(","))
    if args.paired:
        return print_paired(runs, *names, seeds)
    if args.by_task:
        return print_by_task(runs, names, seeds)
    if args.against:
        return print_against(runs, names, args.against, seeds)
    if args.cost:
        return print_cost(runs, names, seeds)
    heads = [f"{n}, {seed_label(s)}" for s in seeds for n in names]
    print("| task, format | " + " | ".join(heads) + " |")
    print("|---" * (len(heads) + 1) + "|")
    for label, stem in rows():
        cells = [cell(runs / n / folder(stem, s)) for s in seeds for n in names]
        if set(cells) != {"-"}:  # a row no NAME ran (e.g. documents at a size not asked) is left out
            print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
