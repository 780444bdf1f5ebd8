"""Training throughput: Set-LLM (setmask-setpe) vs the causal base (causal-pe), and the saving
from computing logits only on response tokens.

Every mode trains the same LoRA model on the same batches through the loss the trainer uses
(:func:`setllm.training.trainer.set_llm_loss`: forward, response-only loss, backward, AdamW
step). Modes run side by side: each round runs one step of every mode on the same batch, in
rotating order, so load from other processes hits all modes alike. Reported: median seconds
per step, real (non-padding) tokens per second over all counted steps, and the median of the
per-round ratio (same batch, so the least sensitive to load that comes and goes).

    python benchmarks/bench_train.py --data-dir ../shared/data --rounds 6

Not a test: numbers depend on the machine. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import torch

MODES = [  # (name, variant, logits only for the response)
    ("setmask-setpe", "setmask-setpe", True),
    ("causal-pe", "causal-pe", True),
    ("setmask-setpe, all logits", "setmask-setpe", False),
]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="base model (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--data", default="arc_challenge,piqa,commonsense_qa,social_iqa", help="data specs, as for setllm train")
    p.add_argument("--data-dir", default="../shared/data", help="local data directory")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--rounds", type=int, default=6, help="steps per mode (the first round is warm-up, not counted)")
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    return p.parse_args(argv)


def batches(lm_by_variant: dict, args) -> list[dict]:
    """``rounds`` batches per variant, from the same examples (a seeded sample)."""
    from setllm.training.collator import SetCollator, featurize
    from setllm.training.examples import load_examples

    n = args.batch_size * args.rounds
    examples, _ = load_examples(args.data.split(","), args.data_dir, limit=n, sample_seed=0)
    examples = examples[:: max(1, len(examples) // n)][:n]  # a mix of all sources
    out = {}
    for name, lm in lm_by_variant.items():
        feats, _ = featurize(lm, examples, args.max_length)
        collator = SetCollator(lm.variant.positions, lm.pad_id)
        out[name] = [collator(feats[i : i + args.batch_size]) for i in range(0, len(feats), args.batch_size)]
    return out


def step(lm, optimizer, batch: dict, logits_only: bool) -> float:
    from setllm.training.trainer import set_llm_loss

    start = time.perf_counter()
    loss, _ = set_llm_loss(lm.model, lm.variant, batch, logits_only_for_response=logits_only)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from peft import LoraConfig, get_peft_model

    from setllm.api import SetLLM
    from setllm.loading import load_model

    model, tok = load_model(args.model)
    torch.manual_seed(42)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=1, target_modules="all-linear", task_type="CAUSAL_LM"))
    model.train()
    # One model, one optimizer for all modes: the modes differ only in how the batch is read.
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6, weight_decay=0.0)
    lms = {v: SetLLM(model, tok, v) for v in {m[1] for m in MODES}}
    data = batches(lms, args)
    times = {name: [] for name, _, _ in MODES}
    tokens = {name: [] for name, _, _ in MODES}
    for r in range(min(len(b) for b in data.values())):
        order = MODES[r % len(MODES):] + MODES[: r % len(MODES)]
        for name, variant, logits_only in order:
            batch = data[variant][r]
            dt = step(lms[variant], optimizer, batch, logits_only)
            if r > 0:  # round 0 warms up allocators and kernels
                times[name].append(dt)
                tokens[name].append(int(batch["valid"].sum()))
        print(f"round {r}: " + ", ".join(f"{n} {times[n][-1]:.2f}s" for n, _, _ in MODES if times[n]), file=sys.stderr)
    report(args, times, tokens)
    return 0


def report(args, times: dict, tokens: dict) -> None:
    rows = {}
    for name in times:
        rows[name] = {"median_s_per_step": statistics.median(times[name]),
                      "tokens_per_s": sum(tokens[name]) / sum(times[name]), "steps": len(times[name])}
    set_tps, causal_tps = rows["setmask-setpe"]["tokens_per_s"], rows["causal-pe"]["tokens_per_s"]
    # Paired per round (same batch, same tokens): robust to load that comes and goes.
    paired = [c / s for c, s in zip(times["causal-pe"], times["setmask-setpe"])]
    summary = {
        "hardware": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, fp32",
        "model": args.model or "embedded SmolLM2-135M-Instruct", "batch_size": args.batch_size, "data": args.data,
        "modes": rows,
        "setllm_vs_causal_tokens_per_s_ratio": set_tps / causal_tps,
        "setllm_vs_causal_paired_median_ratio": statistics.median(paired),
        "logits_only_for_response_speedup": rows["setmask-setpe"]["tokens_per_s"] / rows["setmask-setpe, all logits"]["tokens_per_s"],
    }
    print(json.dumps(summary, indent=2))
    print("\n| mode | median s/step | tokens/s |\n|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {row['median_s_per_step']:.2f} | {row['tokens_per_s']:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
