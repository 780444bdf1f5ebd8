"""Readings that need no model run of their own, written as run folders the tables read.

- ``majority SRC OUT``: the order-sensitive model's majority vote over the orderings it was run
  on (each question right or wrong once), from SRC's ``predictions.jsonl`` (a causal run over
  several orderings: one more reading at no extra cost, the reference an invariant method
  should match in one run).
- ``longer SRC OUT --data-dir DIR``: pick the longer response (in characters) for the judge
  pairs of SRC, the length baseline every judge is measured against (no model).

Each writes ``OUT/predictions.jsonl`` (one row per question, one prediction) and a
``summary.json`` with the accuracy and its standard error, so that ``general_table.py`` and its
``--paired`` read it like any run. Usage (research/methods.sh derive does it for every cell):

    python research/derived_runs.py majority runs/methods/x/eval/causal/piqa-held-out-s0 OUT
    python research/derived_runs.py longer runs/methods/x/eval/causal/ultrafeedback-pairs-held-out-s0 OUT --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # report_io, shared with the speed scripts
from report_io import mean_se  # noqa: E402


def read_predictions(src: Path) -> list[dict]:
    return [json.loads(line) for line in (src / "predictions.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]


def majority_rows(src: Path) -> list[dict]:
    """One row per question: the majority answer over SRC's orderings (its recorded tie-break)."""
    return [{"id": r["id"], "label": r["label"], "predictions": [r["majority"]]} for r in read_predictions(src)]


def longer_rows(src: Path, data_dir: str) -> list[dict]:
    """One row per judge pair of SRC: the index of its longer response (the first one on a tie)."""
    from setllm.tasks import REGISTRY
    from setllm.tasks.base import load_records

    records, _ = load_records(REGISTRY["ultrafeedback-pairs"], data_dir=data_dir)
    by_id = {r.id: r for r in records}
    out = []
    for r in read_predictions(src):
        choices = by_id[r["id"]].choices
        longer = max(range(len(choices)), key=lambda i: (len(choices[i]), -i))
        out.append({"id": r["id"], "label": r["label"], "predictions": [longer]})
    return out


def write(out: Path, rows: list[dict], source: Path, reading: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    mean, se = mean_se([100.0 * (r["predictions"][0] == r["label"]) for r in rows])
    acc = {m: round(mean, 4) for m in ("single", "random", "adversarial", "majority")}
    err = {m: round(se, 4) for m in acc}
    zero = {m: 0.0 for m in acc}
    summary = {"reading": reading, "derived_from": str(source), "n": len(rows), "accuracy": acc, "accuracy_stderr": err,
               "runtime_s": zero, "peak_memory_mb": zero}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("reading", choices=["majority", "longer"])
    p.add_argument("src", type=Path, help="a finished run folder (summary.json, predictions.jsonl)")
    p.add_argument("out", type=Path)
    p.add_argument("--data-dir", help="longer: the folder holding ultrafeedback/ (default: SETLLM_DATA_DIR or the hub)")
    args = p.parse_args()
    if not (args.src / "summary.json").is_file():
        p.error(f"{args.src}: not a finished run (no summary.json)")
    rows = majority_rows(args.src) if args.reading == "majority" else longer_rows(args.src, args.data_dir)
    write(args.out, rows, args.src, args.reading)
    print(f"{args.out}: {args.reading} over {len(rows)} questions")


if __name__ == "__main__":
    main()
