"""Exact match beside "the answer is in the text" for documents runs: a reading that retrieves
the right value but words its answer otherwise ("seat 684" for "684") scores 0 by exact match.

    python research/documents_contains.py runs/general/eval/*/kv8-held-out-s*

Prints one row per run folder (its predictions.jsonl): rows, exact matches, and answers that
hold the gold answer somewhere in the generated text (first run of each row)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def counts(folder: Path) -> tuple[int, int, int]:
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines() if line.strip()]
    exact = sum(bool(r["correct"][0]) for r in rows)
    holds = sum(r["answer"] in r["generated"][0] for r in rows)
    return len(rows), exact, holds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders of `setllm eval --dataset documents`")
    args = parser.parse_args()
    print("| run | rows | exact match | answer in the text |\n|---|---|---|---|")
    for folder in args.runs:
        if (folder / "predictions.jsonl").exists():
            n, exact, holds = counts(folder)
            print(f"| {folder.parent.name}/{folder.name} | {n} | {exact} | {holds} |")


if __name__ == "__main__":
    main()
