"""Merged or unmerged adapters: what each reading costs beside plain transformers.

Each reading runs in its own process (peak RSS read with ``os.wait4``) and times scoring
calls after one warm-up call (median of ``--repeats``):

- ``plain``: transformers alone, the embedded base model, each question's prompt + option +
  EOS rows in one forward (a causal log-likelihood, no setllm);
- ``setllm-none``: ``SetLLM.from_pretrained(adapter=None)``, Set-LLM's reading without adapter;
- ``merged``: the choose adapter folded into the weights (PEFT ``merge_and_unload``);
- ``unmerged``: the choose adapter kept beside the weights (PEFT's LoRA layers,
  ``W x + B (A x)``), one adapter: what ``SetLLM.from_pretrained()`` loads;
- ``bank``: the choose view of an ``AdapterBank`` holding every shipped adapter (what the
  default ``setllm serve`` reads);
- ``merged-copies``: a merged copy per shipped adapter (choose, judge, documents), what a
  default server would hold if every surface merged, timed on the choose copy.

Two calls are timed: ``choose`` (the README's question, one call) and ``score10`` (ten short
questions in one ``score`` call). The choose scores are printed with all their digits, so
which readings give the same bits shows too.

Usage: python benchmarks/bench_merge.py [--repeats 7] [--json FILE]   (set SETLLM_THREADS=1 on a shared machine)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

READINGS = ("plain", "setllm-none", "merged", "unmerged", "bank", "merged-copies")
QUESTION, OPTIONS = "Which city is the capital of France?", ["Budapest", "Paris", "Zurich"]
QUESTIONS = [(f"Which of these is {kind}?", options) for kind, options in [
    ("a fruit", ["apple", "dog", "car", "stone"]), ("a colour", ["red", "table", "river"]), ("an animal", ["chair", "horse", "cloud"]),
    ("a city", ["Paris", "banana", "winter"]), ("a number", ["seven", "green", "lamp"]), ("a tool", ["hammer", "lake", "song"]),
    ("a season", ["autumn", "pencil", "cat"]), ("a planet", ["Mars", "shoe", "bread"]), ("a drink", ["coffee", "brick", "moon"]),
    ("a metal", ["iron", "tulip", "poem"]),
]]


def plain_scorer():
    """Transformers alone: the base model scores each option after the prompt, causally."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from setllm import mc_prompt
    from setllm.loading.sources import resolve

    path = resolve(None)
    tok, net = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    @torch.no_grad()
    def score(questions):  # every option row of every question in one right-padded forward
        rows, starts = [], []
        for q, opts in questions:
            prompt = tok(mc_prompt(q, opts).text())["input_ids"]
            rows += [prompt + tok(" " + o)["input_ids"] + [tok.eos_token_id] for o in opts]
            starts += [len(prompt)] * len(opts)
        width = max(map(len, rows))
        ids = torch.tensor([r + [tok.eos_token_id] * (width - len(r)) for r in rows])
        logp = net(ids).logits.log_softmax(-1)
        flat = [float(logp[i, s - 1 : len(r) - 1].gather(-1, ids[i, s : len(r), None]).sum()) for i, (r, s) in enumerate(zip(rows, starts))]
        out, at = [], 0
        for _, opts in questions:
            out.append(flat[at : at + len(opts)])
            at += len(opts)
        return out

    return score, lambda: score([(QUESTION, OPTIONS)])[0]


def setllm_scorer(reading: str):
    from setllm import AdapterBank, SetLLM, default_adapter, mc_prompt
    from setllm.loading import load_model

    held = None
    if reading == "setllm-none":
        lm = SetLLM.from_pretrained(adapter=None, variant="setmask-setpe")
    elif reading in ("merged", "merged-copies"):
        kinds = ["choose", "judge", "documents"] if reading == "merged-copies" else ["choose"]
        held = [SetLLM(*load_model(None, str(default_adapter(k)), merge=True)) for k in kinds]  # all alive while timed
        lm = held[0]
    elif reading == "unmerged":
        lm = SetLLM.from_pretrained()
    else:
        lm = AdapterBank.from_pretrained()["choose"]

    def score(questions):
        assert held is None or held[0] is lm
        return lm.score_many([mc_prompt(q, o) for q, o in questions], [o for _, o in questions])

    return score, lambda: [s.logprob for s in lm.choose(QUESTION, OPTIONS).scores]


def child(reading: str, repeats: int) -> dict:
    score, choose = plain_scorer() if reading == "plain" else setllm_scorer(reading)
    first = choose()  # warm-up; these are the bits compared
    score(QUESTIONS)
    times = {"choose": [], "score10": []}
    for _ in range(repeats):
        for name, call in (("choose", choose), ("score10", lambda: score(QUESTIONS))):
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {"choose_scores": [repr(x) for x in first], **{f"{k}_ms": round(1000 * statistics.median(v), 1) for k, v in times.items()}}


def run(reading: str, repeats: int) -> dict:
    proc = subprocess.Popen([sys.executable, __file__, "--child", reading, "--repeats", str(repeats)], stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{reading}: the measuring process failed")
    return {**json.loads(out), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7, help="timed calls of each kind per reading (median)")
    p.add_argument("--json", help="write the report here too")
    p.add_argument("--child", choices=READINGS, help=argparse.SUPPRESS)
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.child:
        print(json.dumps(child(args.child, args.repeats)))
        return
    results = {r: run(r, args.repeats) for r in READINGS}
    print("| reading | choose ms | / plain | 10 questions ms | / plain | peak RSS MB | / plain |\n|---|---|---|---|---|---|---|")
    base = results["plain"]
    for r, m in results.items():
        print(f"| {r} | {m['choose_ms']} | {m['choose_ms'] / base['choose_ms']:.2f} | {m['score10_ms']} | "
              f"{m['score10_ms'] / base['score10_ms']:.2f} | {m['peak_rss_mb']} | {m['peak_rss_mb'] / base['peak_rss_mb']:.2f} |")
    print("\nchoose scores (Budapest, Paris, Zurich):")
    for r, m in results.items():
        print(f"  {r}: {', '.join(m['choose_scores'])}")
    report = {"benchmark": "bench_merge", "date": time.strftime("%Y-%m-%d"), "threads": os.environ.get("SETLLM_THREADS"),
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs", "readings": results}
    if args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
