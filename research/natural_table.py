"""The documents table of natural sentences: every reading of `research/natural_documents.sh`
beside the base model read causally (its mean over the gold positions and its worst one).

    python research/natural_table.py                      # runs/natural/eval/*/<file>
    python research/natural_table.py --files held-out-k8-s0,held-out-k8-s1 --vs base

Per reading and file: exact match (%; an order-sensitive reading: mean over gold positions and
the worst one), the gold string in the answer (%), the difference to the base model's mean with
its paired standard error (question by question), the failure modes (mean over positions:
answers given to 3+ questions of one set, answers of the wrong type, whole documents copied)
and what the reader said to the questions no document answers."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def load(folder: Path) -> tuple[dict, dict[str, dict]]:
    summary = json.loads((folder / "summary.json").read_text())
    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines() if line.strip()]
    return summary, {r["id"]: r for r in rows if r.get("answerable", True)}


def mean_correct(row: dict) -> float:
    return sum(row["correct"]) / len(row["correct"])


def paired(a: dict[str, dict], b: dict[str, dict]) -> tuple[float, float]:
    """Mean difference (points) of per-question accuracy a - b over common questions, and its standard error."""
    ids = sorted(set(a) & set(b))
    d = [100.0 * (mean_correct(a[i]) - mean_correct(b[i])) for i in ids]
    m = sum(d) / len(d)
    var = sum((x - m) ** 2 for x in d) / max(1, len(d) - 1)
    return m, math.sqrt(var / len(d))


def cell(summary: dict) -> tuple[str, str]:
    by = summary["accuracy_by_gold_position"]
    mean, worst = summary["gold_position_mean"], min(by.values())
    em = f"{mean:.1f}" if summary.get("one_run_per_question") else f"{mean:.1f} (worst {worst:.1f})"
    return em, f"{summary['answer_in_text']['random']:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=Path("runs/natural/eval"))
    parser.add_argument("--files", default="held-out-k8-s0,held-out-k8-s1,held-out-2-k8-s0,held-out-2-k8-s1")
    parser.add_argument("--vs", default="base", help="the reading the paired differences are taken against")
    parser.add_argument("--readings", default="", help="comma-separated readings in this order (default: every one found)")
    args = parser.parse_args()
    files = args.files.split(",")
    names = args.readings.split(",") if args.readings else sorted(p.name for p in args.runs.iterdir() if p.is_dir())
    print("| reading | " + " | ".join(f"{f}: exact / in text / vs {args.vs}" for f in files) +
          " | collapses, wrong type, copied (sum over files) | unanswerable: from a document / abstains |")
    print("|---" * (len(files) + 3) + "|")
    for name in names:
        cells, fails, said = [], [0.0, 0.0, 0.0], [0, 0, 0]
        for f in files:
            folder = args.runs / name / f
            if not (folder / "summary.json").exists():
                cells.append("")
                continue
            summary, rows = load(folder)
            em, held = cell(summary)
            vs_folder = args.runs / args.vs / f
            diff = ""
            if name != args.vs and (vs_folder / "summary.json").exists():
                m, se = paired(rows, load(vs_folder)[1])
                diff = f" / {m:+.1f} ± {se:.1f}"
            cells.append(f"{em} / {held}{diff}")
            fm = summary["failure_modes"]["mean"]
            fails = [x + fm[k] for x, k in zip(fails, ("collapses", "wrong_type", "copied_document"))]
            u = summary["unanswerable"]
            said = [said[0] + u["from_a_document"], said[1] + u["abstains"] + u["empty"], said[2] + u["n"]]
        print(f"| {name} | " + " | ".join(cells) + f" | {fails[0]:g}, {fails[1]:g}, {fails[2]:g} | {said[0]} / {said[1]} of {said[2]} |")


if __name__ == "__main__":
    main()
