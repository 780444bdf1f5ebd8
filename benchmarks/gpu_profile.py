"""Where a Set-LLM reading after a long document set spends its time on one GPU.

On a random-weight Llama-3.2-1B shape (bf16, the embedded tokenizer), ``--documents`` documents
of ~60 tokens read as one set: the times of encoding, scoring 4 options and a 1-token
generation on flex attention; the BlockMask's build time and sparsity (partial and full
blocks); the flex kernel alone on that mask beside sdpa's causal (flash) kernel on the same
shape; plain transformers' forward over the same tokens; then torch.profiler tables (by
CUDA and by CPU time) of the scoring and the generation, and of a short prompt's scoring.
It prints everything; nothing is asserted.

    python benchmarks/gpu_profile.py --documents 537 --tokenizer DIR > profile.txt
"""

from __future__ import annotations

import argparse
import time

import torch
from gpu_check import OPTIONS, QUESTION, Run, build, parse_args

from setllm import Set, SetLLM, mc_prompt
from setllm.core.attention import flex
from setllm.core.forward.generation import GenerationConfig
from setllm.core.forward.runtime import attention_implementation
from setllm.core.tokens.batch import collate


def seconds(fn, repeats: int = 3) -> float:
    """Mean seconds of ``fn`` after one warm-up, the GPU synchronised around it."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats


def profiled(name: str, fn) -> None:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        fn()
        torch.cuda.synchronize()
    for key in ("self_cuda_time_total", "self_cpu_time_total"):
        print(f"\n==== {name}: by {key}")
        print(p.key_averages().table(sort_by=key, row_limit=12, max_name_column_width=70))


def kernel_alone(lm, enc) -> None:
    """The flex kernel on the prompt's own BlockMask beside flash attention on the same shape."""
    n = flex.padded_length(len(enc), "cuda")
    layout = collate([enc], lm.variant.positions, lm.pad_id, length=n).layout.to("cuda")
    shape = flex.FlexLayout.of(lm.variant.mask, layout)
    print("block mask s", seconds(lambda: flex.block_mask(shape, n, n)))
    mask = flex.block_mask(shape, n, n)
    full = int(mask.full_kv_num_blocks.sum()) if mask.full_kv_num_blocks is not None else 0
    print("blocks: partial", int(mask.kv_num_blocks.sum()), "full", full, "of", (n // flex.BLOCK) ** 2)
    cfg = lm.model.config
    q = torch.randn(1, cfg.num_attention_heads, n, cfg.head_dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, cfg.num_key_value_heads, n, cfg.head_dim, device="cuda", dtype=torch.bfloat16)
    print("flex kernel s", seconds(lambda: flex.attend(q, k, k, mask)))
    print("sdpa causal (flash) s", seconds(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--documents", type=int, default=537, help="documents in the set (537: ~34.8k tokens)")
    p.add_argument("--tokenizer", default=None, help="a folder with the tokenizer's files (default: the embedded model's)")
    args = p.parse_args()
    from transformers import AutoTokenizer

    from setllm.loading import embedded_model_dir

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or embedded_model_dir())
    model = build("llama-1b", Run(parse_args([])), tokenizer)
    doc = " ".join(["word"] * 60)
    prompt = ["Documents:\n", Set([f"{i}: {doc}\n" for i in range(args.documents)]), "Question: which document is first?\nAnswer:"]
    with attention_implementation(model, "flex_attention"):
        lm = SetLLM(model, tokenizer, "setmask-setpe")
        enc = lm.encode(prompt)
        print("tokens", len(enc), "padded", flex.padded_length(len(enc), "cuda"))
        print("encode s", seconds(lambda: lm.encode(prompt)))
        print("score s", seconds(lambda: lm.score(prompt, OPTIONS)))
        print("generate 1 s", seconds(lambda: lm.generate_encoded([enc], GenerationConfig(max_new_tokens=1))))
        kernel_alone(lm, enc)
        ids = torch.tensor([enc.input_ids], device="cuda")
        with attention_implementation(model, "sdpa"):
            print("plain forward s", seconds(lambda: model(input_ids=ids, logits_to_keep=1)))
        profiled("score on flex", lambda: lm.score(prompt, OPTIONS))
        profiled("generate 1 on flex", lambda: lm.generate_encoded([enc], GenerationConfig(max_new_tokens=1)))
    lm = SetLLM(model, tokenizer, "setmask-setpe")
    short = mc_prompt(QUESTION, OPTIONS)
    print("short score, batch 1 s", seconds(lambda: lm.score(short, OPTIONS)))
    profiled("short score, batch 1", lambda: lm.score(short, OPTIONS))


if __name__ == "__main__":
    main()
