"""The shipped choose adapter through lm-eval's own command line: ``python -m
setllm.lm_eval --model setllm`` on N PIQA validation questions in the set task
(``setllm.lm_eval.templates.records_*``: the options as one set in the context), once as
given and once with every question's options reversed, under each adapter named.

    python research/lm_eval_door.py --adapters auto,runs/general/adapters/choose-stage1 --n 500

Prints, per adapter, lm-eval's accuracy in both orders, how many picks agree and the largest
difference of an option's log-likelihood between the two orders (exact mode: 0.0 is the
promise), then each adapter's accuracy minus the first one's, question by question.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # report_io, shared with the speed scripts
from report_io import mean_se  # noqa: E402

TASK = """task: door_{order}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
target_delimiter: " "
doc_to_text: !function setllm.lm_eval.templates.records_text
doc_to_choice: !function setllm.lm_eval.templates.records_choices
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


def write_tasks(src: Path, n: int, out: Path) -> None:
    rows = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines()[:n]]
    flipped = [{**r, "choices": r["choices"][::-1], "label": len(r["choices"]) - 1 - r["label"]} for r in rows]
    for order, data in (("given", rows), ("reversed", flipped)):
        path = out / f"{order}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in data))
        (out / f"door_{order}.yaml").write_text(TASK.format(order=order, data=path.resolve()))


def run(adapter: str, order: str, out: Path) -> list[list[float]]:
    """lm-eval's command line; per question, each option's log-likelihood in the dataset's order."""
    dest = out / f"{adapter.replace('/', '_')}-{order}"
    if not list(dest.rglob("samples_*.jsonl")):
        # A fresh datasets cache per run, and the check below: once (not reproduced since, cause not found) the
        # given task answered the reversed file's questions, which would fake an invariance.
        with tempfile.TemporaryDirectory() as cache:
            subprocess.run([sys.executable, "-m", "setllm.lm_eval", "--model", "setllm", "--model_args", f"adapter={adapter}",
                            "--tasks", f"door_{order}", "--include_path", str(out), "--batch_size", "8", "--log_samples",
                            "--output_path", str(dest)], check=True, stdout=subprocess.DEVNULL, env={**os.environ, "HF_DATASETS_CACHE": cache})
    samples = [json.loads(line) for f in dest.rglob("samples_*.jsonl") for line in f.read_text().splitlines()]
    samples.sort(key=lambda s: s["doc_id"])
    asked = [json.loads(line) for line in (out / f"{order}.jsonl").read_text().splitlines()]
    assert [s["doc"]["choices"] for s in samples] == [r["choices"] for r in asked], f"{dest}: lm-eval read other questions"
    scores = [[float(r[0]) for r in s["filtered_resps"]] for s in samples]
    return [row[::-1] for row in scores] if order == "reversed" else scores


def pick(scores: list[float]) -> int:
    """The option lm-eval's ``acc`` picks: the highest log-likelihood, the first of a tie."""
    return max(range(len(scores)), key=scores.__getitem__)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapters", default="auto", help="comma-separated --model_args adapter values (auto: the shipped one)")
    ap.add_argument("--data", default="../shared/data/piqa/validation.jsonl")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--out", default="runs/lm_eval_door")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_tasks(Path(args.data), args.n, out)
    labels = [json.loads(line)["label"] for line in (out / "given.jsonl").read_text().splitlines()]
    first = None
    for adapter in args.adapters.split(","):
        given, flipped = run(adapter, "given", out), run(adapter, "reversed", out)
        picks, picks_f = [pick(s) for s in given], [pick(s) for s in flipped]
        same = sum(p == q for p, q in zip(picks, picks_f))
        gap = max(abs(a - b) for g, f in zip(given, flipped) for a, b in zip(g, f))
        right = [100.0 * (p == y) for p, y in zip(picks, labels)]
        acc_f = 100.0 * sum(p == y for p, y in zip(picks_f, labels)) / len(labels)
        line = (f"{adapter}: accuracy {sum(right) / len(right):.2f} given, {acc_f:.2f} reversed; same pick {same} of {len(picks)}; "
                f"max |d log-likelihood| {gap:.1e}")
        if first is None:
            first = right
        else:
            m, se = mean_se([a - b for a, b in zip(right, first)])
            line += f"; minus the first: {m:+.2f} ± {se:.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
