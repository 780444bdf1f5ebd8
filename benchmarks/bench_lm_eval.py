"""lm-eval's ``--model hf`` and ``--model setllm`` side by side on one local task file.

1. Fidelity and speed: the first N ARC-Challenge test questions in lm-eval's classic
   template (no sets), through ``--model hf`` and ``--model setllm variant=causal-pe`` on the
   embedded model: accuracy, per-choice log-likelihood differences, wall time of each.
2. Invariance: the same questions in the paper's modified template (options as a set)
   through ``--model setllm`` (the shipped adapter, setmask-setpe), once as given and once
   with every question's options permuted: every option's log-likelihood and the accuracy.

Run:  flock /work/cpu.lock .venv/bin/python benchmarks/bench_lm_eval.py --n 100
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

PLAIN = """task: bench_plain
dataset_path: json
dataset_kwargs: {{data_files: {{test: {data}}}}}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
metric_list: [{{metric: acc, aggregation: mean, higher_is_better: true}}]
"""
SET = """task: {name}
dataset_path: json
dataset_kwargs: {{data_files: {{test: {data}}}}}
test_split: test
output_type: multiple_choice
doc_to_text: !function setllm.lm_eval.templates.records_text
doc_to_choice: !function setllm.lm_eval.templates.records_choices
doc_to_target: label
metric_list: [{{metric: acc, aggregation: mean, higher_is_better: true}}]
"""


def write_tasks(src: Path, n: int, folder: Path, seed: int = 0) -> None:
    rows = [json.loads(line) for line in src.read_text().splitlines()[:n]]
    rng = random.Random(seed)
    permuted = []
    for row in rows:
        order = list(range(len(row["choices"])))
        while order == sorted(order):  # a real permutation of every question
            rng.shuffle(order)
        permuted.append({**row, "choices": [row["choices"][i] for i in order], "label": order.index(row["label"])})
    for name, data in (("records", rows), ("permuted", permuted)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
    (folder / "plain.yaml").write_text(PLAIN.format(data=folder / "records.jsonl"))
    (folder / "warmup.yaml").write_text(PLAIN.replace("bench_plain", "bench_plain_warmup").format(data=folder / "warmup.jsonl"))
    (folder / "warmup.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    (folder / "set.yaml").write_text(SET.format(name="bench_set", data=folder / "records.jsonl"))
    (folder / "set_permuted.yaml").write_text(SET.format(name="bench_set_permuted", data=folder / "permuted.jsonl"))


def evaluate(lm, task: str, manager) -> tuple[dict, float, float]:
    """Run one task; returns lm-eval's output, wall time of the whole call and of the scoring calls."""
    import lm_eval

    spent = [0.0]
    score = lm.loglikelihood

    def timed(requests, *args, **kwargs):
        start = time.perf_counter()
        out = score(requests, *args, **kwargs)
        spent[0] += time.perf_counter() - start
        return out

    lm.loglikelihood = timed
    start = time.perf_counter()
    out = lm_eval.simple_evaluate(model=lm, tasks=[task], task_manager=manager, log_samples=True, bootstrap_iters=0)
    wall = time.perf_counter() - start
    del lm.loglikelihood
    return out, wall, spent[0]


def option_scores(out: dict, task: str) -> dict[tuple[str, str], float]:
    """``(question, option) -> log-likelihood`` over a run's logged samples."""
    scores = {}
    for sample in out["samples"][task]:
        for (ctx, cont), resp in zip(sample["arguments"], sample["resps"]):
            scores[(sample["doc"]["question"], cont)] = resp[0][0]
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="/work/shared/data/arc_challenge/test.jsonl", help="setllm-format JSONL records")
    parser.add_argument("--n", type=int, default=100, help="first N questions")
    parser.add_argument("--batch-size", type=int, nargs="+", default=[1, 8], help="batch sizes to time (lm-eval's --batch_size)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()

    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from setllm.lm_eval import SetLLMLM
    from setllm.loading import embedded_model_dir

    folder = Path(tempfile.mkdtemp(prefix="bench-lm-eval-"))
    write_tasks(Path(args.data), args.n, folder)
    manager = TaskManager(include_path=str(folder), include_defaults=False)
    model_dir = str(embedded_model_dir())
    report: dict = {"n": args.n, "data": args.data, "fidelity": []}

    for bs in args.batch_size:
        hf = HFLM(pretrained=model_dir, dtype="float32", device="cpu", batch_size=bs)
        ours = SetLLMLM(variant="causal-pe", batch_size=bs, device="cpu")
        for lm in (hf, ours):  # first calls pay one-off costs (kernels, allocator): not timed
            evaluate(lm, "bench_plain_warmup", manager)
        (hf_out, hf_wall, hf_ll), (our_out, our_wall, our_ll) = evaluate(hf, "bench_plain", manager), evaluate(ours, "bench_plain", manager)
        a, b = option_scores(hf_out, "bench_plain"), option_scores(our_out, "bench_plain")
        picks = [(s["resps"], t["resps"]) for s, t in zip(hf_out["samples"]["bench_plain"], our_out["samples"]["bench_plain"])]
        same_picks = sum(max(range(len(x)), key=lambda i: x[i][0][0]) == max(range(len(y)), key=lambda i: y[i][0][0]) for x, y in picks)
        row = {
            "batch_size": bs,
            "acc_hf": hf_out["results"]["bench_plain"]["acc,none"],
            "acc_setllm": our_out["results"]["bench_plain"]["acc,none"],
            "same_picks": same_picks,
            "choices": len(a),
            "max_abs_logprob_diff": max(abs(a[k] - b[k]) for k in a),
            "wall_s_hf": round(hf_wall, 2), "wall_s_setllm": round(our_wall, 2),
            "loglikelihood_s_hf": round(hf_ll, 2), "loglikelihood_s_setllm": round(our_ll, 2),
            "speedup_loglikelihood": round(hf_ll / our_ll, 2),
        }
        report["fidelity"].append(row)
        print(json.dumps(row), flush=True)
        del hf, ours

    lm = SetLLMLM(device="cpu")  # defaults: embedded model, shipped adapter, setmask-setpe, exact
    given, wall_given, _ = evaluate(lm, "bench_set", manager)
    permuted, wall_perm, _ = evaluate(lm, "bench_set_permuted", manager)
    a, b = option_scores(given, "bench_set"), option_scores(permuted, "bench_set_permuted")
    report["invariance"] = {
        "model": repr(lm.llm),
        "acc_given": given["results"]["bench_set"]["acc,none"],
        "acc_permuted": permuted["results"]["bench_set_permuted"]["acc,none"],
        "choices": len(a),
        "bit_identical_choices": sum(a[k] == b[k] for k in a),
        "max_abs_logprob_diff": max(abs(a[k] - b[k]) for k in a),
        "wall_s": [round(wall_given, 2), round(wall_perm, 2)],
    }
    print(json.dumps(report["invariance"]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
