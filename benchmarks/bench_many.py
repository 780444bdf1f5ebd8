"""Many questions in one call: ``choose`` in a loop vs ``choose_many`` vs ``score_many`` with the
question template rebuilt by hand, on the same questions, side by side in one run.

The three give the same answers and scores, bit for bit (checked here); ``choose_many`` is
also timed in chunks of ``batch_size`` rows, as ``setllm choose --input`` calls it. Rounds
alternate between the ways so load drifts hit all alike; medians are printed.

Usage: python benchmarks/bench_many.py [--data-dir ../shared/data] [--n 50] [--repeats 3] [--threads 1]
(ARC-Challenge validation questions with four choices, the embedded model and its shipped adapter)
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from setllm import SetLLM, mc_prompt
from setllm.policy import pick
from setllm.tasks import get_task, load_records


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument("--n", type=int, default=50)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    records = [r for r in load_records(get_task("arc_challenge"), "validation", args.data_dir)[0] if len(r.choices) == 4][: args.n]
    rows = [(r.question, list(r.choices)) for r in records]
    lm = SetLLM.from_pretrained(threads=args.threads)

    def by_hand():
        scores = lm.score_many([mc_prompt(q, o) for q, o in rows], [o for _, o in rows])
        return [pick(s) for s in scores]

    def in_chunks():
        return [c for lo in range(0, len(rows), lm.batch_size) for c in lm.choose_many(rows[lo : lo + lm.batch_size])]

    ways = {"choose, one call per question": lambda: [lm.choose(q, o) for q, o in rows],
            "choose_many, one call": lambda: lm.choose_many(rows),
            f"choose_many, {lm.batch_size} rows a call (setllm choose --input)": in_chunks,
            "score_many, template by hand": by_hand}
    lm.choose_many(rows[:2])  # warm-up
    times: dict[str, list[float]] = {k: [] for k in ways}
    answers = {}
    for _ in range(args.repeats):
        for name, way in ways.items():
            start = time.perf_counter()
            answers[name] = way()
            times[name].append(time.perf_counter() - start)
    same = all(a == answers["choose, one call per question"] for a in answers.values())
    med = {k: statistics.median(v) for k, v in times.items()}
    loop = med["choose, one call per question"]
    print(f"# {len(rows)} questions ({platform.machine()}, {os.cpu_count()} CPUs, {args.threads} torch thread(s), "
          f"batch_size {lm.batch_size}, median of {args.repeats} rounds)\n")
    print("| way | seconds | vs the loop |")
    print("|---|---|---|")
    for name, t in med.items():
        print(f"| {name} | {t:.2f} | {loop / t:.2f}x |")
    print(f"\nthe same answers and scores, bit for bit, every way: {same}")


if __name__ == "__main__":
    main()
