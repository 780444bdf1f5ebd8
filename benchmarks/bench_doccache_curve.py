"""A question over cached documents against a cold reading, as the documents grow: the embedded
model under ``sbp``, measured side by side in one run.

For each ``--docs`` count (documents of about 160 tokens: 200 are about 32k tokens):

- **cold**: the question scored with the cache off (every document read afresh);
- **warm**: the same question over the documents in another order, every piece from the cache
  (median of ``--repeats``), its scores compared with the cold ones (the same bits);
- **joined**: the warm question read the way a GPU reads it (each layer joins the pieces once,
  one attention call: ``attention.PER_PIECE`` emptied), on this CPU;
- **read once**: the time to read the question's cached keys and values once (a sum over every
  tensor), the floor a question over them cannot beat;
- **bytes per token**: the memory cache's bytes over the tokens it holds (the bound: ``--cache-mb``);
- **ops**: the aten ops a cold and a warm question dispatch, counted on a narrow twin of the model
  (the same layers, heads and tokenizer, narrower widths: the same ops), and a GPU's ratios
  predicted from them: a call costs ``max(ops x --gpu-op-us, flops / --gpu-tflops + bytes / --gpu-tbps)``.

``--rows`` adds the question's row blocks (16, 32, 64 rows) for one question and for four,
warm, side by side; ``--before REF`` the warm question read by commit REF's reading, side by
side; ``--profile N`` where a warm question over N documents spends its time. ``--plot`` draws the curve.

    python benchmarks/bench_doccache_curve.py --threads 1 --json curve.json --plot docs/figures/doccache-curve.png
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_doccache import documents  # noqa: E402

QUESTION = "Question: what is the code of the first record?\nAnswer:"
OPTIONS = ["1", "2", "3"]


def prompt(docs):
    from setllm import Set

    return ["Documents:\n", Set(list(docs)), QUESTION]


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@contextlib.contextmanager
def joined_pieces():
    """Inside, a question's pieces are joined per layer, one attention call (a GPU's way), on this CPU."""
    from setllm.core.doccache import attention

    saved = set(attention.PER_PIECE)
    attention.PER_PIECE.clear()
    try:
        yield
    finally:
        attention.PER_PIECE.update(saved)


def pieces_of(lm, request) -> list:
    """The cached pieces a question reads (the store's tensors)."""
    from setllm.core import doccache
    from setllm.core.doccache import driver

    store, key = doccache.for_reading(lm.model), doccache.reading_key(lm.model, lm.tokenizer, lm.variant)
    [(parts, _)] = driver._piece_lists(lm.model, lm.variant, [(request.prompt, None)], store, key)
    return parts


def read_once(parts) -> float:
    """Every key and value tensor of ``parts`` read once (a sum of each)."""
    return float(sum(t.sum() for layers in parts for pair in layers for t in pair))


def point(lm, n: int, args, before=None) -> dict:
    """One point of the curve: ``n`` documents, cold and warm side by side."""
    docs = documents(n, 0, args.words)
    cold_request = lm.score_request(prompt(docs), OPTIONS)
    lm.cache_documents(0)
    start = time.perf_counter()
    [cold] = lm.score_encoded([cold_request])
    cold_s = time.perf_counter() - start
    store = lm.cache_documents(args.cache_mb)
    store.clear()
    lm.score_encoded([cold_request])  # reads and keeps every piece
    orders = [lm.score_request(prompt(random.Random(k).sample(docs, n)), OPTIONS) for k in range(args.repeats)]
    warm = [lm.score_encoded([r])[0] for r in orders]
    with joined_pieces():
        joined = lm.score_encoded([orders[0]])[0]
    parts = pieces_of(lm, orders[0])
    times = {"warm": [], "joined": [], "read": [], "before": []}
    for r in orders:  # side by side: each repeat times them all, one after the other
        times["warm"].append(seconds(lambda: lm.score_encoded([r])))
        with joined_pieces():
            times["joined"].append(seconds(lambda: lm.score_encoded([r])))
        times["read"].append(seconds(lambda: read_once(parts)))
        if before is not None:
            times["before"].append(seconds(lambda: before_score(lm, before, r)))
    warm_s, joined_s, read_s = (statistics.median(times[k]) for k in ("warm", "joined", "read"))
    before_s = statistics.median(times["before"]) if before is not None else None
    kv_bytes = sum(t.numel() * t.element_size() for layers in parts for pair in layers for t in pair)
    stats = store.stats()
    cached_tokens = sum(layers[0][0].shape[2] for layers, _ in store._pieces.values())
    return {"documents": n, "tokens": len(cold_request.prompt), "cold_s": cold_s, "warm_s": warm_s, "warm_over_cold": warm_s / cold_s,
            "joined_s": joined_s, "before_s": before_s, "read_once_s": read_s, "warm_over_read_once": warm_s / read_s, "kv_bytes": kv_bytes,
            "cache_bytes": stats.bytes, "cache_max_bytes": stats.max_bytes, "bytes_per_token": stats.bytes / cached_tokens,
            "same_bits": all(w == cold for w in warm),
            "joined_max_diff": max(abs(a.logprob - b.logprob) for a, b in zip(joined, cold))}


def reading_at(ref: str):
    """The document cache's driver (``doccache/driver.py``) of commit ``ref``, as a module beside
    this one (a commit since ``core/`` took its subpackages: the module's relative imports
    must resolve here)."""
    import importlib.util
    import subprocess

    source = subprocess.run(["git", "show", f"{ref}:src/setllm/core/doccache/driver.py"], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).parents[1]).stdout
    spec = importlib.util.spec_from_loader("setllm.core.doccache.driver_before", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "setllm.core.doccache"
    sys.modules[spec.name] = module  # its dataclasses look their module up
    exec(compile(source, f"{ref}:driver.py", "exec"), module.__dict__)
    return module


def before_score(lm, before, request):
    """``request`` scored by the reading of ``--before`` through the same cache."""
    from setllm.core import doccache

    store, key = doccache.for_reading(lm.model), doccache.reading_key(lm.model, lm.tokenizer, lm.variant)
    return before.score(lm.model, lm.variant, [request], store, key)


def twin(lm):
    """The model's narrow twin: its layers, heads, vocabulary and tokenizer, head size 8 and
    narrow layers (random weights): the ops of any call are the model's."""
    import copy

    from transformers import AutoModelForCausalLM

    from setllm import SetLLM

    config = copy.deepcopy(lm.model.config)
    config.head_dim = 8
    config.hidden_size = 8 * config.num_attention_heads
    config.intermediate_size = 2 * config.hidden_size
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32).eval()
    return SetLLM(model, lm.tokenizer, "sbp")


def ops(narrow, n: int, args) -> dict:
    """Aten ops of a cold and a warm question over ``n`` documents on the narrow twin: as the
    CPU reads them, and as a GPU does (:func:`as_on_a_gpu`)."""
    from bench_ops import OpCounter

    request = narrow.score_request(prompt(documents(n, 0, args.words)), OPTIONS)
    out = {}
    for way, setting in (("cpu", contextlib.nullcontext), ("gpu", as_on_a_gpu)):
        with setting():
            narrow.cache_documents(0)
            with OpCounter() as cold:
                narrow.score_encoded([request])
            narrow.cache_documents(args.cache_mb).clear()
            narrow.score_encoded([request])
            with OpCounter() as warm:
                narrow.score_encoded([request])
        out.update({f"{way}_cold_ops": cold.total, f"{way}_warm_ops": warm.total})
    return out


@contextlib.contextmanager
def as_on_a_gpu():
    """The code paths a CUDA device takes, on this CPU: 512-row blocks each its own product,
    the question's pieces joined per layer, one attention call."""
    from setllm.core.doccache import attention, driver
    from setllm.core.forward import scoring
    from setllm.core.model import install

    saved = (dict(scoring.DEVICE_MATMUL_ROWS), set(install.BATCHED_BLOCKS), set(attention.PER_PIECE), dict(driver.QUESTION_ROWS))
    scoring.DEVICE_MATMUL_ROWS["cpu"] = scoring.DEVICE_MATMUL_ROWS["cuda"]
    for s in (install.BATCHED_BLOCKS, attention.PER_PIECE, driver.QUESTION_ROWS):
        s.clear()
    try:
        yield
    finally:
        scoring.DEVICE_MATMUL_ROWS.update(saved[0])
        install.BATCHED_BLOCKS.update(saved[1])
        attention.PER_PIECE.update(saved[2])
        driver.QUESTION_ROWS.update(saved[3])


def gpu_prediction(p: dict, lm, args) -> dict:
    """A GPU's cold and warm times from the op counts: each call ``max(ops x op time, flops /
    throughput + bytes / bandwidth)`` (the host launching ops while the device runs them):
    cold, every token through the weights; warm, the question's 32 rows, the weights read
    once and the pieces' keys and values three times (the join reads and writes them, attention reads)."""
    layers = [q for name, q in lm.model.named_parameters() if "embed" not in name]
    weights, flops_per_token = sum(q.numel() * q.element_size() for q in layers), 2 * sum(q.numel() for q in layers)
    tokens, kv = p["tokens"], p["kv_bytes"]

    def seconds(n_ops, flops, moved):
        return max(n_ops * args.gpu_op_us * 1e-6, flops / (args.gpu_tflops * 1e12) + moved / (args.gpu_tbps * 1e12))

    cold = seconds(p["gpu_cold_ops"], flops_per_token * tokens, weights * (2 + tokens // 2048) + 2 * kv)
    warm = seconds(p["gpu_warm_ops"], flops_per_token * 32, weights + 3 * kv)
    return {"gpu_cold_s": cold, "gpu_warm_s": warm, "gpu_warm_over_cold": warm / cold,
            "gpu_warm_launch_bound": p["gpu_warm_ops"] * args.gpu_op_us * 1e-6 >= warm}


def rows(lm, args) -> list[dict]:
    """Warm questions under each row block, side by side: one question and four."""
    from setllm.core.doccache import driver

    docs = documents(max(args.docs[0], 8), 0, args.words)
    lm.cache_documents(args.cache_mb)
    one = [lm.score_request(prompt(docs), OPTIONS)]
    four = [lm.score_request(["Documents:\n", prompt(docs)[1], f"Question: what is the code of record {q}?\nAnswer:"], OPTIONS) for q in range(4)]
    lm.score_encoded(four)
    saved, out = driver.QUESTION_ROWS["cpu"], []
    try:
        times = {(r, len(b)): [] for r in (16, 32, 64) for b in (one, four)}
        for _ in range(args.repeats):
            for r, n in times:
                driver.QUESTION_ROWS["cpu"] = r
                start = time.perf_counter()
                lm.score_encoded(one if n == 1 else four)
                times[(r, n)].append(time.perf_counter() - start)
        for (r, n), ts in times.items():
            tail = sum(len(driver._Pieces.of(q.prompt).suffix) + sum(len(o) - 1 for o in q.options) for q in (one if n == 1 else four))
            out.append({"rows": r, "questions": n, "tokens": tail, "padded_to": -(-tail // r) * r, "median_s": statistics.median(ts)})
    finally:
        driver.QUESTION_ROWS["cpu"] = saved
    return out


def profiled(lm, n: int, args) -> str:
    """Where a warm question over ``n`` documents spends its time (torch.profiler, by op), each way."""
    from torch.profiler import profile

    docs = documents(n, 0, args.words)
    lm.cache_documents(args.cache_mb)
    request = lm.score_request(prompt(random.Random(1).sample(docs, n)), OPTIONS)
    lm.score_encoded([request])
    tables = []
    for way, setting in (("a call per piece", contextlib.nullcontext), ("pieces joined per layer", joined_pieces)):
        with setting():
            lm.score_encoded([request])
            with profile() as p:
                lm.score_encoded([request])
        tables.append(f"{n} documents, {way}:\n" + p.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))
    return "\n".join(tables)


def plot(curve: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tokens = [p["tokens"] / 1000 for p in curve]
    fig, ((a, b), (c, d)) = plt.subplots(2, 2, figsize=(12, 8.5))
    for key, label in (("cold_s", "cold"), ("before_s", "warm, the reading before (pieces copied)"), ("warm_s", "warm (a call per piece)"),
                       ("joined_s", "warm, pieces joined per layer (a GPU's way)"), ("read_once_s", "reading its keys and values once")):
        if curve[0].get(key) is not None:
            a.plot(tokens, [p[key] for p in curve], marker="o", label=label)
    a.set(xlabel="thousand tokens of documents", ylabel="seconds", yscale="log", title="A question over cached documents")
    a.legend(fontsize=7)
    b.plot(tokens, [p["warm_over_cold"] for p in curve], marker="o", label="warm / cold, this CPU")
    if "gpu_warm_over_cold" in curve[0]:
        b.plot(tokens, [p["gpu_warm_over_cold"] for p in curve], marker="^", linestyle="--", label="a GPU's, predicted from op counts")
    b.scatter([13.2, 32], [0.01, 0.005], marker="x", color="red", label="goals: 0.01 at 13k, 0.005 at 32k")
    b.set(xlabel="thousand tokens of documents", ylabel="warm / cold", yscale="log", title="Warm against cold")
    b.legend(fontsize=7)
    c.plot(tokens, [p["warm_over_read_once"] for p in curve], marker="o")
    c.axhline(3, color="red", linestyle=":", label="goal: 3")
    c.set(xlabel="thousand tokens of documents", ylabel="warm / reading once", yscale="log", title="Warm against reading its keys and values once")
    c.legend(fontsize=7)
    d.plot(tokens, [p["bytes_per_token"] for p in curve], marker="o")
    d.set(xlabel="thousand tokens of documents", ylabel="bytes per token", title="The cache's bytes per token", ylim=(0, 60000))
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, nargs="+", default=[8, 16, 32, 64, 128, 200], help="document counts of the curve")
    p.add_argument("--words", type=int, default=140, help="filler words a document (140: about 160 tokens)")
    p.add_argument("--repeats", type=int, default=5, help="warm questions timed a point (median)")
    p.add_argument("--cache-mb", type=float, default=2048, help="the memory cache's bound (200 documents need about 1,500 MB)")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--rows", action="store_true", help="also the question's row blocks, side by side")
    p.add_argument("--before", default=None, metavar="REF", help="also the warm question read by commit REF's doccache/driver.py, side by side")
    p.add_argument("--skip-ops", action="store_true", help="no op counts or GPU prediction")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="also where a warm question over N documents spends its time")
    p.add_argument("--gpu-op-us", type=float, default=5.0, help="a GPU's host time per dispatched op (eager PyTorch: about 5 us)")
    p.add_argument("--gpu-tbps", type=float, default=4.8, help="a GPU's memory bandwidth, TB/s (H200: 4.8)")
    p.add_argument("--gpu-tflops", type=float, default=50.0, help="a GPU's fp32 throughput reached, TFLOP/s (H200 peak: 67)")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--plot", default=None, help="draw the curve into this PNG")
    args = p.parse_args()
    from setllm import SetLLM

    torch.set_num_threads(args.threads)
    lm = SetLLM.from_pretrained(variant="sbp", adapter=None)
    narrow = None if args.skip_ops else twin(lm)
    before = reading_at(args.before) if args.before else None
    result = {"threads": args.threads, "before": args.before, "curve": []}
    for n in args.docs:
        row = point(lm, n, args, before)
        if narrow is not None:
            row.update(ops(narrow, n, args))
            row.update(gpu_prediction(row, lm, args))
        result["curve"].append(row)
        print(json.dumps(row), flush=True)
    if args.profile:
        result["profile"] = profiled(lm, args.profile, args)
        print(result["profile"], flush=True)
    if args.rows:
        result["rows"] = rows(lm, args)
        for r in result["rows"]:
            print(json.dumps(r), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    if args.plot:
        plot(result["curve"], args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
