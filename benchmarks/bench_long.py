"""Long set prompts end to end on the embedded model: prefill time and peak memory,
sdpa + dense mask vs flex attention + BlockMask, and the set mask vs the causal mask.

A prompt is the documents template (:mod:`setllm.tasks.documents`) with K equal documents of
``--doc-tokens`` tokens each (random decimal digits: SmolLM2 splits numbers into single digits), K chosen so
the prompt has about L tokens. One measurement = ``scoring.prefill`` (mask rendering + one
forward over the whole prompt, logits of the last token), the path every score and every
generation takes. Each (L, backend, variant) runs in its own process, so its peak RSS is its
own: the first call (flex compiles its kernel there) is reported apart from the ``--repeats``
timed calls after it (median). Also reported: the largest position id vs the token count
(SetPE puts a set's elements on shared positions, but the text after a set resumes at the
set's start + its total tokens, so the largest position is the token count - 1), and what
happens above the embedded model's context (8192): refused, naming the context. To time 16k
anyway, the measurement above the context raises the model's ``max_position_embeddings``
(same weights; RoPE positions beyond 8192 are untrained: time and memory only, no quality).

Usage: python benchmarks/bench_long.py [--lengths 2048,4096,8192,16384] [--backends sdpa,flex_attention]
       [--compare-at 8192] [--repeats 2] [--threads 2] [--timeout 1200] [--json FILE]
Prints a markdown table; ``--json`` also writes the raw rows.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time


def documents_for(tokenizer, length: int, doc_tokens: int):
    """A documents prompt of about ``length`` tokens: K equal documents and a question."""
    from setllm.tasks.documents import FRAME, documents_prompt

    frame = len(tokenizer(FRAME.format(document="0"), add_special_tokens=False).input_ids) - 1
    k = max(2, (length - 24) // doc_tokens)
    rng = random.Random(0)
    docs = ["".join(rng.choice("0123456789") for _ in range(doc_tokens - frame)) for _ in range(k)]
    return documents_prompt(docs, "Which document has the most sevens?"), k


def measure(length: int, backend: str, variant: str, doc_tokens: int, repeats: int, threads: int, raise_context: bool) -> dict:
    """One (length, backend, variant) in this process."""
    import torch

    from setllm import SetLLM
    from setllm.core.forward.scoring import prefill
    from setllm.core.tokens.batch import collate
    from setllm.evaluation.resources import peak_memory_mb, reset_peak_memory
    from setllm.loading import load_model

    torch.set_num_threads(threads)
    model, tok = load_model(None, None, dtype=torch.float32, attn_implementation=backend)
    context = model.config.max_position_embeddings
    raised = raise_context and length > context
    if raised:
        model.config.max_position_embeddings = 4 * context
    lm = SetLLM(model, tok, variant)
    prompt, k = documents_for(tok, length, doc_tokens)
    row = {"target_tokens": length, "backend": backend, "variant": variant, "documents": k, "doc_tokens": doc_tokens,
           "context": context, "context_raised": raised}
    try:
        enc = lm.encode(prompt)
    except Exception as e:  # above the context: what the user would see
        return {**row, "tokens": None, "error": str(e)}
    batch = collate([enc], lm.variant.positions, lm.pad_id)
    row.update(tokens=len(enc), max_position=int(batch.position_ids.max()))
    times = []
    warmup = backend == "flex_attention"  # its first call compiles the kernel; sdpa's first call is a measurement
    for i in range(repeats + warmup):
        reset_peak_memory("cpu")
        start = time.perf_counter()
        prefill(model, lm.variant, batch)
        times.append(time.perf_counter() - start)
        if i == 0:
            row["first_call_s"], row["first_call_peak_mb"] = round(times[0], 2), round(peak_memory_mb("cpu"), 1)
    row.update(prefill_s=round(statistics.median(times[warmup:]), 3), peak_mb=round(peak_memory_mb("cpu"), 1))
    row["tokens_per_s"] = round(row["tokens"] / row["prefill_s"], 1)
    return row


def run_one(args, length: int, backend: str, variant: str, raise_context: bool = True) -> dict:
    cmd = [sys.executable, __file__, "--one", f"{length},{backend},{variant},{int(raise_context)}", "--doc-tokens", str(args.doc_tokens),
           "--repeats", str(args.repeats), "--threads", str(args.threads)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"target_tokens": length, "backend": backend, "variant": variant, "error": f"timed out after {args.timeout} s"}
    if out.returncode != 0:
        return {"target_tokens": length, "backend": backend, "variant": variant, "error": out.stderr.strip().splitlines()[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    lines = ["| tokens (target) | documents | max position | variant | backend | prefill s | tokens/s | peak RSS MB | first call s |",
             "|---|---|---|---|---|---|---|---|---|"]
    raised = "; context raised to 4x (time and memory only)"
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['target_tokens']} | {r.get('documents', '')} | | {r['variant']} | {r['backend']} | {r['error']} | | | |")
            continue
        lines.append(f"| {r['tokens']} ({r['target_tokens']}) | {r['documents']} | {r['max_position']} | {r['variant']} | {r['backend']} | "
                     f"{r['prefill_s']} | {r['tokens_per_s']} | {r['peak_mb']} | {r['first_call_s']}{raised if r['context_raised'] else ''} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="2048,4096,8192,16384")
    ap.add_argument("--backends", default="sdpa,flex_attention")
    ap.add_argument("--compare-at", type=int, default=8192, help="also run causal-pe at this length (set vs causal mask)")
    ap.add_argument("--doc-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1, help="timed calls per measurement (flex: after one compiling call)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per measurement before it is recorded as timed out")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        length, backend, variant, raise_context = args.one.split(",")
        print(json.dumps(measure(int(length), backend, variant, args.doc_tokens, args.repeats, args.threads, raise_context == "1")))
        return
    lengths, backends = [int(x) for x in args.lengths.split(",")], args.backends.split(",")
    jobs = [(n, b, "setmask-setpe", True) for n in lengths for b in backends]
    jobs += [(args.compare_at, b, "causal-pe", True) for b in backends if args.compare_at]
    # Above the embedded model's real context (8192): what a user sees (refused, before any work).
    jobs += [(n, backends[0], v, False) for n in lengths if n > 8192 for v in ("setmask-setpe", "causal-pe")]
    rows = []
    for job in jobs:
        rows.append(run_one(args, *job))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
