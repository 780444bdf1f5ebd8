"""Host work per call: every aten op a call dispatches, setllm beside plain transformers.

On a GPU a short forward costs what its kernel launches cost, so the number of ops a call
dispatches is close to its time there; the count is the same on any machine. Each call is
counted once after a warm-up run of the same call:

- setllm: :func:`setllm.core.forward.scoring.score_requests` (the driver every surface calls),
  ``setmask-setpe``; decoding: one :func:`setllm.core.forward.generation.decode_one_token`;
- plain transformers: the same options scored as lm-eval's ``--model hf`` does (one row of
  context + option per option, one padded forward, the option tokens' log-probs); decoding:
  one cached forward of a token with the batch's 2D attention mask, as ``generate`` runs it.

Calls: 4 options after a short multiple-choice prompt, alone and 8 prompts in one call;
the same after a set of documents of about 1k tokens; one decoded token after the short
prompt. ``--profile`` also prints the ops by name and the ops of one decoder layer.

``--time N`` instead times scoring side by side in one process (median of N, alternated):
short prompts at batch 1 and 8 (plain: lm-eval's rows) and after a 2.1k-token set (plain:
the prompt once, each option on its cache).

Usage: python benchmarks/bench_ops.py [--tiny] [--profile] [--time N] [--threads T]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

QUESTION = "Which of these is a mammal?"
OPTIONS = ["the whale", "the shark", "the trout", "the octopus"]
DOC = " ".join(["word"] * 60)  # ~60 tokens on the embedded model's tokenizer


class OpCounter(TorchDispatchMode):
    """Counts every aten op dispatched inside, by name, and by decoder layer where
    :meth:`watch_layers` marked them."""

    def __init__(self):
        super().__init__()
        self.ops: collections.Counter = collections.Counter()
        self.layer: int | None = None
        self.by_layer: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        if self.layer is not None:
            self.by_layer[(self.layer, name)] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    def watch_layers(self, layers):
        """Hooks that mark which decoder layer runs (removed by the returned handles)."""
        handles = []
        for i, layer in enumerate(layers):
            handles.append(layer.register_forward_pre_hook(lambda m, a, i=i: setattr(self, "layer", i)))
            handles.append(layer.register_forward_hook(lambda m, a, o: setattr(self, "layer", None)))
        return handles


def count(fn) -> OpCounter:
    """The ops of ``fn()``, counted after one warm-up call."""
    fn()
    with OpCounter() as counter:
        fn()
    return counter


def load(tiny: bool, layers: int = 30):
    """The embedded model without adapter, or the tests' tiny llama with ``layers`` layers
    (the embedded model's 30 by default: the ratio is mostly the layers')."""
    from setllm import SetLLM

    global SET_TOKENS
    if tiny:
        SET_TOKENS = 150  # six documents: as in the 1k set, each sees less than half the prompt
        sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
        from tiny import tiny_model, tiny_tokenizer

        return SetLLM(tiny_model("llama", num_hidden_layers=layers), tiny_tokenizer(), "setmask-setpe")
    return SetLLM.from_pretrained(adapter=None, variant="setmask-setpe", attn_implementation="sdpa")


SET_TOKENS = 1000  # the long calls' set of documents (the tiny model's context is 256: 150 there)


def prompts(lm, batch: int, long: bool):
    """``batch`` multiple-choice prompts (after a set of about :data:`SET_TOKENS` where ``long``)."""
    from setllm import Set, mc_prompt

    out = []
    for i in range(batch):
        p = mc_prompt(f"{QUESTION} ({i})", OPTIONS)
        if long:
            doc = DOC if SET_TOKENS >= 1000 else "apple banana cherry"  # the tiny tokenizer splits "word" into letters
            n = max(2, SET_TOKENS // len(lm.tokenizer(f"{i}.0: {doc}\n").input_ids))
            p = ["Documents:\n", Set([f"{i}.{j}: {doc}\n" for j in range(n)]), *p.segments]
        out.append(p)
    return out


def setllm_score(lm, ps):
    from setllm.core.forward import scoring

    reqs = [scoring.ScoreRequest(lm.encode(p), [lm.response_ids(p, o) for o in OPTIONS]) for p in ps]
    return lambda: scoring.score_requests(lm.model, lm.variant, lm.pad_id, reqs)


def plain_score(lm, ps):
    """lm-eval ``--model hf``: a row of context + option per option, right-padded, one forward,
    the option tokens' log-probs. Only the option positions' logits are kept (``logits_to_keep``,
    as setllm keeps them): 32 rows of 1k tokens would otherwise hold 7 GB of logits."""
    rows = [(lm.encode(p).input_ids, lm.response_ids(p, o)) for p in ps for o in OPTIONS]
    width = max(len(c) + len(o) for c, o in rows)
    ids = torch.tensor([c + o + [0] * (width - len(c) - len(o)) for c, o in rows])
    mask = torch.tensor([[1] * (len(c) + len(o)) + [0] * (width - len(c) - len(o)) for c, o in rows])
    first = min(len(c) for c, _ in rows) - 1
    keep = torch.arange(first, width)

    @torch.no_grad()
    def run():
        logp = lm.model(input_ids=ids, attention_mask=mask, logits_to_keep=keep).logits.float().log_softmax(-1)
        return [float(logp[r, len(c) - 1 - first : len(c) + len(o) - 1 - first].gather(1, torch.tensor(o)[:, None]).sum())
                for r, (c, o) in enumerate(rows)]

    return run


def plain_cached(lm, ps):
    """Plain transformers reading each prompt causally once, then each option on its cache (the
    cheaper way after a long prompt, as ``benchmarks/gpu_check.py`` compares long sets)."""
    from setllm.core.model.kvcache import cache_kwarg, new_cache, truncate_cache

    ctx = [lm.encode(p).input_ids for p in ps]
    options = [[lm.response_ids(p, o) for o in OPTIONS] for p in ps]

    @torch.no_grad()
    def run():
        out = []
        for ids, opts in zip(ctx, options):
            cache = new_cache()
            first = lm.model(input_ids=torch.tensor([ids]), use_cache=True, **{cache_kwarg(): cache}, logits_to_keep=1).logits[0, -1].float().log_softmax(-1)
            for o in opts:
                total = float(first[o[0]])
                if len(o) > 1:
                    step = lm.model(input_ids=torch.tensor([o[:-1]]), use_cache=True, **{cache_kwarg(): cache}).logits[0].float().log_softmax(-1)
                    total += float(step.gather(1, torch.tensor(o[1:])[:, None]).sum())
                    truncate_cache(cache, len(ids))
                out.append(total)
        return out

    return run


def setllm_decode(lm, ps):
    """One decoding step after the prompts' prefill (the prefill not counted)."""
    from setllm.core.forward import generation, scoring
    from setllm.core.model import kvcache
    from setllm.core.tokens.batch import collate

    batch = collate([lm.encode(p) for p in ps], lm.variant.positions, lm.pad_id)
    cache, logprobs = scoring.prefill(lm.model, lm.variant, batch)
    token = logprobs.argmax(-1)
    n = batch.layout.shape[1]

    def run():
        kvcache.truncate_cache(cache, n)
        return generation.decode_one_token(lm.model, lm.variant, cache, batch, token, 0)

    return run


def plain_decode(lm, ps):
    """One cached forward of a token per row, with the left-padded batch's 2D mask (as ``generate``)."""
    from setllm.core.model.kvcache import cache_kwarg, new_cache, truncate_cache

    ctx = [lm.encode(p).input_ids for p in ps]
    width = max(map(len, ctx))
    ids = torch.tensor([[0] * (width - len(c)) + c for c in ctx])
    mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in ctx])
    cache = new_cache()
    with torch.no_grad():
        token = lm.model(input_ids=ids, attention_mask=mask, use_cache=True, **{cache_kwarg(): cache}).logits[:, -1].argmax(-1)
    grown = torch.cat([mask, torch.ones(len(ps), 1, dtype=mask.dtype)], 1)

    @torch.no_grad()
    def run():
        truncate_cache(cache, width)
        return lm.model(input_ids=token[:, None], attention_mask=grown, use_cache=True, **{cache_kwarg(): cache}).logits[:, -1]

    return run


TIMED = {  # name: (batch, set tokens, setllm's call, plain transformers' call), timed side by side
    "score, short, batch 1": (1, 0, setllm_score, plain_score),
    "score, short, 8 prompts": (8, 0, setllm_score, plain_score),
    "score, 2.1k-token set, batch 1 (plain: options on its cache)": (1, 2100, setllm_score, plain_cached),
}

CALLS = {  # name: (batch, long set, setllm's call, plain transformers' call)
    "score, short, batch 1": (1, False, setllm_score, plain_score),
    "score, short, 8 prompts": (8, False, setllm_score, plain_score),
    "score, ~1k-token set, batch 1": (1, True, setllm_score, plain_score),
    "score, ~1k-token set, 8 prompts": (8, True, setllm_score, plain_score),
    "decode, one token, batch 1": (1, False, setllm_decode, plain_decode),
    "decode, one token, batch 8": (8, False, setllm_decode, plain_decode),
}


def measure(lm, names=None) -> dict[str, tuple[OpCounter, OpCounter]]:
    out = {}
    for name, (batch, long, mine, plain) in CALLS.items():
        if names is None or name in names:
            ps = prompts(lm, batch, long)
            out[name] = (count(mine(lm, ps)), count(plain(lm, ps)))
    return out


def table(counts: dict[str, tuple[OpCounter, OpCounter]]) -> str:
    lines = ["| call | setllm | plain transformers | ratio |", "|---|---|---|---|"]
    for name, (mine, plain) in counts.items():
        lines.append(f"| {name} | {mine.total} | {plain.total} | {mine.total / plain.total:.2f} |")
    return "\n".join(lines)


def profile(lm, name: str) -> str:
    """Ops by name for call ``name``, setllm beside plain, and the ops of decoder layer 1."""
    batch, long, mine, plain = CALLS[name]
    ps = prompts(lm, batch, long)
    layers = lm.model.model.layers
    rows = []
    for fn in (mine(lm, ps), plain(lm, ps)):
        fn()
        counter = OpCounter()
        handles = counter.watch_layers(layers)
        try:
            with counter:
                fn()
        finally:
            for h in handles:
                h.remove()
        rows.append(counter)
    a, b = rows
    layer = lambda c: collections.Counter({op: n for (i, op), n in c.by_layer.items() if i == 1})  # noqa: E731
    la, lb = layer(a), layer(b)
    lines = [f"ops of '{name}' (all / decoder layer 1):", "| op | setllm | plain | setllm layer 1 | plain layer 1 |", "|---|---|---|---|---|"]
    for op in sorted(set(a.ops) | set(b.ops), key=lambda o: -(a.ops[o] + b.ops[o])):
        lines.append(f"| {op} | {a.ops[op]} | {b.ops[op]} | {la[op]} | {lb[op]} |")
    lines.append(f"| total | {a.total} | {b.total} | {sum(la.values())} | {sum(lb.values())} |")
    return "\n".join(lines)


def timed(lm, repeats: int) -> str:
    """Median seconds of each call of :data:`TIMED`, setllm and plain transformers alternated
    (one warm-up each), in one process."""
    global SET_TOKENS
    lines = ["| call | setllm (median s) | plain transformers (median s) | ratio |", "|---|---|---|---|"]
    for name, (batch, tokens, mine, plain) in TIMED.items():
        before = SET_TOKENS
        SET_TOKENS = tokens if tokens and SET_TOKENS >= 1000 else SET_TOKENS  # the tiny model keeps what fits its context
        try:
            ps = prompts(lm, batch, bool(tokens))
        finally:
            SET_TOKENS = before
        fns = [mine(lm, ps), plain(lm, ps)]
        for fn in fns:
            fn()
        times = [[], []]
        for _ in range(repeats):
            for fn, t in zip(fns, times):
                start = time.perf_counter()
                fn()
                t.append(time.perf_counter() - start)
        a, b = statistics.median(times[0]), statistics.median(times[1])
        lines.append(f"| {name} | {a:.3f} | {b:.3f} | {a / b:.2f} |")
    return "\n".join(lines)


def torch_profile(lm, name: str) -> str:
    """Where setllm's call ``name`` of :data:`TIMED` spends its CPU time (``torch.profiler``, one
    call after a warm-up), by op."""
    from torch.profiler import ProfilerActivity, profile

    global SET_TOKENS
    batch, tokens, mine, _ = TIMED[name]
    before = SET_TOKENS
    SET_TOKENS = tokens if tokens and SET_TOKENS >= 1000 else SET_TOKENS
    try:
        fn = mine(lm, prompts(lm, batch, bool(tokens)))
    finally:
        SET_TOKENS = before
    fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="the tests' tiny llama instead of the embedded model")
    p.add_argument("--layers", type=int, default=30, help="the tiny llama's layers")
    p.add_argument("--profile", action="store_true", help="also print the ops by name and per layer of each call")
    p.add_argument("--calls", nargs="*", default=None, help="only these calls (names as printed)")
    p.add_argument("--time", type=int, default=0, metavar="N", help="instead, time the calls side by side (median of N)")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--torch-profile", default=None, metavar="CALL", help="instead, setllm's CPU time by op for a --time call (name as printed)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    lm = load(args.tiny, args.layers)
    if args.time:
        print(timed(lm, args.time))
        return 0
    if args.torch_profile:
        print(torch_profile(lm, args.torch_profile))
        return 0
    counts = measure(lm, args.calls)
    print(table(counts))
    if args.profile:
        for name in counts:
            print()
            print(profile(lm, name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
