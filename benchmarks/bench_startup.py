"""Start-up cost of the CLI, measured side by side in one run (issue 9, item 13).

(a) ``setllm --help`` vs ``python -c "import torch"``: the CLI must not import the trainer,
    accelerate or peft just to print help (target: ratio <= 1.0 within noise).
(b) a warm ``setllm choose`` (embedded model + shipped adapter, already converted) vs a bare
    script doing the same work by hand: import torch + transformers, load the converted model,
    one scoring forward (target: ratio <= 1.5).

Each command runs ``--repeats`` times, alternating, in fresh processes; medians are reported.
Usage: python benchmarks/bench_startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

QUESTION = ["Which city is the capital of France?", "--options", "Budapest", "Paris", "Zurich", "Rome"]

# The same work `setllm choose` does, minus setllm: load the converted model, score 4 options.
BARE = """
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from setllm.loading import embedded_model_dir
path = embedded_model_dir()
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
text = "Question: Which city is the capital of France?\\n\\nChoices:\\nBudapest\\nParis\\nZurich\\nRome\\nAnswer:"
with torch.no_grad():
    for opt in ["Budapest", "Paris", "Zurich", "Rome"]:
        ids = tok(text + " " + opt, return_tensors="pt").input_ids
        model(ids)
"""


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return time.perf_counter() - start


def side_by_side(a: list[str], b: list[str], repeats: int) -> tuple[float, float]:
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(timed(a))
        tb.append(timed(b))
    return statistics.median(ta), statistics.median(tb)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    setllm = [sys.executable, "-m", "setllm"]
    timed([*setllm, "choose", *QUESTION])  # warm: conversion and file caches
    help_s, torch_s = side_by_side([*setllm, "--help"], [sys.executable, "-c", "import torch"], args.repeats)
    choose_s, bare_s = side_by_side([*setllm, "choose", *QUESTION], [sys.executable, "-c", BARE], args.repeats)
    print(f"# CLI start-up ({platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, medians of {args.repeats})\n")
    print("| measure | setllm (s) | baseline (s) | ratio | target |")
    print("|---|---|---|---|---|")
    print(f"| `setllm --help` vs `import torch` | {help_s:.2f} | {torch_s:.2f} | {help_s / torch_s:.2f} | <= 1.0 |")
    print(f"| warm `setllm choose` vs torch + load + score | {choose_s:.2f} | {bare_s:.2f} | {choose_s / bare_s:.2f} | <= 1.5 |")


if __name__ == "__main__":
    main()
