"""`setllm serve` held under mixed load for a given time: does it stay correct, answer every
request, and keep its memory?

It starts the server (the embedded model and its shipped adapters by default) on a free
loopback port and, for ``--seconds``, keeps ``--clients`` clients sending a mix: /v1/choose
(through the choose adapter and the documents adapter), /v1/score (shuffled sets; the base
model under ``causal-pe`` in a fixed order), /v1/judge, /v1/generate, and a few bad requests
that must get their 4xx. Every answer is checked against the library: the same requests
answered by an :class:`setllm.AdapterBank` of the same adapters in this process (answers
exactly; scores within ``--tolerance``, and how many have the same bits). It reports the
server's resident memory after the warm-up (``--warmup-s``) and at the end, latency
percentiles per route and status codes, and exits 1 if any request got a 5xx, any answer
differs from the library's, a bad request got anything but its 4xx, or memory grew past
``--max-growth`` after the warm-up.

    python benchmarks/soak_serve.py --seconds 600              # the 10-minute soak
    python benchmarks/soak_serve.py --seconds 30 --warmup-s 10 # a short one (the tests run one)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

import httpx
import psutil
import torch
from bench_serve import start_server, stop_server

QUESTIONS = [
    ("Which city is the capital of France?", ["Budapest", "Paris", "Zurich", "Rome"]),
    ("Which of these is a fruit?", ["car", "apple", "house", "river"]),
    ("What do plants need to make food?", ["sunlight", "soil", "rocks"]),
    ("Which animal can fly?", ["dog", "eagle", "fish", "horse"]),
    ("What is frozen water called?", ["steam", "ice", "sand"]),
]
JUDGED = [
    ("What is the capital of France?", ["Paris.", "It is Rome.", "Berlin, I think."]),
    ("Name a colour.", ["Red.", "A dog.", "Seven."]),
    ("How many legs does a spider have?", ["Eight.", "Six.", "Two."]),
]
GENERATE = ["Pick the fruit:\n{{car\n||apple\n||house\n}}Answer:", "Pick the animal:\n{{stone\n||cat\n||cloud\n}}Answer:"]
BAD = [  # (body or raw text, route, expected status)
    ({"question": "Q?", "options": ["a", "a"]}, "/v1/choose", 400),
    ({"question": "Q?", "options": ["a", "b"], "adapter": "nope"}, "/v1/choose", 404),
    ({"question": "Q?"}, "/v1/choose", 422),
    ('{"question": "Q?", "options": ["a", ', "/v1/choose", 400),
    ({"prompt": "Pick:\n{{a\n||b\n", "options": ["a"]}, "/v1/score", 400),
    ({"question": "Q?", "options": ["a", "b"], "variant": "sideways"}, "/v1/choose", 422),
]
MIX = [("choose", 40), ("score", 20), ("judge", 15), ("generate", 15), ("bad", 10)]


@dataclass
class Outcome:
    route: str
    status: int
    seconds: float
    checked: bool = False
    differs: str | None = None  # what differs from the library, if anything
    same_bits: int = 0
    scores: int = 0


class Reference:
    """The library's answers to the soak's requests, computed once (exact mode: every
    ordering of a set is one computation, so one answer stands for all of them)."""

    def __init__(self, tolerance: float):
        from setllm import AdapterBank

        self.bank = AdapterBank.from_pretrained()
        self.tolerance = tolerance
        self._cache: dict = {}

    def warm(self) -> None:
        """Every answer the soak can ask for, computed before the load starts."""
        for question, options in QUESTIONS:
            for adapter in ("choose", "documents"):
                self.choose(question, options, adapter)
            self.score(markup(f"Question: {question}\n", options), options, "choose", None)
            self.score(markup(f"Question: {question}\n", options), options, "base", "causal-pe")
        for instruction, candidates in JUDGED:
            self.judge(instruction, candidates)
        for prompt in GENERATE:
            self.generate(prompt)

    def _once(self, key, fn):
        if key not in self._cache:
            self._cache[key] = fn()
        return self._cache[key]

    def choose(self, question, options, adapter):
        c = self._once(("choose", question, adapter), lambda: self.bank[adapter].choose(question, sorted(options)))
        return c.answer, {s.text: s.logprob for s in c.scores}

    def score(self, prompt, options, adapter, variant):
        view = self.bank[adapter] if variant is None else self.bank[adapter].with_variant(variant)
        key = ("score", prompt if variant else None, tuple(sorted(options)), adapter, variant)
        scores = self._once(key, lambda: view.score(prompt, sorted(options)))
        return {s.text: s.logprob for s in scores}

    def judge(self, instruction, candidates):
        def run():
            v = self.bank["judge"].judge(instruction, sorted(candidates))
            return [sorted(candidates)[i] for i in v.ranking], dict(zip(sorted(candidates), v.scores))
        return self._once(("judge", instruction), run)

    def generate(self, prompt):
        return self._once(("generate", prompt.split("\n")[0]), lambda: self.bank["choose"].generate(prompt, max_new_tokens=8, stop=["\n"]))


def shuffled(items, rng):
    items = list(items)
    rng.shuffle(items)
    return items


def markup(head: str, elements) -> str:
    return head + "{{" + "||".join(f"{e}\n" for e in elements) + "}}Answer:"


def compare_scores(out: Outcome, got: dict, want: dict, tolerance: float) -> None:
    out.scores += len(want)
    out.same_bits += sum(got[k] == want[k] for k in want)
    far = {k: (got[k], want[k]) for k in want if abs(got[k] - want[k]) > tolerance}
    if far:
        out.differs = f"scores {far}"


async def one_request(client: httpx.AsyncClient, ref: Reference, rng: random.Random) -> Outcome:
    kind = rng.choices([k for k, _ in MIX], [w for _, w in MIX])[0]
    if kind == "bad":
        body, route, want = rng.choice(BAD)
        start = time.perf_counter()
        r = await (client.post(route, content=body, headers={"content-type": "application/json"}) if isinstance(body, str)
                   else client.post(route, json=body))
        out = Outcome("bad " + route, r.status_code, time.perf_counter() - start, checked=True)
        if r.status_code != want or "error" not in r.json():
            out.differs = f"expected {want} with an error, got {r.status_code} {r.text[:200]}"
        return out
    if kind == "choose":
        question, options = rng.choice(QUESTIONS)
        adapter = rng.choice(["choose", "documents"])
        body = {"question": question, "options": shuffled(options, rng), **({"adapter": adapter} if adapter != "choose" else {})}
        route = "/v1/choose"
    elif kind == "score":
        question, options = rng.choice(QUESTIONS)
        base = rng.random() < 0.4  # the base model read causally: the given order is the input
        elements = options if base else shuffled(options, rng)
        prompt = markup(f"Question: {question}\n", elements)
        body = {"prompt": prompt, "options": options if base else shuffled(options, rng), **({"adapter": "base", "variant": "causal-pe"} if base else {})}
        route = "/v1/score"
    elif kind == "judge":
        instruction, candidates = rng.choice(JUDGED)
        body = {"instruction": instruction, "candidates": shuffled(candidates, rng)}
        route = "/v1/judge"
    else:
        prompt = rng.choice(GENERATE)
        head, _, rest = prompt.partition("{{")
        elements = [e.rstrip("\n") for e in rest.removesuffix("}}Answer:").split("||")]
        body = {"prompt": markup(head, shuffled(elements, rng)), "max_new_tokens": 8, "stop": ["\n"]}
        route = "/v1/generate"
    start = time.perf_counter()
    r = await client.post(route, json=body)
    out = Outcome(route, r.status_code, time.perf_counter() - start)
    if r.status_code != 200:
        out.differs = f"{r.status_code} {r.text[:200]}"
        return out
    got, out.checked = r.json(), True
    if kind == "choose":
        answer, scores = ref.choose(body["question"], body["options"], adapter)
        if got["answer"] != answer:
            out.differs = f"answer {got['answer']!r}, library {answer!r}"
        compare_scores(out, dict(zip(body["options"], got["scores"])), scores, ref.tolerance)
    elif kind == "score":
        want = ref.score(body["prompt"], body["options"], body.get("adapter", "choose"), body.get("variant"))
        compare_scores(out, dict(zip(body["options"], got["scores"])), want, ref.tolerance)
    elif kind == "judge":
        ranking, scores = ref.judge(body["instruction"], body["candidates"])
        if [body["candidates"][i] for i in got["ranking"]] != ranking:
            out.differs = f"ranking {got['ranking']} of {body['candidates']}, library {ranking}"
        compare_scores(out, dict(zip(body["candidates"], got["scores"])), scores, ref.tolerance)
    else:
        text = ref.generate(body["prompt"])
        if got["text"] != text:
            out.differs = f"text {got['text']!r}, library {text!r}"
    return out


async def soak(url: str, pid: int, ref: Reference, seconds: float, warmup_s: float, clients: int, seed: int) -> dict:
    proc = psutil.Process(pid)
    outcomes: list[Outcome] = []
    rss: list[tuple[float, int]] = []
    start = time.monotonic()
    deadline = start + seconds

    async def client_loop(k: int):
        rng = random.Random(seed * 1000 + k)
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            while time.monotonic() < deadline:
                try:
                    outcomes.append(await one_request(client, ref, rng))
                except httpx.HTTPError as e:  # no answer at all: counted as a failure
                    outcomes.append(Outcome("transport", 599, 0.0, differs=f"{type(e).__name__}: {e}"))

    async def sample_memory():
        while time.monotonic() < deadline:
            rss.append((time.monotonic() - start, proc.memory_info().rss))
            await asyncio.sleep(1.0)
        rss.append((time.monotonic() - start, proc.memory_info().rss))

    await asyncio.gather(sample_memory(), *(client_loop(k) for k in range(clients)))
    warm = [m for t, m in rss if t >= warmup_s] or [rss[-1][1]]
    return report(outcomes, warm[0], rss[-1][1], max(m for _, m in rss), time.monotonic() - start)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def report(outcomes: list[Outcome], rss_warm: int, rss_end: int, rss_peak: int, elapsed: float) -> dict:
    by_route = defaultdict(list)
    for o in outcomes:
        by_route[o.route].append(o)
    routes = {}
    for route, os_ in sorted(by_route.items()):
        lat = [o.seconds for o in os_]
        routes[route] = {"requests": len(os_), "statuses": dict(Counter(o.status for o in os_)),
                         "p50_ms": 1000 * pct(lat, 0.5), "p95_ms": 1000 * pct(lat, 0.95), "p99_ms": 1000 * pct(lat, 0.99),
                         "max_ms": 1000 * max(lat)}
    differing = [f"{o.route}: {o.differs}" for o in outcomes if o.differs]
    return {
        "seconds": elapsed, "requests": len(outcomes), "per_second": len(outcomes) / elapsed,
        "statuses": dict(Counter(o.status for o in outcomes)), "5xx": sum(o.status >= 500 for o in outcomes),
        "checked": sum(o.checked for o in outcomes), "differing": len(differing), "first_differing": differing[:5],
        "scores_compared": sum(o.scores for o in outcomes), "scores_same_bits": sum(o.same_bits for o in outcomes),
        "rss_mb_after_warmup": rss_warm / 2**20, "rss_mb_end": rss_end / 2**20, "rss_mb_peak": rss_peak / 2**20,
        "rss_growth_pct": 100 * (rss_end - rss_warm) / rss_warm, "routes": routes,
    }


def print_report(r: dict, args) -> None:
    print(f"soak: {r['seconds']:.0f} s, {args.clients} clients, {r['requests']} requests ({r['per_second']:.1f}/s); "
          f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}")
    print("\n| route | requests | statuses | p50 ms | p95 ms | p99 ms | max ms |\n|---|---|---|---|---|---|---|")
    for route, x in r["routes"].items():
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(x["statuses"].items()))
        print(f"| {route} | {x['requests']} | {statuses} | {x['p50_ms']:.0f} | {x['p95_ms']:.0f} | {x['p99_ms']:.0f} | {x['max_ms']:.0f} |")
    print(f"\n5xx: {r['5xx']}; answers checked against the library: {r['checked']}, differing: {r['differing']}; "
          f"scores within {args.tolerance:g}: {r['scores_compared']}, of them the same bits: {r['scores_same_bits']}")
    print(f"server RSS: {r['rss_mb_after_warmup']:.1f} MB after {args.warmup_s:g} s warm-up, {r['rss_mb_end']:.1f} MB at the end "
          f"({r['rss_growth_pct']:+.2f}%), peak {r['rss_mb_peak']:.1f} MB")
    for line in r["first_differing"]:
        print(f"  differs: {line}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="other arguments are passed to setllm serve")
    p.add_argument("--seconds", type=float, default=600.0, help="how long the load runs")
    p.add_argument("--warmup-s", type=float, default=60.0, help="memory growth is measured from this point on")
    p.add_argument("--clients", type=int, default=4, help="concurrent clients")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the server and of the library here (the same: the same bits)")
    p.add_argument("--tolerance", type=float, default=1e-4, help="largest score difference from the library's accepted")
    p.add_argument("--max-growth", type=float, default=5.0, help="largest RSS growth after the warm-up, in percent")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the report here")
    args, server_flags = p.parse_known_args()
    torch.set_num_threads(args.threads)
    ref = Reference(args.tolerance)
    ref.warm()
    proc, url = start_server(["--threads", str(args.threads), *server_flags])
    try:
        result = asyncio.run(soak(url, proc.pid, ref, args.seconds, args.warmup_s, args.clients, args.seed))
    finally:
        stop_server(proc)
    print_report(result, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "server_flags": server_flags, **result}, f, indent=1)
    failed = result["5xx"] or result["differing"] or result["rss_growth_pct"] > args.max_growth
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
