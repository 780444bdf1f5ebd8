"""Cost of one Set-LLM verdict vs the causal judge run in both orders, side by side.

The same pairs, the same model and batch size: ``setmask-setpe`` judges each pair once (the
verdict cannot depend on the order); ``causal-pe`` must judge it in both orders to be fair
(the both-orders aggregate). Reports seconds and forward passes per pair and the ratio
(target <= 0.55). Rounds alternate between the two so machine noise hits both alike.

Usage: python benchmarks/bench_judge.py --pairs F.jsonl [--n 32] [--rounds 3] [--adapter none]
(F: judge rows, e.g. from research/judge_short_pairs.py)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

from setllm import SetLLM


def judge_time(lm: SetLLM, rows: list[dict], both_orders: bool) -> float:
    batch = [(r["instruction"], r["candidates"], r.get("input")) for r in rows]
    start = time.perf_counter()
    lm.judge_many(batch)
    if both_orders:
        lm.judge_many([(i, c[::-1], x) for i, c, x in batch])
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", required=True)
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--adapter", default="none", help="'none' (default) or an adapter dir, for both judges")
    args = p.parse_args()
    rows = [json.loads(line) for line in open(args.pairs, encoding="utf-8")][: args.n]
    adapter = None if args.adapter == "none" else args.adapter
    base = SetLLM.from_pretrained(adapter=adapter, variant="setmask-setpe")
    judges = {"setmask-setpe, one order": (base, False), "causal-pe, both orders": (base.with_variant("causal-pe"), True)}
    judge_time(base, rows[:2], False)  # warm-up
    times: dict[str, list[float]] = {k: [] for k in judges}
    for _ in range(args.rounds):
        for name, (lm, both) in judges.items():
            times[name].append(judge_time(lm, rows, both))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"# Judge cost ({platform.machine()}, {os.cpu_count()} CPUs, {len(rows)} pairs, median of {args.rounds} rounds)\n")
    print("| judge | forward passes per pair | s per pair |")
    print("|---|---|---|")
    for name, (_, both) in judges.items():
        print(f"| {name} | {2 if both else 1} prefill + {4 if both else 2} continuations | {med[name] / len(rows):.3f} |")
    ratio = med["setmask-setpe, one order"] / med["causal-pe, both orders"]
    print(f"\nratio Set-LLM / causal both orders: **{ratio:.2f}** (target <= 0.55)")


if __name__ == "__main__":
    main()
