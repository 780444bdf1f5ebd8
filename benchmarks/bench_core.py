"""Core speed and memory ratios on the embedded model, measured side by side in one run.

(a) Set-LLM (setmask-setpe) scoring time / base model (causal-pe) scoring time, same questions.
(b) KV-reuse batched option scoring vs one full forward per option.
(c) Majority vote over all k! orderings (base model) vs one Set-LLM run.
(d) A long prompt (32 documents x 128 tokens as one set): dense sdpa masks vs a flex BlockMask,
    memory of the mask and time of one attention op with SmolLM2's shapes.
(e) Scoring with the shipped LoRA adapter kept as a PEFT wrapper (what ``load_model`` does)
    vs merged into the weights, and the largest change in an option's log-likelihood.

Usage: python benchmarks/bench_core.py [--data-dir ../shared/data] [--n 16] [--repeats 3] [--parts a,b,c,d,e]
Prints a markdown report; ``--json FILE`` also writes the raw numbers.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import statistics
import time

import torch
from report_io import emit  # benchmarks/, this script's folder

from setllm import SetLLM, mc_prompt
from setllm.api import default_adapter
from setllm.core.layout.masks import TokenLayout, render_bool, variant_mask
from setllm.core.layout.positions import setpe_positions
from setllm.loading import load_adapter, load_model
from setllm.tasks import get_task, load_records


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def alternate(fns: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each function, run in turns so load drifts hit all alike."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(timed(fn))
    return {k: statistics.median(v) for k, v in times.items()}


def questions(data_dir: str, n: int):
    records = [r for r in load_records(get_task("arc_challenge"), "validation", data_dir)[0] if len(r.choices) == 4][:n]
    return [mc_prompt(r.question, r.choices) for r in records], [list(r.choices) for r in records]


def bench_variants(lm: SetLLM, prompts, options, repeats):
    base = SetLLM(lm.model, lm.tokenizer, "causal-pe", batch_size=lm.batch_size)
    t = alternate({"setllm": lambda: lm.score_many(prompts, options), "base": lambda: base.score_many(prompts, options)}, repeats)
    return {**t, "ratio_setllm_over_base": t["setllm"] / t["base"]}


def bench_kv_reuse(lm: SetLLM, prompts, options, repeats):
    def per_option():
        for p, opts in zip(prompts, options):
            for o in opts:
                lm.logits(p, response=o)

    t = alternate({"kv_reuse_batched": lambda: lm.score_many(prompts, options), "full_forward_per_option": per_option}, repeats)
    return {**t, "speedup": t["full_forward_per_option"] / t["kv_reuse_batched"]}


def bench_majority(lm: SetLLM, prompts, options, repeats):
    base = SetLLM(lm.model, lm.tokenizer, "causal-pe", batch_size=lm.batch_size)
    orders = list(itertools.permutations(range(4)))
    all_prompts = [p.permuted([o]) for p in prompts for o in orders]
    all_options = [opts for opts in options for _ in orders]
    t = alternate({"setllm_one_run": lambda: lm.score_many(prompts, options),
                   "majority_vote_24_orderings": lambda: base.score_many(all_prompts, all_options)}, repeats)
    return {**t, "orderings": len(orders), "ratio_majority_over_setllm": t["majority_vote_24_orderings"] / t["setllm_one_run"]}


def bench_adapter_merge(prompts, options, repeats):
    base, tok = load_model(None)
    wrapped = SetLLM(load_adapter(base, str(default_adapter()), merge=False), tok, batch_size=8)
    merged = SetLLM(load_model(None, str(default_adapter()), merge=True)[0], tok, batch_size=8)
    t = alternate({"peft_wrapper": lambda: wrapped.score_many(prompts, options), "merged": lambda: merged.score_many(prompts, options)}, repeats)
    diff = max(abs(a.logprob - b.logprob) for pa, pb in zip(wrapped.score_many(prompts, options), merged.score_many(prompts, options)) for a, b in zip(pa, pb))
    return {**t, "speedup": t["peft_wrapper"] / t["merged"], "max_abs_logprob_diff": diff}


def long_layout(docs: int, doc_tokens: int, head: int = 16, tail: int = 8) -> TokenLayout:
    n = head + docs * doc_tokens + tail
    set_ids = torch.full((1, n), -1)
    elem = torch.full((1, n), -1)
    set_ids[0, head : head + docs * doc_tokens] = 0
    elem[0, head : head + docs * doc_tokens] = torch.arange(docs).repeat_interleave(doc_tokens)
    positions = torch.tensor([setpe_positions(set_ids[0].tolist(), elem[0].tolist())[0]])
    return TokenLayout(torch.ones(1, n, dtype=torch.bool), torch.ones(1, n, dtype=torch.bool), set_ids, elem, positions)


def block_mask_bytes(bm) -> int:
    tensors = [getattr(bm, k, None) for k in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
                                             "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices")]
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def bench_long_mask(config, docs: int, doc_tokens: int, repeats: int):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    layout = long_layout(docs, doc_tokens)
    n = layout.shape[1]
    fn = variant_mask("setmask", layout)
    build_dense = timed(lambda: render_bool(fn, 1, n, n))
    dense = render_bool(fn, 1, n, n).contiguous()
    build_block = timed(lambda: create_block_mask(fn, 1, None, n, n, device="cpu"))
    block = create_block_mask(fn, 1, None, n, n, device="cpu")
    heads, dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, heads, n, dim) for _ in range(3))
    flex = torch.compile(flex_attention, dynamic=False)
    compile_s = timed(lambda: flex(q, k, v, block_mask=block))
    out_dense, out_flex = sdpa(q, k, v, attn_mask=dense), flex(q, k, v, block_mask=block)
    t = alternate({"sdpa_dense_bool": lambda: sdpa(q, k, v, attn_mask=dense), "flex_blockmask": lambda: flex(q, k, v, block_mask=block)}, repeats)
    density = dense.float().mean().item()
    return {
        "tokens": n, "mask_density": density,
        "bytes_dense_bool": dense.numel(), "bytes_dense_fp32_additive": dense.numel() * 4, "bytes_blockmask": block_mask_bytes(block),
        "build_s_dense": build_dense, "build_s_blockmask": build_block, "flex_first_call_compile_s": compile_s,
        "attn_s_sdpa_dense": t["sdpa_dense_bool"], "attn_s_flex": t["flex_blockmask"],
        "attn_speedup_flex": t["sdpa_dense_bool"] / t["flex_blockmask"],
        "max_abs_diff": (out_dense - out_flex).abs().max().item(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--n", type=int, default=16, help="ARC-Challenge validation questions (4 options each)")
    ap.add_argument("--n-majority", type=int, default=4, help="questions for (c); each runs 24 orderings")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--docs", type=int, default=32)
    ap.add_argument("--doc-tokens", type=int, default=128)
    ap.add_argument("--json", help="also write the raw numbers here")
    ap.add_argument("--parts", default="a,b,c,d,e", help="which measurements to run (comma-separated letters)")
    args = ap.parse_args()
    torch.manual_seed(0)
    lm = SetLLM.from_pretrained(adapter=None, batch_size=8)  # same weights for every variant
    prompts, options = questions(args.data_dir, args.n)
    parts = {
        "a_setllm_vs_base_scoring": lambda: bench_variants(lm, prompts, options, args.repeats),
        "b_kv_reuse_vs_full_forwards": lambda: bench_kv_reuse(lm, prompts, options, args.repeats),
        "c_majority_vote_vs_setllm": lambda: bench_majority(lm, prompts[: args.n_majority], options[: args.n_majority], args.repeats),
        "d_long_prompt_masks": lambda: bench_long_mask(lm.model.config, args.docs, args.doc_tokens, args.repeats),
        "e_adapter_wrapper_vs_merged": lambda: bench_adapter_merge(prompts, options, args.repeats),
    }
    wanted = set(args.parts.split(","))
    report = {"hardware": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, fp32"}
    report.update({name: run() for name, run in parts.items() if name[0] in wanted})
    emit(report, args.json)


if __name__ == "__main__":
    main()
