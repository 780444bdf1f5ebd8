"""Set-LLM where its users run it: one GPU, bf16, 1B-8B shapes, long sets. One prepared run.

For each model shape (random weights from a config: cost does not depend on the weights, and
nothing is downloaded; the tokenizer is the embedded SmolLM2's):

- invariance: every ordering of a question's options, read in exact mode through sdpa (eager
  for Gemma 2, which has no sdpa in transformers) and through flex attention, gives the same bits (logits of a full forward, and generated text);
- Set-LLM (setmask-setpe) against the base model (causal-pe), time and peak memory, at batch
  1 and 8: scoring four options per question, generating 16 tokens, one LoRA training step;
- (the first shape) one forward over a long set of documents, flex attention against sdpa with
  a dense mask, at each ``--long`` length.

Writes one JSON report (``--out``) and prints a table. Parts past ``--budget-s`` are skipped
and say so. ``--smoke`` runs the same code on the CPU with tiny shapes (fp32, short lengths):
that is what the test suite runs.

    python benchmarks/gpu_check.py --out gpu_check.json            # a GPU: bf16, 1B-8B shapes, 8k/32k tokens
    python benchmarks/gpu_check.py --smoke --out smoke.json        # anywhere, in about a minute
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable

import torch

from setllm.core.runtime import attention_implementation

# name -> (model_type, config): the published shapes (Llama 3.2 1B/3B, Llama 3.1 8B, Gemma 2 2B, Gemma 3 1B).
SHAPES = {
    "llama-1b": ("llama", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                               num_key_value_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True, rope_theta=500000.0)),
    "llama-3b": ("llama", dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
                               num_key_value_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=True, rope_theta=500000.0)),
    "llama-8b": ("llama", dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                               num_key_value_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=False, rope_theta=500000.0)),
    "gemma2-2b": ("gemma2", dict(hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
                                 num_key_value_heads=4, head_dim=256, vocab_size=256000, sliding_window=4096)),
    "gemma3-1b": ("gemma3_text", dict(hidden_size=1152, intermediate_size=6912, num_hidden_layers=26, num_attention_heads=4,
                                      num_key_value_heads=1, head_dim=256, vocab_size=262144, sliding_window=512)),
}
# --smoke: one tiny model per family, the same code.
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
SMOKE_SHAPES = ("llama-1b", "gemma2-2b", "gemma3-1b")
QUESTION = "Which of these is a fruit?"
OPTIONS = ["apple", "dog", "granite", "violin"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, fp32, short lengths (the test suite's run)")
    p.add_argument("--shapes", default=None, help=f"comma-separated, of: {', '.join(SHAPES)} (default: all; --smoke: {', '.join(SMOKE_SHAPES)})")
    p.add_argument("--long", default=None, help="prompt lengths in tokens for flex vs sdpa (default 8192,32768; --smoke: 256,512)")
    p.add_argument("--batches", default="1,8", help="batch sizes for scoring, generation and the training step")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per measurement, median kept (default 3; --smoke: 1)")
    p.add_argument("--budget-s", type=float, default=450.0, help="skip the parts that would start after this many seconds")
    p.add_argument("--out", default="gpu_check.json", help="the JSON report")
    return p.parse_args(argv)


class Run:
    """Where the check runs and what it has measured so far."""

    def __init__(self, args: argparse.Namespace):
        self.smoke = args.smoke
        self.device = torch.device("cpu" if args.smoke or not torch.cuda.is_available() else "cuda")
        self.dtype = torch.float32 if self.device.type == "cpu" else torch.bfloat16
        self.repeats = args.repeats or (1 if args.smoke else 3)
        self.batches = [int(b) for b in args.batches.split(",")]
        self.budget_s, self.start = args.budget_s, time.monotonic()
        self.report: dict = {"device": _device_name(self.device), "dtype": str(self.dtype).removeprefix("torch."),
                             "torch": torch.__version__, "smoke": self.smoke, "shapes": {}, "skipped": []}

    def left(self, what: str) -> bool:
        """Whether the budget allows ``what``; if not, it is recorded as skipped."""
        if time.monotonic() - self.start < self.budget_s:
            return True
        self.report["skipped"].append(what)
        return False

    def timed(self, fn: Callable[[], object]) -> dict:
        """Median seconds of ``fn`` over the repeats (after one warm-up), and its peak memory in
        MiB (CUDA only: the CPU has no per-call peak)."""
        fn()
        self._sync()
        times, peak = [], None
        for _ in range(self.repeats):
            if self.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            fn()
            self._sync()
            times.append(time.perf_counter() - start)
            if self.device.type == "cuda":
                peak = max(peak or 0, torch.cuda.max_memory_allocated() / 2**20)
        return {"s": statistics.median(times), "peak_mib": peak}

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)"


def build(name: str, run: Run, tokenizer):
    """A random-weight model of shape ``name`` (tiny under --smoke), on the run's device."""
    return build_shape(*SHAPES[name], run, tokenizer)


def build_shape(model_type: str, shape: dict, run: Run, tokenizer):
    """A random-weight ``model_type`` model of ``shape`` (a config's sizes; tiny under --smoke)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = {**shape, **TINY} if run.smoke else dict(shape)
    shape["vocab_size"] = max(shape["vocab_size"], len(tokenizer)) if not run.smoke else len(tokenizer)
    config = AutoConfig.for_model(model_type, **shape, max_position_embeddings=65536, bos_token_id=tokenizer.bos_token_id,
                                  eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.device(run.device):
        model = AutoModelForCausalLM.from_config(config, dtype=run.dtype, attn_implementation=dense(model_type))
    return model.eval()


def dense(model_type: str) -> str:
    """The dense-mask attention of a family: sdpa, or eager where transformers has no sdpa (Gemma 2)."""
    from setllm.core.families import default_attention

    return default_attention(model_type, "sdpa")


def invariance(model, tokenizer) -> dict:
    """Every ordering of the options, exact mode, through sdpa and flex attention: are the
    logits of a full forward and 8 generated tokens the same bits in every ordering?"""
    from setllm import SetLLM, mc_prompt

    out = {}
    orders = list(itertools.permutations(OPTIONS))[:6]
    for attn in (dense(model.config.model_type), "flex_attention"):
        with attention_implementation(model, attn):
            lm = SetLLM(model, tokenizer, "setmask-setpe")
            logits = [lm.logits(mc_prompt(QUESTION, list(o)), response="apple") for o in orders]
            texts = [lm.generate(mc_prompt(QUESTION, list(o)), max_new_tokens=8) for o in orders]
        out[attn] = {"orderings": len(orders), "same_logits": all(torch.equal(logits[0], x) for x in logits),
                     "same_text": len(set(texts)) == 1}
    return out


def costs(model, tokenizer, run: Run) -> dict:
    """Set-LLM / base for scoring, generation and a LoRA training step, at each batch size."""
    from setllm import SetLLM, mc_prompt

    out = {}
    for batch in run.batches:
        prompts = [mc_prompt(f"{QUESTION} ({i})", OPTIONS) for i in range(batch)]
        row = {}
        for variant in ("setmask-setpe", "causal-pe"):
            lm = SetLLM(model, tokenizer, variant, batch_size=batch)
            row[variant] = {"score": run.timed(lambda: lm.score(prompts, [OPTIONS] * batch)),
                            "generate": run.timed(lambda: lm.generate(prompts, max_new_tokens=16))}
        out[f"batch_{batch}"] = row | {"ratio_score_s": _ratio(row, "score"), "ratio_generate_s": _ratio(row, "generate")}
    return out


def training_step(model, tokenizer, run: Run) -> dict:
    """One LoRA step (rank 8, all linear layers; forward, response loss, backward, AdamW) of
    Set-LLM and of the causal base on the same batch, at each batch size."""
    from peft import LoraConfig, get_peft_model

    from setllm import SetLLM, mc_prompt
    from setllm.training.collator import SetCollator, featurize
    from setllm.training.examples import Example
    from setllm.training.trainer import set_llm_loss

    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=1, target_modules="all-linear", task_type="CAUSAL_LM"))
    peft_model.train()
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=1e-6)
    out = {}
    for batch in run.batches:
        examples = [Example(mc_prompt(f"{QUESTION} ({i})", OPTIONS), " apple", f"x{i}") for i in range(batch)]
        row = {}
        for variant in ("setmask-setpe", "causal-pe"):
            lm = SetLLM(peft_model, tokenizer, variant)
            feats, _ = featurize(lm.codec, examples, 256)
            data = {k: v.to(run.device) if torch.is_tensor(v) else v for k, v in SetCollator(lm.variant.positions, lm.pad_id)(feats).items()}

            def step(lm=lm, data=data):
                loss, _ = set_llm_loss(lm.model, lm.variant, data)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            row[variant] = {"step": run.timed(step), "tokens": int(data["valid"].sum())}
        out[f"batch_{batch}"] = row | {"ratio_step_s": _ratio(row, "step")}
    peft_model.unload()
    return out


def long_prompt(model, tokenizer, lengths: list[int], run: Run) -> dict:
    """One forward over documents read as a set, ``length`` tokens in all: flex attention
    (its BlockMask skips what the set mask hides) against sdpa with a dense mask."""
    from setllm import Set, SetLLM

    out = {}
    for length in lengths:
        if not run.left(f"long prompt {length}"):
            continue
        doc = " ".join(["word"] * 60)  # one document: ~60 tokens
        n_docs = max(2, length // len(tokenizer(doc + "\n").input_ids))
        prompt = ["Documents:\n", Set([f"{i}: {doc}\n" for i in range(n_docs)]), "Question: which document is first?\nAnswer:"]
        row = {}
        for attn in ("flex_attention", dense(model.config.model_type)):
            try:
                with attention_implementation(model, attn):
                    lm = SetLLM(model, tokenizer, "setmask-setpe")
                    row[attn] = run.timed(lambda: lm.logits(prompt))
            except (RuntimeError, torch.OutOfMemoryError) as e:  # a dense mask of 32k x 32k may not fit
                row[attn] = {"error": str(e).splitlines()[0][:200]}
        tokens = len(SetLLM(model, tokenizer, "setmask-setpe").encode(prompt))
        flex, sdpa = row["flex_attention"].get("s"), row[dense(model.config.model_type)].get("s")
        out[str(length)] = row | {"tokens": tokens, "dense_over_flex_s": sdpa / flex if flex and sdpa else None}
    return out


def _ratio(row: dict, part: str) -> float:
    return row["setmask-setpe"][part]["s"] / row["causal-pe"][part]["s"]


def check_shape(name: str, run: Run, tokenizer, lengths: list[int] | None) -> dict:
    started = time.monotonic()
    model = build(name, run, tokenizer)
    params = sum(p.numel() for p in model.parameters())
    result: dict = {"parameters": params}
    for part, fn in (("invariance", lambda: invariance(model, tokenizer)), ("costs", lambda: costs(model, tokenizer, run)),
                     ("long_prompt", lambda: long_prompt(model, tokenizer, lengths, run) if lengths else None),
                     ("training_step", lambda: training_step(model, tokenizer, run))):
        if run.left(f"{name}: {part}"):
            value = fn()
            if value is not None:
                result[part] = value
    result["seconds"] = round(time.monotonic() - started, 1)
    return result  # the model goes with this frame: the next shape gets its memory


def table(report: dict) -> str:
    """The report as one markdown table (and the long-prompt rows under it)."""
    lines = [f"# gpu_check on {report['device']} ({report['dtype']}, torch {report['torch']})", "",
             "| shape | invariant (sdpa / flex) | score Set/base b1, b8 | generate Set/base b1, b8 | LoRA step Set/base b1, b8 |",
             "|---|---|---|---|---|"]
    for name, r in report["shapes"].items():
        inv = r.get("invariance", {})
        same = " / ".join("yes" if v["same_logits"] and v["same_text"] else "NO" for v in inv.values()) or "-"
        c, t = r.get("costs", {}), r.get("training_step", {})
        lines.append(f"| {name} ({r['parameters'] / 1e6:,.1f}M parameters) | {same} | {_pair(c, 'ratio_score_s')} | {_pair(c, 'ratio_generate_s')} "
                     f"| {_pair(t, 'ratio_step_s')} |")
    for name, r in report["shapes"].items():
        for length, row in r.get("long_prompt", {}).items():
            dense_name = next(k for k in row if k not in ("flex_attention", "tokens", "dense_over_flex_s"))
            flex, sdpa = row["flex_attention"], row[dense_name]
            ratio = f"{row['dense_over_flex_s']:.2f}" if row["dense_over_flex_s"] else "-"
            lines.append(f"\n{name}, {row['tokens']} tokens as a set: flex {_seconds(flex)}, {dense_name} {_seconds(sdpa)}, "
                         f"{dense_name} / flex {ratio}")
    if report["skipped"]:
        lines.append(f"\nskipped (budget): {', '.join(report['skipped'])}")
    return "\n".join(lines)


def _seconds(timing: dict) -> str:
    return f"{timing['s']:.3f} s" if "s" in timing else f"failed ({timing['error']})"


def _pair(part: dict, key: str) -> str:
    return ", ".join(f"{row[key]:.2f}" for row in part.values()) or "-"


def main(argv=None) -> int:
    from transformers import AutoTokenizer

    from setllm.loading import embedded_model_dir

    args = parse_args(argv)
    run = Run(args)
    shapes = (args.shapes.split(",") if args.shapes else list(SMOKE_SHAPES if args.smoke else SHAPES))
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        print(f"error: unknown shape {unknown[0]!r}; choose from {', '.join(SHAPES)}", file=sys.stderr)
        return 2
    lengths = [int(x) for x in (args.long or ("256,512" if args.smoke else "8192,32768")).split(",")]
    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    for i, name in enumerate(shapes):
        if run.left(name):
            run.report["shapes"][name] = check_shape(name, run, tokenizer, lengths if i == 0 else None)
            if run.device.type == "cuda":
                torch.cuda.empty_cache()
            print(f"{name}: done at {time.monotonic() - run.start:.0f} s", file=sys.stderr, flush=True)
    run.report["seconds"] = round(time.monotonic() - run.start, 1)
    with open(args.out, "w") as f:
        json.dump(run.report, f, indent=2)
    print(table(run.report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
