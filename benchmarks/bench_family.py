"""Set-LLM vs the base model on one model family: scoring time and peak memory, side by side.

(a) time: the same questions scored under setmask-setpe and causal-pe (options in the
    dataset's order), one model in memory, runs alternating, medians;
(b) peak memory: each variant scores the same questions in a process of its own; each
    process reports its RSS after loading and its peak RSS while scoring (the peak is reset
    after the load); the difference is what scoring itself holds at its peak (activations,
    KV cache, logits);
(c) head blocks: Set-LLM scoring with the option logits read in WIDE_HEAD_ROWS-row blocks
    (what a vocabulary past WIDE_VOCAB gets) vs HEAD_ROWS-row blocks, alternating;
(d) every order-invariant reading of the untrained model beside the base model's one forward
    (causal-pe, options in the dataset's order): canonical order, Set-Based Prompting,
    Set-LLM; time as in (a), peak memory as in (b), each over causal-pe's. The causal model's
    mean or majority over k orderings costs k of its forwards.

Usage: python benchmarks/bench_family.py --model gemma3-270m [--dataset piqa --n 40 --subset-seed 1]
       [--repeats 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys

import torch
from bench_core import alternate  # benchmarks/, this script's folder
from report_io import emit

from setllm import SetLLM, mc_prompt
from setllm.tasks import get_task, load_records

VARIANTS = ("causal-pe", "setmask-setpe")
READINGS = ("causal-pe", "canonical", "sbp", "setmask-setpe")


def questions(dataset: str, data_dir: str, n: int, seed: int):
    import random

    records = load_records(get_task(dataset), "validation", data_dir)[0]
    records = random.Random(seed).sample(records, min(n, len(records)))
    return [mc_prompt(r.question, r.choices) for r in records], [list(r.choices) for r in records]


def status_mb(field: str) -> float:
    """A memory line of /proc/self/status (Linux), MB: VmRSS now, VmHWM the peak."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith(field + ":"))
    return int(line.split()[1]) / 1024


def child(args) -> None:
    """One variant alone: load, reset the peak, score, report RSS after load and the peak
    while scoring (MB). Writing 5 to clear_refs resets the kernel's peak (VmHWM), so the
    load's own peak (reading the weights) is not counted."""
    lm = SetLLM.from_pretrained(args.model, adapter=None, variant=args.child, batch_size=8, progress=False)
    loaded = status_mb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    prompts, options = questions(args.dataset, args.data_dir, args.n, args.subset_seed)
    lm.score_many(prompts, options)
    print(json.dumps({"variant": args.child, "rss_after_load_mb": loaded, "peak_rss_mb": status_mb("VmHWM")}))


def peak(args, variant: str) -> dict:
    """:func:`child` for ``variant`` in a process of its own: RSS after load, peak while scoring, their difference (MB)."""
    cmd = [sys.executable, __file__, "--child", variant, "--dataset", args.dataset, "--data-dir", args.data_dir,
           "--n", str(args.n), "--subset-seed", str(args.subset_seed)] + (["--model", args.model] if args.model else [])
    rec = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
    out = {k: round(x, 1) for k, x in rec.items() if k != "variant"}
    return out | {"scoring_mb": round(rec["peak_rss_mb"] - rec["rss_after_load_mb"], 1)}


def memory(args) -> dict:
    out = {v: peak(args, v) for v in VARIANTS}
    s, c = out["setmask-setpe"], out["causal-pe"]
    out["ratio_peak_setllm_over_base"] = round(s["peak_rss_mb"] / c["peak_rss_mb"], 3)
    return out


def timing(args) -> dict:
    lm = SetLLM.from_pretrained(args.model, adapter=None, variant="setmask-setpe", batch_size=8, progress=False)
    base = lm.with_variant("causal-pe")
    prompts, options = questions(args.dataset, args.data_dir, args.n, args.subset_seed)
    t = alternate({"setllm": lambda: lm.score_many(prompts, options), "base": lambda: base.score_many(prompts, options)}, args.repeats)
    return {**{k: round(v, 3) for k, v in t.items()}, "ratio_setllm_over_base": round(t["setllm"] / t["base"], 3)}


def head_blocks(args) -> dict:
    from setllm.core.forward import scoring

    lm = SetLLM.from_pretrained(args.model, adapter=None, variant="setmask-setpe", batch_size=8, progress=False)
    prompts, options = questions(args.dataset, args.data_dir, args.n, args.subset_seed)
    wide = scoring.WIDE_VOCAB

    def narrow():
        scoring.WIDE_VOCAB = 10**9
        try:
            lm.score_many(prompts, options)
        finally:
            scoring.WIDE_VOCAB = wide

    t = alternate({"wide_blocks": lambda: lm.score_many(prompts, options), "narrow_blocks": narrow}, args.repeats)
    return {**{k: round(v, 3) for k, v in t.items()}, "speedup": round(t["narrow_blocks"] / t["wide_blocks"], 3),
            "vocab": lm.model.get_output_embeddings().weight.shape[0], "wide_rows": scoring.WIDE_HEAD_ROWS, "narrow_rows": scoring.HEAD_ROWS}


def readings(args) -> dict:
    lm = SetLLM.from_pretrained(args.model, adapter=None, variant="causal-pe", batch_size=8, progress=False)
    views = {v: lm.with_variant(v) for v in READINGS}
    prompts, options = questions(args.dataset, args.data_dir, args.n, args.subset_seed)
    t = alternate({v: (lambda view=view: view.score_many(prompts, options)) for v, view in views.items()}, args.repeats)
    mem = {v: peak(args, v) for v in READINGS}
    return {v: {"seconds": round(t[v], 3), "time_over_causal": round(t[v] / t["causal-pe"], 3), **mem[v],
                "peak_over_causal": round(mem[v]["peak_rss_mb"] / mem["causal-pe"]["peak_rss_mb"], 3)} for v in READINGS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a --model name (default: the embedded SmolLM2)")
    ap.add_argument("--dataset", default="piqa")
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--subset-seed", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parts", default="a,b", help="a: time, b: peak memory, c: head blocks, d: every invariant reading")
    ap.add_argument("--json", help="also write the raw numbers here")
    ap.add_argument("--child", choices=READINGS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    report = {"hardware": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, fp32",
              "model": args.model or "embedded SmolLM2-135M-Instruct", "questions": f"{args.n} {args.dataset} validation, subset seed {args.subset_seed}"}
    parts = set(args.parts.split(","))
    if "a" in parts:
        report["a_time"] = timing(args)
    if "b" in parts:
        report["b_peak_memory"] = memory(args)
    if "c" in parts:
        report["c_head_blocks"] = head_blocks(args)
    if "d" in parts:
        report["d_readings"] = readings(args)
    emit(report, args.json)


if __name__ == "__main__":
    main()
