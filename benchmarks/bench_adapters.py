"""One base model under every adapter: memory, scores and time against merged copies.

Three measurements, side by side in one run:

1. **Peak RSS** (each in its own process, read with ``os.wait4``): one ``setllm choose``
   (the embedded model, its choose adapter merged); ``setllm serve`` with its three shipped
   adapters on one copy of the weights (an :class:`setllm.AdapterBank`), after one request
   per adapter (choose, judge, documents, and the base model); and, for reference, one
   process holding a merged copy per adapter (how the server held choose + judge before).
   Target: serve <= 1.25x choose.
2. **Scores**: each shipped adapter's bank view against the same adapter merged, on the
   options of ten short questions: the largest difference of an option's summed
   log-likelihood, per token, and how many answers differ. Target: within 1e-5 per token.
3. **Scoring time**: bank view / merged model on the same questions, interleaved repeats
   (an unmerged adapter adds two rank-r products per linear layer).

Usage: python benchmarks/bench_adapters.py [--repeats 3] [--threads N] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import time

import httpx
from bench_serve import start_server
from report_io import emit

QUESTIONS = [(f"Which of these is {kind}?", options) for kind, options in [
    ("a fruit", ["apple", "dog", "car", "stone"]), ("a colour", ["red", "table", "river"]), ("an animal", ["chair", "horse", "cloud"]),
    ("a city", ["Paris", "banana", "winter"]), ("a number", ["seven", "green", "lamp"]), ("a tool", ["hammer", "lake", "song"]),
    ("a season", ["autumn", "pencil", "cat"]), ("a planet", ["Mars", "shoe", "bread"]), ("a drink", ["coffee", "brick", "moon"]),
    ("a metal", ["iron", "tulip", "poem"]),
]]
CHOOSE = {"question": "Which city is the capital of France?", "options": ["Budapest", "Paris", "Zurich"]}
JUDGE = {"instruction": "Name a colour.", "candidates": ["Red.", "A dog."]}
DOCUMENTS = "Documents:\n{{Document: The code for X is 41.\n||Document: The code for Y is 17.\n}}Question: What is the code for Y?\nAnswer:"


def peak_rss_mb(proc: subprocess.Popen) -> float:
    """The child's peak RSS, reaped here (``Popen.wait`` would discard its rusage)."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, -signal.SIGTERM):  # serve exits 0 on SIGTERM; anything else is a failed measurement
        sys.exit(f"{proc.args}: exited with {proc.returncode}")
    return usage.ru_maxrss / 1024


def choose_rss() -> float:
    q, opts = CHOOSE["question"], CHOOSE["options"]
    proc = subprocess.Popen([sys.executable, "-m", "setllm", "choose", q, "--options", *opts], stdout=subprocess.DEVNULL)
    return peak_rss_mb(proc)


def serve_rss() -> tuple[float, dict]:
    proc, url = start_server(["--max-batch-size", "8"])
    answers = {
        "choose": httpx.post(f"{url}/v1/choose", json=CHOOSE, timeout=120).json()["answer"],
        "judge": httpx.post(f"{url}/v1/judge", json=JUDGE, timeout=120).json()["best"],
        "documents": httpx.post(f"{url}/v1/generate", json={"prompt": DOCUMENTS, "max_new_tokens": 4, "stop": ["\n"],
                                                            "adapter": "documents"}, timeout=120).json()["text"],
        "base": httpx.post(f"{url}/v1/choose", json={**CHOOSE, "adapter": "base"}, timeout=120).json()["answer"],
        "models": [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]],
    }
    proc.send_signal(signal.SIGTERM)
    proc.stderr.read()
    return peak_rss_mb(proc), answers


def merged_copies_rss(kinds: list[str]) -> float:
    code = ("import sys; from setllm import SetLLM\n"
            "lms = [SetLLM.from_pretrained(kind=k) for k in sys.argv[1:]]\n"
            "[lm.choose('Which city is the capital of France?', ['Budapest', 'Paris', 'Zurich']) for lm in lms]\n")
    return peak_rss_mb(subprocess.Popen([sys.executable, "-c", code, *kinds]))


def score_all(lm) -> list[list[tuple[float, int]]]:
    from setllm import mc_prompt

    out = lm.score_many([mc_prompt(q, o) for q, o in QUESTIONS], [o for _, o in QUESTIONS])
    return [[(s.logprob, s.n_tokens) for s in row] for row in out]


def compare_scores(bank, kinds: list[str], repeats: int) -> dict:
    from setllm import SetLLM

    report = {}
    for kind in kinds:
        merged, view = SetLLM.from_pretrained(kind=kind), bank[kind]
        a, b = score_all(view), score_all(merged)
        diffs = [abs(x[0] - y[0]) for ra, rb in zip(a, b) for x, y in zip(ra, rb)]
        per_token = [abs(x[0] - y[0]) / x[1] for ra, rb in zip(a, b) for x, y in zip(ra, rb)]
        picks = sum(max(range(len(ra)), key=lambda i: ra[i][0]) != max(range(len(rb)), key=lambda i: rb[i][0]) for ra, rb in zip(a, b))
        times = {"bank": [], "merged": []}
        for r in range(repeats):  # interleaved, the first alternating
            for name, lm in ([("bank", view), ("merged", merged)] if r % 2 == 0 else [("merged", merged), ("bank", view)]):
                start = time.perf_counter()
                score_all(lm)
                times[name].append(time.perf_counter() - start)
        t_bank, t_merged = statistics.median(times["bank"]), statistics.median(times["merged"])
        report[kind] = {"options": len(diffs), "max_abs_diff_sum": max(diffs), "max_abs_diff_per_token": max(per_token),
                        "bit_identical_options": sum(d == 0 for d in diffs), "answers_changed": picks,
                        "time_bank_s": round(t_bank, 3), "time_merged_s": round(t_merged, 3), "time_ratio_bank_over_merged": round(t_bank / t_merged, 3)}
        del merged
    return report


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="timed rounds of each reading (median)")
    p.add_argument("--threads", type=int, default=None, help="torch threads of every process (default: torch's)")
    p.add_argument("--json", help="write the report here too")
    args = p.parse_args()
    if args.threads:
        os.environ["SETLLM_THREADS"] = str(args.threads)
    os.environ["HF_HUB_OFFLINE"] = "1"
    from setllm import AdapterBank
    from setllm.bank import shipped_adapters
    from setllm.loading.options import apply_threads

    kinds = list(shipped_adapters())
    rss = {"choose": choose_rss()}
    rss["serve"], answers = serve_rss()
    rss["merged_copies_choose_judge"] = merged_copies_rss(["choose", "judge"])
    apply_threads(args.threads)
    scores = compare_scores(AdapterBank.from_pretrained(), kinds, args.repeats)
    report = {"benchmark": "bench_adapters", "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.processor() or platform.machine()}, "
              f"{os.cpu_count()} CPUs", "threads": args.threads, "adapters": kinds, "peak_rss_mb": {k: round(v, 1) for k, v in rss.items()},
              "serve_over_choose": round(rss["serve"] / rss["choose"], 3),
              "merged_copies_over_choose": round(rss["merged_copies_choose_judge"] / rss["choose"], 3),
              "served_answers": answers, "scores": scores}
    print("| process | peak RSS MB | / choose |\n|---|---|---|")
    for name, mb in rss.items():
        print(f"| {name} | {mb:.1f} | {mb / rss['choose']:.2f} |")
    print("\n| adapter | options | max diff (sum) | max diff per token | identical | answers changed | bank s | merged s | bank/merged |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind, r in scores.items():
        print(f"| {kind} | {r['options']} | {r['max_abs_diff_sum']:.2e} | {r['max_abs_diff_per_token']:.2e} | {r['bit_identical_options']} | "
              f"{r['answers_changed']} | {r['time_bank_s']} | {r['time_merged_s']} | {r['time_ratio_bank_over_merged']} |")
    emit(report, args.json)


if __name__ == "__main__":
    main()
