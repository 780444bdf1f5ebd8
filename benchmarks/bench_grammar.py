"""xgrammar and llguidance side by side on the embedded tokenizer: import, tokenizer set-up,
a few schemas' first compile, and the per-token cost of the mask (fill the next-token
bitmask, then accept the token) along a valid answer of each schema. One thread.

    python benchmarks/bench_grammar.py [--tokenizer DIR] [--repeat 5] [--decode]

Each engine is imported only if installed (``pip install xgrammar==0.2.8`` /
``llguidance==1.9.1``); the numbers are medians over ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from bench_fixed_shapes import timed

SCHEMAS = {
    "label": ({"type": "object", "properties": {"label": {"enum": ["positive", "negative", "neutral"]}, "confidence": {"type": "number"}},
               "required": ["label", "confidence"], "additionalProperties": False},
              {"label": "negative", "confidence": 0.75}),
    "person": ({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                                                 "email": {"type": "string", "format": "email"}, "tags": {"type": "array", "items": {"type": "string"}},
                                                 "active": {"type": "boolean"}},
                "required": ["name", "age", "tags", "active"], "additionalProperties": False},
               {"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "tags": ["math", "engines"], "active": True}),
    "orders": ({"type": "array", "maxItems": 8, "items": {"type": "object", "properties": {
        "id": {"type": "integer"}, "item": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}, "price": {"type": "number"},
        "status": {"enum": ["open", "shipped", "returned"]}, "notes": {"type": ["string", "null"]}},
        "required": ["id", "item", "qty", "price", "status", "notes"], "additionalProperties": False}},
               [{"id": i, "item": f"widget {i}", "qty": i + 1, "price": 9.5 * i, "status": "open", "notes": None} for i in range(4)]),
    "any-json": ({"type": "object"}, {"summary": "two cats", "count": 2, "tags": ["cat", "pet"], "ok": True}),
}


def median_ms(fn, repeat: int) -> float:
    return 1000 * timed(fn, repeat)


def walk(fill, accept, ids) -> float:
    """Seconds spent filling the next-token mask and accepting each of ``ids``."""
    spent = 0.0
    for t in ids:
        start = time.perf_counter()
        fill()
        assert accept(t), t
        spent += time.perf_counter() - start
    return spent


class XGrammar:
    name = "xgrammar"

    def __init__(self, tokenizer, vocab: int):
        import xgrammar as xgr
        self.xgr, self.vocab = xgr, vocab
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab)

    def compile(self, schema):
        compiler = self.xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        return compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, separators=(", ", ": "))

    def walk(self, compiled, ids) -> float:
        matcher = self.xgr.GrammarMatcher(compiled)
        mask = self.xgr.allocate_token_bitmask(1, self.vocab)
        return walk(lambda: matcher.fill_next_token_bitmask(mask), matcher.accept_token, ids)


class LLGuidance:
    name = "llguidance"

    def __init__(self, tokenizer, vocab: int):
        import llguidance
        import llguidance.hf
        import llguidance.torch
        self.llg, self.vocab = llguidance, vocab
        self.tok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab)

    def compile(self, schema):
        grammar = self.llg.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "})
        matcher = self.llg.LLMatcher(self.tok, grammar, log_level=0)
        assert not matcher.is_error(), matcher.get_error()
        mask = self.llg.torch.allocate_token_bitmask(1, self.vocab)
        self.llg.torch.fill_next_token_bitmask(matcher, mask)  # llguidance builds lazily: the first mask is part of a compile
        return grammar

    def walk(self, grammar, ids) -> float:
        matcher = self.llg.LLMatcher(self.tok, grammar, log_level=0)
        mask = self.llg.torch.allocate_token_bitmask(1, self.vocab)
        return walk(lambda: self.llg.torch.fill_next_token_bitmask(matcher, mask), matcher.consume_token, ids)


def decode_cost(repeat: int) -> None:
    """The embedded model's decoding per token, free and under a grammar (the project's loop),
    side by side on one prompt; and a schema's first plan against the request it serves."""
    import setllm
    from setllm.structured import plan, spec

    lm = setllm.SetLLM.from_pretrained()
    prompt, n = "List twenty animals, one per line:\n", 48
    config = setllm.GenerationConfig(max_new_tokens=n, stop=[])
    shape = spec(regex="[a-z\n]{48,}")  # an answer that runs to the budget, as the free one does
    runs = {"free": lambda: lm.generate_encoded([lm.encode(prompt)], config)[0][1],
            "guided": lambda: lm.generate_structured(prompt, shape, config, show=False).token_ids}
    tokens = {name: len(run()) for name, run in runs.items()}  # also the warm-up
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):  # side by side, in turns: a machine's drift reaches both alike
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - start)
    free, guided = (1000 * statistics.median(seconds[k]) / tokens[k] for k in runs)
    pairs = statistics.median(g / f for g, f in zip(seconds["guided"], seconds["free"]))
    print(f"decode: free {free:.1f} ms/token over {tokens['free']} tokens, under a regex {guided:.1f} ms/token over {tokens['guided']} "
          f"({guided / free:.2f}x; median of the {repeat} runs' own ratios {pairs:.2f}x)")
    schema = {"type": "object", "properties": {"label": {"enum": ["positive", "negative", "neutral"]}, "stars": {"type": "integer",
              "minimum": 1, "maximum": 5}}, "required": ["label", "stars"]}
    start = time.perf_counter()
    plan.plan(spec(schema), lm.exact)
    first = 1000 * (time.perf_counter() - start)
    served = median_ms(lambda: lm.generate("The soup was cold.", schema=schema, max_new_tokens=32), repeat)
    print(f"schema: first plan {first:.1f} ms, the request it serves {served:.0f} ms ({first / served:.3f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", help="a tokenizer folder (default: the embedded model's)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--decode", action="store_true", help="also time decoding free and under a grammar on the embedded model")
    args = parser.parse_args()
    import torch
    import transformers
    torch.set_num_threads(1)
    if args.tokenizer:
        tokenizer = transformers.AutoTokenizer.from_pretrained(args.tokenizer)
    else:
        import setllm
        tokenizer = setllm.SetLLM.from_pretrained(adapter=None).tokenizer
    vocab = len(tokenizer)
    for engine in (XGrammar, LLGuidance):
        start = time.perf_counter()
        try:
            e = engine(tokenizer, vocab)
        except ImportError as err:
            print(f"{engine.name}: not installed ({err})")
            continue
        print(f"{e.name}: import + tokenizer set-up {1000 * (time.perf_counter() - start):.0f} ms")
        for name, (schema, value) in SCHEMAS.items():
            ids = tokenizer.encode(json.dumps(value), add_special_tokens=False)
            compiled = e.compile(schema)
            compile_ms = median_ms(lambda: e.compile(schema), args.repeat)
            per_token = statistics.median(e.walk(compiled, ids) for _ in range(args.repeat)) / len(ids) * 1e6
            print(f"  {name:9s} compile {compile_ms:8.2f} ms   mask+accept {per_token:7.1f} us/token over {len(ids)} tokens")
    if args.decode:
        decode_cost(args.repeat)


if __name__ == "__main__":
    main()
