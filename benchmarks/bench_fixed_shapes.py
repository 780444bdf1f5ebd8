"""What the fixed shapes of `setllm.core.forward.scoring.score_requests` cost and buy, side by side in one run.

Eight different multiple-choice questions (those of bench_serve.py) on the embedded model,
scored three ways, each repeated and the median taken:

- alone, fixed shapes (linear layers in blocks of MATMUL_ROWS = 64 rows, the last padded), as
  the library, `setllm choose` and an unbatched server run it;
- alone, without the row blocks (one product per layer, of whatever row count): what a lone
  question would cost without the guarantee;
- all eight in one call, fixed shapes, as a batching server runs them.

Also checks that the eight scored together equal the eight scored alone, bit for bit.

Usage: python benchmarks/bench_fixed_shapes.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_serve import QUESTIONS  # noqa: E402

from setllm import SetLLM, mc_prompt  # noqa: E402
from setllm.core.forward import scoring


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    lm = SetLLM.from_pretrained()
    requests = [scoring.ScoreRequest(lm.encode(mc_prompt(q, o)), [lm.response_ids(mc_prompt(q, o), x) for x in o]) for q, o in QUESTIONS]

    def run(reqs):
        return scoring.score_requests(lm.model, lm.variant, lm.pad_id, reqs)

    alone = [run([r])[0] for r in requests]
    together = run(requests)
    same = together == alone
    t_fixed = timed(lambda: [run([r]) for r in requests], args.repeats)
    t_batch = timed(lambda: run(requests), args.repeats)
    rows, blocked = scoring.MATMUL_ROWS, scoring.fixed_row_linears
    scoring.fixed_row_linears = lambda model, rows, head_rows: contextlib.nullcontext()  # each layer's plain product
    try:
        t_one = timed(lambda: [run([r]) for r in requests], args.repeats)
    finally:
        scoring.fixed_row_linears = blocked
    n = len(requests)
    print(f"# fixed shapes of score_requests ({platform.machine()}, {os.cpu_count()} CPUs, torch threads {__import__('torch').get_num_threads()}; "
          f"{n} questions, median of {args.repeats})\n")
    print("| how | seconds per question | relative to alone, no row blocks |")
    print("|---|---|---|")
    for name, t in (("alone, no row blocks (no guarantee)", t_one), (f"alone, fixed shapes (blocks of {rows} rows)", t_fixed),
                    (f"all {n} together, fixed shapes", t_batch)):
        print(f"| {name} | {t / n:.3f} | {t / t_one:.2f} |")
    print(f"\n- the {n} questions scored together equal the {n} scored alone, bit for bit: **{'yes' if same else 'NO'}**")


if __name__ == "__main__":
    main()
