"""Documents accuracy by held-out phrasing and by value kind.

For each named eval of `research/general_adapter.sh` (``RUNS/eval/NAME/kv8-held-out-sS``),
the mean accuracy over gold positions of its rows, grouped by the row's ``phrasing`` and
``value_kind`` (fields of `setllm data kv-phrased` rows).

Usage: python research/documents_breakdown.py --names A,B [--runs runs/general] [--seeds 0,1]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def breakdown(data: Path, predictions: Path, field: str) -> dict[str, tuple[float, int]]:
    rows = {r["id"]: r for r in map(json.loads, data.read_text(encoding="utf-8").splitlines())}
    groups: dict[str, list[float]] = defaultdict(list)
    for line in predictions.read_text(encoding="utf-8").splitlines():
        p = json.loads(line)
        groups[rows[p["id"]][field]].append(sum(p["correct"]) / len(p["correct"]))
    return {k: (100 * sum(v) / len(v), len(v)) for k, v in sorted(groups.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", required=True)
    ap.add_argument("--runs", default="runs/general")
    ap.add_argument("--seeds", default="0,1")
    args = ap.parse_args()
    runs = Path(args.runs)
    for field in ("phrasing", "value_kind"):
        print(f"\n| {field} | " + " | ".join(f"{n}, seed {s}" for s in args.seeds.split(",") for n in args.names.split(",")) + " |")
        cells: dict[str, list[str]] = defaultdict(list)
        for s in args.seeds.split(","):
            for name in args.names.split(","):
                got = breakdown(runs / "data" / f"kv8-held-out-s{s}.jsonl", runs / "eval" / name / f"kv8-held-out-s{s}" / "predictions.jsonl", field)
                for key, (acc, n) in got.items():
                    cells[key].append(f"{acc:.0f} (n={n})")
        print("|---|" + "---|" * (len(args.names.split(",")) * len(args.seeds.split(","))))
        for key, values in cells.items():
            print(f"| {key} | " + " | ".join(values) + " |")


if __name__ == "__main__":
    main()
