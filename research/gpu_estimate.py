"""GPU-hours of the paper's full reproduction (docs/gpu.md), estimated from FLOP counts.

Tokens are counted, not guessed: every training example and every evaluation prompt is
encoded by setllm's own codec with the SmolLM2 tokenizer (the embedded model's), exactly as
``setllm train`` / ``setllm eval`` encode them (prompt, then the response or each option
with EOS; one prefill per question, options after it). FLOPs are 6 * N * tokens for
training and 2 * N * tokens for evaluation; hours = FLOPs / (peak * utilisation), with the
peak and the utilisation stated (assumptions, printed with the result).

    python research/gpu_estimate.py --data-dir ../shared/data [--sample 2000] [--json out.json]

What each table runs is read off ``research/reproduce.sh`` (training stages and
evaluation passes per table), at the paper's budgets: every stage 3000 steps of 100
examples, full evaluation splits.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # report_io, shared with the speed scripts
from report_io import emit  # noqa: E402

from setllm import SetLLM  # noqa: E402
from setllm.core.layout.variants import VARIANTS  # noqa: E402
from setllm.evaluation.orderings import identity  # noqa: E402
from setllm.tasks import get_task, load_records  # noqa: E402
from setllm.training.collator import featurize  # noqa: E402
from setllm.training.examples import Example, load_examples  # noqa: E402

DATASETS = ("piqa", "arc_challenge", "commonsense_qa", "social_iqa")
STEPS, EXAMPLES_PER_STEP = 3000, 100
MAX_LENGTH = 512  # the GPU recipe's --max-length (UltraFeedback responses are long)
CSQA_ORDERINGS = 24  # the paper: the first 24 of 120
PARAMS = {"gemma-2b": 2.51e9, "smollm2-135m": 1.35e8}  # all parameters (embedding tied to the LM head)
# H100 SXM, dense (no sparsity): bf16 tensor cores, fp32 without TF32 (torch's default for fp32 matmuls).
PEAK = {"bf16": 989e12, "fp32": 67e12}
UTILISATION = {"bf16": 0.30, "fp32": 0.50}  # assumed: short LoRA sequences in bf16; fp32 SIMT matmuls


def mean_train_tokens(lm, examples: list[Example]) -> float:
    feats, _ = featurize(lm.codec, examples, MAX_LENGTH)
    return statistics.fmean(len(f["input_ids"]) for f in feats)


def original_examples(name: str, data_dir: str, sample: int) -> list[Example]:
    """The original template's training pairs (question only, the answer as the response)."""
    task = get_task(name)
    records, _ = load_records(task, "train", data_dir, None, sample, 42)
    out = []
    for r in records:
        rendered = task.original.render(r, identity(len(r.choices)))
        out.append(Example(rendered.prompt, rendered.options[r.label], r.id))
    return out


def eval_tokens(lm, name: str, template: str, data_dir: str) -> tuple[int, float, int]:
    """(questions, prompt + option tokens of one run per question, summed; orderings per question, mean)."""
    task = get_task(name)
    records, _ = load_records(task, None, data_dir, None, None, None)
    tpl = task.template(template)
    tokens, orderings = 0, 0
    for r in records:
        rendered = tpl.render(r, identity(len(r.choices)))
        enc = lm.codec.encode(rendered.prompt)
        tokens += len(enc) + sum(len(lm.codec.response_ids(rendered.prompt, o, eos=True)) for o in rendered.options)
        orderings += min(math.factorial(len(r.choices)), CSQA_ORDERINGS)
    return len(records), tokens, orderings / len(records)


def count(data_dir: str, sample: int) -> dict:
    lm = SetLLM.from_pretrained(None, adapter=None, variant="setmask-setpe")
    train = {"ultrafeedback": mean_train_tokens(lm, load_examples(["ultrafeedback"], data_dir)[0])}
    for name in DATASETS:
        examples, _ = load_examples([name], data_dir, sample, 42)
        train[name] = mean_train_tokens(lm, examples)
        train[f"{name}-original"] = mean_train_tokens(lm, original_examples(name, data_dir, sample))
    evals = {}
    for name in DATASETS:
        for template in ("modified", "original"):
            n, tokens, k = eval_tokens(lm, name, template, data_dir)
            evals[f"{name}-{template}"] = {"questions": n, "tokens_one_run": tokens, "orderings_mean": round(k, 3)}
    return {"train_mean_tokens": train, "eval": evals}


def tables(counts: dict) -> dict:
    """Training stages and evaluation token totals per table, as research/reproduce.sh runs them."""
    t, e = counts["train_mean_tokens"], counts["eval"]
    stage = lambda data: STEPS * EXAMPLES_PER_STEP * t[data]  # noqa: E731
    one = lambda ds, tpl="modified": e[f"{ds}-{tpl}"]["tokens_one_run"]  # noqa: E731
    every = lambda ds: one(ds) * e[f"{ds}-modified"]["orderings_mean"]  # noqa: E731  all (tested) orderings
    out = {}
    # A: two Ultra stages; per dataset one original-template and four modified-template stages;
    # evaluations: original x2 (1 run), causal modified x3 and the verified Set-LLM (every
    # ordering), Set-LLM x2 (1 run).
    out["A"] = {"train_tokens": 2 * stage("ultrafeedback") + sum(stage(f"{ds}-original") + 4 * stage(ds) for ds in DATASETS),
                "eval_tokens": sum(2 * one(ds, "original") + 4 * every(ds) + 2 * one(ds) for ds in DATASETS), "stages": 22}
    # B: four more ARC variants (causal-pe and setmask-setpe are A's); six ARC evaluations.
    out["B"] = {"train_tokens": 4 * stage("arc_challenge"),
                "eval_tokens": sum(one("arc_challenge") if v.invariant else every("arc_challenge") for v in VARIANTS.values()), "stages": 4}
    # C: reads Table A's ARC runs: nothing new to run.
    out["C"] = {"train_tokens": 0, "eval_tokens": 0, "stages": 0}
    # D: each dataset's two Ultra adapters (A's) on the three other datasets.
    out["D"] = {"train_tokens": 0, "eval_tokens": sum(3 * (every(ds) + one(ds)) for ds in DATASETS), "stages": 0}
    return out


def hours(flops: float, precision: str) -> float:
    return flops / (PEAK[precision] * UTILISATION[precision]) / 3600


def estimate(counts: dict, model: str) -> dict:
    n = PARAMS[model]
    rows = {}
    for name, tab in tables(counts).items():
        train_flops, eval_flops = 6 * n * tab["train_tokens"], 2 * n * tab["eval_tokens"]
        rows[name] = {**tab, "train_flops": train_flops, "eval_flops": eval_flops,
                      "train_h100_hours": round(hours(train_flops, "bf16"), 2), "eval_h100_hours": round(hours(eval_flops, "fp32"), 2)}
        rows[name]["total_h100_hours"] = round(rows[name]["train_h100_hours"] + rows[name]["eval_h100_hours"], 2)
    # Cross-check against the paper's one measured time (Table 21, H200, Gemma 2B, fp32,
    # whole ARC test, one causal run per question: 357.63 s): the throughput it implies.
    arc = 2 * n * counts["eval"]["arc_challenge-modified"]["tokens_one_run"]
    return {"model": model, "params": n, "tables": rows, "paper_arc_single_run_implied_tflops": round(arc / 357.63 / 1e12, 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--sample", type=int, default=2000, help="training examples per benchmark whose tokens are counted (seeded)")
    p.add_argument("--json", help="also write the counts and estimates here")
    args = p.parse_args()
    started = time.perf_counter()
    counts = count(args.data_dir, args.sample)
    result = {"counts": counts, "assumptions": {"steps": STEPS, "examples_per_step": EXAMPLES_PER_STEP, "max_length": MAX_LENGTH,
                                                "peak_flops": PEAK, "utilisation": UTILISATION, "tokenizer": "SmolLM2 (embedded model)"},
              "estimates": [estimate(counts, m) for m in PARAMS], "seconds": round(time.perf_counter() - started, 1)}
    emit(result, args.json)


if __name__ == "__main__":
    main()
