"""Load test of `setllm serve` on loopback.

Starts the server as a subprocess on a free 127.0.0.1 port with the model flags given
(default: the embedded model + shipped adapter), then for each client count (1, 4, 8, 16)
sends ``--requests`` requests (or stops after ``--max-seconds``): /v1/choose with the
options of one question (``--questions 3``: of three) in random orders, plus ~10% bad
requests (each must get its 4xx, one line). Reports throughput, p50/p95 latency and
statuses; checks that every ordering of a question got the identical answer and scores,
under every load and batch size; and compares throughput at 8 clients with batching vs a
second server with --max-batch-size 1 (target: >= 2x).

Every matrix product of the server's scoring has a shape fixed by each request alone (setllm.core.forward.scoring), so
different questions of any lengths batch together with bit-identical results: with
``--questions 8`` the clients ask eight different questions, and the check that each question
got one answer and one set of scores spans both servers (batched and --max-batch-size 1).

Usage: python benchmarks/bench_serve.py [--clients 1,4,8,16] [--requests 64] [--max-seconds 60]
       [--questions 1] [--json FILE] [any `setllm serve` flags, e.g. --model DIR --adapter none]
Threads: the server uses torch's default; on a CPU busy with other work, OMP_NUM_THREADS=1
in the environment can be much faster (the server inherits it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

QUESTIONS = [  # of different lengths: with --questions 8 no two requests of a batch need be alike
    ("Which city is the capital of France?", ["Budapest", "Paris", "Zurich", "Rome"]),
    ("What do plants need to make food?", ["sunlight", "soil", "rocks", "darkness"]),
    ("Which animal is known for jumping over the lazy dog?", ["the quick brown fox", "a cat", "an owl"]),
    ("What is frozen water called?", ["ice", "steam", "sand"]),
    ("Which planet do we live on?", ["Mars", "Earth", "Venus", "Jupiter"]),
    ("A farmer has a basket of apples and gives half of them away. What does the farmer have left?",
     ["half of the apples", "no apples", "twice as many apples"]),
    ("Which of these is used to write on paper?", ["a pencil", "a spoon", "a shoe", "a cup"]),
    ("How many legs does a spider have?", ["six", "eight", "ten"]),
]
BAD = [  # (path, body or raw bytes, expected status)
    ("/v1/choose", {"question": "Pick one", "options": []}, 422),
    ("/v1/choose", {"question": "Pick one", "options": ["a", "a"]}, 400),
    ("/v1/choose", b'{"question": "Pick one", "options": ["a", ', 400),
    ("/v1/choose", {"question": "Pick one", "options": [f"o{i}" for i in range(100)]}, 400),  # --max-options: a bound of the server, not the schema
    ("/v1/score", {"prompt": "Pick {{a||b", "options": ["a"]}, 400),
]
START_TIMEOUT_S = 180


@dataclass
class Level:
    """One load level's outcome."""

    server: str
    clients: int
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)  # of answered choose requests
    statuses: Counter = field(default_factory=Counter)
    bad_wrong: int = 0  # bad requests that did not get their 4xx
    answers: dict = field(default_factory=dict)  # question -> set of canonical answers

    @property
    def ok(self) -> int:
        return len(self.latencies)

    def row(self) -> str:
        lat = sorted(self.latencies) or [float("nan")]
        p50, p95 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(0.95 * len(lat)))]
        codes = ", ".join(f"{k}: {v}" for k, v in sorted(self.statuses.items()))
        return (f"| {self.server} | {self.clients} | {sum(self.statuses.values())} | {self.ok / self.seconds:.1f} | "
                f"{p50 * 1000:.0f} | {p95 * 1000:.0f} | {codes} | {self.bad_wrong} |")


# -- the server --------------------------------------------------------------------------------
def serve_command(flags: list[str]) -> list[str]:
    from setllm.cli import COMMANDS

    head = ["-m", "setllm", "serve"] if "serve" in COMMANDS else ["-m", "setllm.cli.serve"]
    return [sys.executable, *head, "--port", "0", *flags]


def wait_for_batching_verdict(url: str, deadline: float, key: str | None = None) -> None:
    """The server as it serves once started: on the first start on a machine the batching
    check runs in the background, and until it passes only identical requests share a forward.
    ``key``: the server's ``--api-key`` (without it /health does not say how it batches)."""
    import json
    import urllib.request

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    while time.monotonic() < deadline:
        with urllib.request.urlopen(urllib.request.Request(url + "/health", headers=headers), timeout=10) as r:
            if "until" not in json.load(r)["batching"]:
                return
        time.sleep(0.1)


def start_server(flags: list[str], key: str | None = None) -> tuple[subprocess.Popen, str]:
    """``(process, url)`` once the server listens and batches as it will; ``key``: its ``--api-key``."""
    proc = subprocess.Popen(serve_command(flags), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    deadline, seen = time.monotonic() + START_TIMEOUT_S, []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if "Ctrl-C stops" in line:
            url = re.search(r"listening on (http://[^\s;]+)", "".join(seen)).group(1)  # `--replicas` follows it with a ';'
            wait_for_batching_verdict(url, deadline, key)
            return proc, url
    proc.kill()
    sys.exit("the server did not start:\n" + "".join(seen))


def stop_server(proc: subprocess.Popen) -> float:
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
    return time.monotonic() - start


# -- the clients -------------------------------------------------------------------------------
async def run_level(url: str, server: str, clients: int, requests: int, max_seconds: float, bad_share: float, questions: list,
                    seed: int) -> Level:
    level, rng = Level(server, clients), random.Random(seed)
    plan = [rng.random() < bad_share for _ in range(requests)]
    deadline = time.monotonic() + max_seconds

    async def client(http: httpx.AsyncClient):
        while plan and time.monotonic() < deadline:
            await (send_bad(http, level, rng) if plan.pop() else send_choose(http, level, rng, questions))

    async with httpx.AsyncClient(base_url=url, timeout=max_seconds + 60, limits=httpx.Limits(max_connections=clients)) as http:
        for _ in range(2):  # warm-up, not counted
            await http.post("/v1/choose", json={"question": QUESTIONS[0][0], "options": QUESTIONS[0][1]})
        start = time.monotonic()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        level.seconds = time.monotonic() - start
    return level


async def send_choose(http: httpx.AsyncClient, level: Level, rng: random.Random, questions: list) -> None:
    question, options = rng.choice(questions)
    order = rng.sample(options, len(options))
    start = time.monotonic()
    r = await http.post("/v1/choose", json={"question": question, "options": order})
    level.statuses[r.status_code] += 1
    if r.status_code == 200:
        level.latencies.append(time.monotonic() - start)
        body = r.json()
        canonical = (body["answer"], tuple(sorted(zip(order, body["scores"]))))
        assert body["answer"] == order[body["index"]], body
        level.answers.setdefault(question, set()).add(canonical)


async def send_bad(http: httpx.AsyncClient, level: Level, rng: random.Random) -> None:
    path, body, expected = rng.choice(BAD)
    if isinstance(body, bytes):
        r = await http.post(path, content=body, headers={"content-type": "application/json"})
    else:
        r = await http.post(path, json=body)
    level.statuses[r.status_code] += 1
    one_line = r.headers.get("content-type", "").startswith("application/json") and set(r.json()) == {"error"} and "\n" not in r.json()["error"]
    level.bad_wrong += r.status_code != expected or not one_line


# -- the report ----------------------------------------------------------------------------------
def invariance(levels: list[Level]) -> tuple[bool, int]:
    """Whether every question got one answer and one set of scores across all orderings,
    loads and servers; and how many answers that covers."""
    merged: dict = {}
    for level in levels:
        for q, seen in level.answers.items():
            merged.setdefault(q, set()).update(seen)
    return all(len(s) == 1 for s in merged.values()), sum(lv.ok for lv in levels)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="Any other flags go to `setllm serve`, e.g. --model DIR --adapter none.")
    p.add_argument("--clients", default="1,4,8,16", help="comma-separated concurrent client counts")
    p.add_argument("--requests", type=int, default=64, help="requests per load level")
    p.add_argument("--max-seconds", type=float, default=60.0, help="a load level stops after this long")
    p.add_argument("--bad-share", type=float, default=0.1, help="share of bad requests")
    p.add_argument("--questions", type=int, default=1, choices=range(1, len(QUESTIONS) + 1), help="how many questions the clients ask")
    p.add_argument("--compare-at", type=int, default=8, help="clients for the batching vs --max-batch-size 1 comparison")
    p.add_argument("--json", metavar="FILE", help="also write the raw numbers")
    args, serve_flags = p.parse_known_args()
    counts = [int(c) for c in args.clients.split(",")]

    levels: list[Level] = []
    for name, extra in (("batched", []), ("max-batch-size 1", ["--max-batch-size", "1"])):
        proc, url = start_server([*serve_flags, *extra])
        try:
            for clients in (counts if not extra else [args.compare_at]):
                levels.append(asyncio.run(run_level(url, name, clients, args.requests, args.max_seconds, args.bad_share,
                                                    QUESTIONS[: args.questions], seed=clients)))
                print(f"{name}, {clients} clients: {levels[-1].ok / levels[-1].seconds:.1f} answers/s", file=sys.stderr)
        finally:
            stop_s = stop_server(proc)
    report(levels, args, serve_flags, stop_s)


def report(levels: list[Level], args, serve_flags: list[str], stop_s: float) -> None:
    same, n = invariance(levels)
    at = {lv.server: lv for lv in levels if lv.clients == args.compare_at}
    ratio = (at["batched"].ok / at["batched"].seconds) / (at["max-batch-size 1"].ok / at["max-batch-size 1"].seconds) if len(at) == 2 else float("nan")
    print(f"# setllm serve load test ({platform.machine()}, {os.cpu_count()} CPUs; server flags: {' '.join(serve_flags) or '(defaults: embedded model)'})\n")
    print("| server | clients | requests | answers/s | p50 (ms) | p95 (ms) | statuses | bad requests without their 4xx |")
    print("|---|---|---|---|---|---|---|---|")
    for level in levels:
        print(level.row())
    print(f"\n- every ordering of a question, at every load and batch size, got the identical answer and scores: "
          f"**{'yes' if same else 'NO'}** ({n} answers, {args.questions} question(s))")
    print(f"- throughput at {args.compare_at} clients, batched / --max-batch-size 1: **{ratio:.2f}x** (target >= 2x)")
    print(f"- the second server stopped {stop_s:.1f} s after SIGTERM (limit 10 s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"levels": [{"server": lv.server, "clients": lv.clients, "seconds": lv.seconds, "ok": lv.ok, "statuses": dict(lv.statuses),
                                   "latencies": lv.latencies, "bad_wrong": lv.bad_wrong} for lv in levels],
                       "invariant": same, "ratio": ratio, "stop_s": stop_s}, f, indent=1)
    if not same or any(lv.bad_wrong for lv in levels) or any(code >= 500 for lv in levels for code in lv.statuses):
        sys.exit(1)


if __name__ == "__main__":
    main()
