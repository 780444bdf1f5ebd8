"""The table of issue 20: each evaluated model on every task and format, subset seeds 0 and 1.

Reads the ``summary.json`` files ``benchmarks/general_adapter.sh eval NAME ...`` writes
(``RUNS/eval/NAME/<task>-<template>-s<seed>``, documents ``kv8-held-out-s<seed>``) and prints
one markdown row per task and format, one column per NAME and seed: the ``random`` accuracy
(the mean over orderings, or over gold positions for documents; an invariant run's one
answer stands for every ordering), then one standard error. A cell not run yet is "-".

Usage: python benchmarks/general_table.py --runs runs/general/eval --names untrained-set,mixed,mixed-no-ultra
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TASKS = {"piqa": "PIQA", "social_iqa": "SIQA", "arc_challenge": "ARC", "commonsense_qa": "CSQA"}
FORMATS = {"modified": "trained template", "held-out": "held-out template"}
SEEDS = (0, 1)


def rows() -> list[tuple[str, str]]:
    """(label, run folder stem without the seed) in table order."""
    out = [(f"{col}, {fmt}", f"{task}-{template}") for task, col in TASKS.items() for template, fmt in FORMATS.items()]
    return out + [("key-value documents, held-out phrasings", "kv8-held-out")]


def cell(path: Path) -> str:
    if not (path / "summary.json").is_file():
        return "-"
    s = json.loads((path / "summary.json").read_text())
    return f"{s['accuracy']['random']:.2f} ± {s['accuracy_stderr']['random']:.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default="runs/general/eval", help="the eval folder of general_adapter.sh")
    p.add_argument("--names", required=True, help="comma-separated NAMEs of `general_adapter.sh eval NAME ...`")
    args = p.parse_args()
    names = args.names.split(",")
    runs = Path(args.runs)
    missing = [n for n in names if not (runs / n).is_dir()]
    if missing:
        p.error(f"no runs named {', '.join(missing)} in {runs}")
    heads = [f"{n}, seed {s}" for s in SEEDS for n in names]
    print("| task, format | " + " | ".join(heads) + " |")
    print("|---" * (len(heads) + 1) + "|")
    for label, stem in rows():
        print(f"| {label} | " + " | ".join(cell(runs / n / f"{stem}-s{s}") for s in SEEDS for n in names) + " |")


if __name__ == "__main__":
    main()
