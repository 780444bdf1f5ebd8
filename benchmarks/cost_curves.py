"""Cost curves on the CPU: Set-LLM (setmask-setpe: the set-aware mask and SetPE positions)
against the base model (causal-pe: the plain causal model on the same tokens), side by side.

Three axes; every point is a ratio Set-LLM / base of seconds and of peak memory, because on a
shared machine absolute times are noise but two readings taken in turns share the noise:

- length: a documents prompt (:func:`bench_long.documents_for`: K documents of ``doc_tokens``
  tokens read as one set) of about L tokens, one prefill (:func:`setllm.core.forward.scoring.prefill`,
  the step every generation starts with), under sdpa with a dense mask and under flex attention
  with a BlockMask. ``attn="auto"`` switches from the first to the second at
  :data:`setllm.core.forward.runtime.LONG_PROMPT_TOKENS` tokens; the table marks which one it picks.
- set size: the same prefill at a fixed total length, the documents split into 2 .. 64 elements.
- model size: the SmolLM2-135M shape up to a Llama-3.2-1B shape, for three workloads on a batch
  of multiple-choice prompts (:data:`gpu_check.QUESTION`): scoring (``SetLLM.score_many``),
  generation (``SetLLM.generate``'s ``generate_encoded``, ``new_tokens`` greedy tokens) and one
  LoRA training step (:func:`bench_train.step`: forward, response loss, backward, AdamW).

Every model has random weights built from its config by :func:`gpu_check.build` (cost does not
depend on the weights, nothing is downloaded; the tokenizer is the embedded SmolLM2's), with a
context of 65536 positions so that 16k prompts run (time and memory only). A point warms both
readings up once where a first call differs (flex compiles its kernel per length; the model
axis fills allocators and the optimizer state), then runs rounds of one call each, in turns
and alternating which goes first, until ``repeats`` rounds or ``point_s`` seconds; medians
are reported. Then one more call of each gives its peak memory: how far the process's peak
RSS rises over the call (:mod:`setllm.evaluation.resources`, which resets the kernel's
high-water mark), with the allocator handing back every large block (:func:`fresh_pages`).

    python benchmarks/cost_curves.py --smoke --out /tmp/cc.json --plot /tmp/cc.png   # tiny shapes, < 1 minute
    python benchmarks/cost_curves.py --threads 2 --axes model_size,set_size,length --set-tokens 1024 --max-tokens 4096 \
        --budget-s 720 --out cost_curves.json --plot cost_curves.png                     # ~15 minutes on 2 idle cores

The defaults (every length up to 16k, the set-size axis at 2048 tokens) take about 45 minutes
on 2 idle cores: one sdpa prefill of 16k tokens alone takes minutes, and each point makes at
least four (two readings, timed and then for memory).

Prints a markdown table (the JSON report goes to ``--out``, and to stderr with the progress).
Points that would start after ``--budget-s`` are skipped and listed in the report.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import functools
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from bench_long import documents_for  # benchmarks/, this script's folder
from bench_train import step as lora_step
from gpu_check import OPTIONS, QUESTION, SHAPES, build_shape
from report_io import emit

from setllm import SetLLM, mc_prompt
from setllm.core.forward.generation import GenerationConfig
from setllm.core.forward.runtime import LONG_PROMPT_TOKENS, attention_implementation, use_auto_attention
from setllm.core.forward.scoring import prefill
from setllm.core.tokens.batch import collate
from setllm.evaluation.resources import memory_measure, peak_memory_mb, reset_peak_memory

SET, BASE = "setmask-setpe", "causal-pe"
EMBEDDED = "smollm2-135m"
# The embedded SmolLM2-135M-Instruct's config.json as a gpu_check shape, lent to its builder per call (make_model).
EMBEDDED_SHAPE = ("llama", dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                                head_dim=64, vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0))
AXES = ("length", "set_size", "model_size")
WORKLOADS = ("score", "generate", "train")
BACKENDS = ("sdpa", "flex_attention")


def _opt(text: str, **kw):
    return field(metadata={"help": text}, **kw)


@dataclass
class Config:
    """What to measure. Tuple fields take comma-separated values on the command line."""

    axes: tuple[str, ...] = _opt(f"which axes to run, in this order, of: {', '.join(AXES)}", default=AXES)
    lengths: tuple[int, ...] = _opt("prompt lengths in tokens (length axis)", default=(256, 512, 1024, 2048, 4096, 8192, 16384))
    max_tokens: int | None = _opt("drop lengths above this many tokens (length axis)", default=None)
    backends: tuple[str, ...] = _opt("attentions of the length axis", default=BACKENDS)
    doc_tokens: int = _opt("tokens per document (length axis)", default=128)
    set_sizes: tuple[int, ...] = _opt("elements in the set (set-size axis)", default=(2, 4, 8, 16, 32, 64))
    set_tokens: int = _opt("total prompt tokens of the set-size axis", default=2048)
    set_backends: tuple[str, ...] = _opt("attentions of the set-size axis (flex compiles anew for every point and reading: seconds each)", default=("sdpa",))
    sizes: tuple[str, ...] = _opt(f"model shapes (model-size axis), of: {', '.join((EMBEDDED, *SHAPES))}", default=(EMBEDDED, "llama-1b"))
    workloads: tuple[str, ...] = _opt(f"model-size axis workloads, of: {', '.join(WORKLOADS)}", default=WORKLOADS)
    batch: int = _opt("prompts per call on the model-size axis", default=4)
    new_tokens: int = _opt("tokens generated per prompt", default=8)
    repeats: int = _opt("most rounds per point (one call of each reading per round; median kept)", default=3)
    point_s: float = _opt("no new round once a point has run this many seconds (at least one round)", default=60.0)
    budget_s: float | None = _opt("skip points that would start after this many seconds", default=None)
    threads: int | None = _opt("torch threads (default: torch's choice)", default=None)
    smoke: bool = _opt("tiny model shapes, short prompts, one thread: the test suite's run (its own defaults for the other flags)", default=False)
    out: str | None = _opt("write the JSON report here", default=None)
    plot: str | None = _opt("draw the curves into this PNG", default=None)

    def __post_init__(self):
        for name, allowed in (("axes", AXES), ("backends", BACKENDS), ("set_backends", BACKENDS), ("sizes", (EMBEDDED, *SHAPES)),
                              ("workloads", WORKLOADS)):
            unknown = [x for x in getattr(self, name) if x not in allowed]
            if unknown:
                raise ValueError(f"--{name.replace('_', '-')}: unknown {unknown[0]!r}; choose from {', '.join(allowed)}")
        if self.max_tokens is not None:
            self.lengths = tuple(n for n in self.lengths if n <= self.max_tokens)
        # A document needs room for its frame ("Document: ...\n", ~4 tokens) and some digits.
        if min(self.set_sizes, default=1) < 2 or self.set_tokens // max(self.set_sizes, default=1) < 16:
            raise ValueError(f"--set-sizes must be >= 2 and --set-tokens / the largest set size >= 16 tokens per element, "
                             f"got {self.set_tokens} tokens for {max(self.set_sizes)} elements")
        if self.repeats < 1 or self.batch < 1 or self.new_tokens < 1:
            raise ValueError("--repeats, --batch and --new-tokens must be >= 1")


PRESETS = {
    "full": Config(),
    # The same code on tiny models and short prompts; flex still compiles once per (length, reading), ~5-10 s each.
    # One thread: tiny matrices gain nothing from a second, and on a busy machine it spins waiting
    # (measured here, 2 cores under load: 100 s with 2 threads, 26 s with 1).
    "smoke": Config(lengths=(128, 256), doc_tokens=32, set_sizes=(2, 4, 8), set_tokens=128, batch=2, new_tokens=4,
                    repeats=2, point_s=10.0, threads=1, smoke=True),
}


def parse_args(argv=None) -> Config:
    """The preset (``--smoke`` or full), with every flag given on the command line over it."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        if f.type == "bool":
            p.add_argument(flag, action="store_true", default=None, help=f.metadata["help"])
            continue
        shown = ",".join(map(str, f.default)) if isinstance(f.default, tuple) else f.default
        metavar = ("N[,N...]" if "int" in f.type else "NAME[,NAME...]") if f.type.startswith("tuple") else None
        p.add_argument(flag, type=_parser(f.type), default=None, metavar=metavar, help=f"{f.metadata['help']} (default: {shown})")
    given = {k: v for k, v in vars(p.parse_args(argv)).items() if v is not None}
    try:
        return dataclasses.replace(PRESETS["smoke" if given.get("smoke") else "full"], **given)
    except ValueError as e:
        p.error(str(e))


def _parser(type_name: str) -> Callable[[str], object]:
    if type_name.startswith("tuple"):
        item = int if "int" in type_name else str
        return lambda text: tuple(item(x) for x in text.split(",") if x)
    return {"int | None": int, "int": int, "float": float, "float | None": float}.get(type_name, str)


# -- measuring -----------------------------------------------------------------------------


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


@functools.cache
def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: RSS growth may be understated (memory_measure in the report says what was read)
        return None


@contextlib.contextmanager
def fresh_pages():
    """Inside, glibc maps every block of 1 MiB or more on its own (unmapped when freed), and the
    heap's free pages go back to the kernel first: a call's RSS growth is then what it
    allocated, not what earlier calls happened to leave free for it to reuse. Outside, blocks
    below 32 MiB (the ceiling glibc's adaptive threshold climbs to anyway) come from the heap,
    recycled, as in a user's warm process: timing with fresh pages would add page faults
    (measured here: a 900-token prefill of the 135M shape took 500k faults and +1 s of system
    time on 3.3 s)."""
    libc = _libc()
    if libc is None:
        yield
        return
    libc.malloc_trim(0)
    libc.mallopt(M_MMAP_THRESHOLD, 1 << 20)
    try:
        yield
    finally:
        libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)


def peak_growth_mb(fn: Callable[[], object]) -> float:
    """How far the process's peak RSS rises above its RSS before one call of ``fn`` (MB)."""
    with fresh_pages():
        reset_peak_memory("cpu")  # the peak is now the current RSS
        before = peak_memory_mb("cpu")
        fn()
        # The kernel counts RSS in per-thread batches: a call that allocates nothing can read a hair below 0.
        return max(0.0, peak_memory_mb("cpu") - before)


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def side_by_side(readings: dict[str, Callable[[], object]], cfg: Config, warmup: bool) -> dict:
    """Both readings, timed in turns (the first alternating) until ``repeats`` rounds or
    ``point_s`` seconds, median kept; then one call of each for its peak memory; Set-LLM / base."""
    if warmup:
        for fn in readings.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in readings}
    start = time.monotonic()
    while len(times[SET]) < cfg.repeats and (not times[SET] or time.monotonic() - start < cfg.point_s):
        for name in list(readings) if len(times[SET]) % 2 == 0 else list(reversed(readings)):
            times[name].append(seconds(readings[name]))
    out = {k: {"s": statistics.median(times[k]), "peak_growth_mb": peak_growth_mb(fn)} for k, fn in readings.items()}
    return out | {"rounds": len(times[SET]), "ratio_s": out[SET]["s"] / out[BASE]["s"],
                  "ratio_peak": _ratio(out[SET]["peak_growth_mb"], out[BASE]["peak_growth_mb"])}


def _ratio(a: float, b: float) -> float | None:
    return a / b if b >= 1.0 else None  # under 1 MB is within the RSS counters' batching (tiny shapes): no ratio


class Budget:
    """Elapsed time against ``--budget-s``; what could not start is listed in the report."""

    def __init__(self, budget_s: float | None):
        self.budget_s, self.start, self.skipped = budget_s, time.monotonic(), []

    def allows(self, what: str) -> bool:
        if self.budget_s is None or time.monotonic() - self.start < self.budget_s:
            print(f"[{time.monotonic() - self.start:6.0f} s] {what}", file=sys.stderr, flush=True)
            return True
        self.skipped.append(what)
        return False


# -- the axes ------------------------------------------------------------------------------


def make_model(name: str, cfg: Config, tokenizer):
    """Random weights of shape ``name`` (tiny under --smoke), fp32 on the CPU, sdpa."""
    model_type, shape = EMBEDDED_SHAPE if name == EMBEDDED else SHAPES[name]  # the embedded shape is not one gpu_check runs
    return build_shape(model_type, shape, SimpleNamespace(smoke=cfg.smoke, device=torch.device("cpu"), dtype=torch.float32), tokenizer)


def prefill_point(model, tokenizer, prompt, backend: str, cfg: Config) -> dict:
    """One prefill of ``prompt`` under ``backend``, Set-LLM and base side by side."""
    with attention_implementation(model, backend):
        batches = {}
        for variant in (SET, BASE):
            lm = SetLLM(model, tokenizer, variant)
            batches[variant] = (lm.variant, collate([lm.encode(prompt)], lm.variant.positions, lm.pad_id))
        readings = {v: functools.partial(prefill, model, variant, batch) for v, (variant, batch) in batches.items()}
        # flex's first call per length compiles its kernel (seconds); sdpa's first call is like any other.
        row = side_by_side(readings, cfg, warmup=backend == "flex_attention")
    return row | {"tokens": batches[SET][1].input_ids.shape[1]}


def length_axis(model, tokenizer, cfg: Config, budget: Budget) -> list[dict]:
    points = []
    for length in cfg.lengths:
        prompt, docs = documents_for(tokenizer, length, cfg.doc_tokens)
        for backend in cfg.backends:
            if budget.allows(f"length {length}, {backend}"):
                row = prefill_point(model, tokenizer, prompt, backend, cfg)
                auto = "flex_attention" if row["tokens"] >= LONG_PROMPT_TOKENS else "sdpa"
                points.append({"axis": "length", "x": length, "reading": backend, "elements": docs, "auto_picks": backend == auto, **row})
    return points


def set_size_axis(model, tokenizer, cfg: Config, budget: Budget) -> list[dict]:
    points = []
    for k in cfg.set_sizes:
        doc_tokens = (cfg.set_tokens - 24) // k  # documents_for keeps ~24 tokens for the question
        prompt, docs = documents_for(tokenizer, k * doc_tokens + 24, doc_tokens)  # exactly k documents
        for backend in cfg.set_backends:
            if budget.allows(f"set size {k}, {backend}"):
                points.append({"axis": "set_size", "x": k, "reading": backend, "elements": docs,
                               **prefill_point(model, tokenizer, prompt, backend, cfg)})
    return points


def prompts(cfg: Config):
    return [mc_prompt(f"{QUESTION} ({i})", OPTIONS) for i in range(cfg.batch)]


def score_readings(model, tokenizer, cfg: Config) -> dict:
    lms = {v: SetLLM(model, tokenizer, v, batch_size=cfg.batch) for v in (SET, BASE)}
    return {v: functools.partial(lm.score_many, prompts(cfg), [OPTIONS] * cfg.batch) for v, lm in lms.items()}


def generate_readings(model, tokenizer, cfg: Config, generated: dict) -> dict:
    """``SetLLM.generate`` runs one ``generate_encoded`` per batch; calling it directly keeps
    the token ids, so the report can show that both readings generated as many tokens."""
    config = GenerationConfig(max_new_tokens=cfg.new_tokens)

    def run(lm: SetLLM):
        out = lm.generate_encoded([lm.encode(p) for p in prompts(cfg)], config)
        generated[lm.variant.name] = sum(len(ids) for _, ids in out)

    return {v: functools.partial(run, SetLLM(model, tokenizer, v, batch_size=cfg.batch)) for v in (SET, BASE)}


def train_readings(model, tokenizer, cfg: Config) -> dict:
    """One LoRA step (rank 8, all linear layers) per call, as gpu_check and bench_train run it."""
    from peft import LoraConfig, get_peft_model

    from setllm.training.collator import SetCollator, featurize
    from setllm.training.examples import Example

    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=1, target_modules="all-linear", task_type="CAUSAL_LM"))
    peft_model.train()
    # One optimizer for both: the readings differ only in how the batch is read.
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=1e-6)
    examples = [Example(p, "apple", f"x{i}") for i, p in enumerate(prompts(cfg))]
    readings = {}
    for v in (SET, BASE):
        lm = SetLLM(peft_model, tokenizer, v)
        feats, _ = featurize(lm.codec, examples, 256)
        readings[v] = functools.partial(lora_step, lm, optimizer, SetCollator(lm.variant.positions, lm.pad_id)(feats), True)
    return readings


def model_size_axis(tokenizer, cfg: Config, budget: Budget) -> list[dict]:
    points = []
    for name in cfg.sizes:
        if not budget.allows(f"build {name}"):
            budget.skipped[-1] = f"{name} (every workload)"
            continue
        model = make_model(name, cfg, tokenizer)
        use_auto_attention(model)  # as SetLLM.from_pretrained loads it (attn="auto")
        params = sum(p.numel() for p in model.parameters())  # before LoRA adds its own
        for workload in cfg.workloads:  # train last: it wraps the model in LoRA layers
            if budget.allows(f"{name}, {workload}"):
                points.append(workload_point(model, name, params, workload, tokenizer, cfg))
        del model  # free before the next (larger) model is built
    return points


def workload_point(model, name: str, params: int, workload: str, tokenizer, cfg: Config) -> dict:
    generated: dict = {}
    make = {"score": score_readings, "generate": functools.partial(generate_readings, generated=generated), "train": train_readings}[workload]
    row = side_by_side(make(model, tokenizer, cfg), cfg, warmup=True)
    tokens = sum(len(SetLLM(model, tokenizer, SET).encode(p)) for p in prompts(cfg))  # the batch's prompt tokens, as the base reads them too
    return {"axis": "model_size", "x": params, "model": name, "reading": workload, "tokens": tokens, **row} | ({"new_tokens": generated} if generated else {})


# -- report --------------------------------------------------------------------------------


def table(report: dict) -> str:
    """Every point as one row of a markdown table."""
    lines = [f"# cost curves on {report['machine']}: Set-LLM ({SET}) / base ({BASE})", "",
             "| axis | x | reading | tokens | Set-LLM s | base s | time Set/base | Set-LLM peak +MB | base peak +MB | peak Set/base | rounds |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in report["points"]:
        x = f"{p['model']} ({p['x'] / 1e6:,.0f}M)" if p["axis"] == "model_size" else str(p["x"])
        reading = p["reading"] + (" (auto)" if p.get("auto_picks") else "")
        peak = f"{p['ratio_peak']:.2f}" if p["ratio_peak"] is not None else "-"
        lines.append(f"| {p['axis']} | {x} | {reading} | {p.get('tokens', '')} | {p[SET]['s']:.3f} | {p[BASE]['s']:.3f} | {p['ratio_s']:.2f} "
                     f"| {p[SET]['peak_growth_mb']:.1f} | {p[BASE]['peak_growth_mb']:.1f} | {peak} | {p['rounds']} |")
    if report["skipped"]:
        lines.append(f"\nskipped (budget): {'; '.join(report['skipped'])}")
    return "\n".join(lines)


def plot(report: dict, path: str) -> None:
    """One column per axis: seconds of Set-LLM (solid) and base (dashed) per reading against x
    (top), the Set/base ratios of time (solid) and peak memory (dotted) (bottom); log-scale x."""
    import matplotlib

    matplotlib.use("Agg")  # a file, no display
    import matplotlib.pyplot as plt

    axes = [a for a in AXES if any(p["axis"] == a for p in report["points"])]
    fig, grid = plt.subplots(2, max(1, len(axes)), figsize=(5 * max(1, len(axes)), 8), squeeze=False)
    for col, axis in enumerate(axes):
        _draw_axis(grid[0][col], grid[1][col], axis, [p for p in report["points"] if p["axis"] == axis])
    fig.suptitle(f"Set-LLM ({SET}) vs base ({BASE}) on {report['machine']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _draw_axis(top, bottom, axis: str, points: list[dict]) -> None:
    from matplotlib.ticker import NullLocator

    for i, reading in enumerate(dict.fromkeys(p["reading"] for p in points)):
        row = sorted((p for p in points if p["reading"] == reading), key=lambda p: p["x"])
        xs, color = [p["x"] for p in row], f"C{i}"
        top.plot(xs, [p[SET]["s"] for p in row], "o-", color=color, label=f"Set-LLM, {reading}")
        top.plot(xs, [p[BASE]["s"] for p in row], "s--", color=color, label=f"base, {reading}")
        bottom.plot(xs, [p["ratio_s"] for p in row], "o-", color=color, label=f"time, {reading}")
        peaks = [(p["x"], p["ratio_peak"]) for p in row if p["ratio_peak"] is not None]
        bottom.plot([x for x, _ in peaks], [r for _, r in peaks], "^:", color=color, label=f"peak memory, {reading}")
    ticks = {p["x"]: f"{p['x'] / 1e6:,.0f}M" if axis == "model_size" else str(p["x"]) for p in points}
    top.set(yscale="log", title=axis.replace("_", " "), ylabel="seconds (median)")
    bottom.set(ylabel="Set-LLM / base")
    bottom.axhline(1.0, color="grey", lw=0.5)
    for ax in (top, bottom):
        ax.set_xscale("log")
        ax.set_xticks(list(ticks), list(ticks.values()))  # the measured x values, not powers of ten
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel({"length": "prompt tokens (target)", "set_size": "elements in the set", "model_size": "parameters"}[axis])
        ax.legend(fontsize=7)


def run(cfg: Config) -> dict:
    from transformers import AutoTokenizer

    from setllm.loading import embedded_model_dir

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    budget, tokenizer = Budget(cfg.budget_s), AutoTokenizer.from_pretrained(embedded_model_dir())
    points = []
    embedded = functools.cache(lambda: make_model(EMBEDDED, cfg, tokenizer))  # the length and set-size axes share it
    for axis in cfg.axes:  # in the order given: what must not fall to the budget goes first
        if axis == "model_size":
            points += model_size_axis(tokenizer, cfg, budget)
        else:
            points += {"length": length_axis, "set_size": set_size_axis}[axis](embedded(), tokenizer, cfg, budget)
    return {"machine": f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)", "torch": torch.__version__, "dtype": "float32",
            "memory_measure": memory_measure("cpu"), "long_prompt_tokens": LONG_PROMPT_TOKENS, "config": dataclasses.asdict(cfg),
            "points": points, "skipped": budget.skipped, "seconds": round(time.monotonic() - budget.start, 1)}


def main(argv=None) -> int:
    cfg = parse_args(argv)
    report = run(cfg)
    with contextlib.redirect_stdout(sys.stderr):  # stdout keeps the markdown table alone
        emit(report, cfg.out)
    if cfg.plot:
        plot(report, cfg.plot)
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
