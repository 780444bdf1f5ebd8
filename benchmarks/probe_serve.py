"""Hostile clients against one `setllm serve`: does a careless or hostile client slow down,
break or change the answer of anyone else?

It starts the server (the embedded model and its shipped adapters, under ``--api-key`` and
``--allowed-hosts`` so both checks apply) on a free loopback port and measures a *victim*
(a /v1/choose and a 1-token /v1/completions) quiet, then while one client keeps sending each
hostile probe of :data:`PROBES`: the victim's latency against its quiet latency (goal at most
2x), the probe's statuses (goal: its 4xx, never a 5xx) and whether the victim's answer
changed. It reads the resident memory of the server's process tree before and after all the
probes (goal at most +10%).

``--soak-seconds S`` instead runs a soak: ``--clients`` clients send soak_serve.py's
answer-checked mix plus a streamed chat completion, and a ``--hostile-fraction`` of their
requests are probes; it reports 5xx and changed answers (goal 0 and 0). Other arguments pass
to `setllm serve` (``--replicas 2`` soaks a fleet).

    python benchmarks/probe_serve.py                                           # the probes
    python benchmarks/probe_serve.py --soak-seconds 90 --hostile-fraction 0.1  # the hostile soak
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx
import psutil
from bench_serve import start_server, stop_server

KEY = "probe-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
SERVER_FLAGS = ["--api-key", KEY, "--allowed-hosts", "localhost,127.0.0.1"]  # a key does not imply the Host check: ask for both
CHOOSE = {"question": "Which city is the capital of France?", "options": ["Budapest", "Paris", "Zurich", "Rome"]}
COMPLETE = {"model": "setllm", "prompt": "Pick the fruit:\n{{car\n||apple\n||house\n}}Answer:", "max_tokens": 1, "temperature": 0}
CHAT = {"model": "setllm", "messages": [{"role": "user", "content": "Pick the fruit: car, apple or house?"}], "max_tokens": 8, "temperature": 0}
VICTIMS = {"choose": ("/v1/choose", CHOOSE), "completions": ("/v1/completions", COMPLETE)}
QUIET_RUNS = 5  # victim requests measured quiet, each kind
DURING_RUNS = 3  # victim requests measured during each probe, each kind
SLOW_SOCKETS = 40  # half-sent requests held open at once
HUGE_BYTES = 10 * 2**20  # a chunked body ten times the server's bound
CHUNK = 64 * 1024


# -- the probes: url -> what the server answered (a status, or what it did to the connection) ---
async def raw(url: str, head: str, body: bytes = b"") -> str:
    """One request written as bytes; the status the server answers with."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head.encode("latin-1") + body)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 30)
        return line.split()[1].decode() if line else "closed"
    finally:
        writer.close()


def post(path: str, body, headers: dict | None = None) -> Callable[[str], Awaitable[str]]:
    """A probe that is one POST (``body``: JSON, or bytes as they are)."""
    async def send(url: str) -> str:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            r = await client.post(path, content=content, headers={"content-type": "application/json", **AUTH, **(headers or {})})
        return str(r.status_code)
    return send


async def stream_and_leave(url: str) -> str:
    """A 400-token stream whose client closes its socket after the first piece."""
    body = {**COMPLETE, "max_tokens": 400, "stream": True}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client, client.stream("POST", "/v1/completions", json=body, headers=AUTH) as r:
        async for _ in r.aiter_raw():
            break
        return f"{r.status_code}, left"


async def huge_chunked(url: str) -> str:
    """A chunked body of :data:`HUGE_BYTES`, written until the server answers (read meanwhile:
    a server that closes with the body unread resets the connection, and the reset can drop an
    answer not read yet)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = f"POST /v1/choose HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    answer = asyncio.ensure_future(reader.readline())
    try:
        writer.write(head.encode())
        for _ in range(HUGE_BYTES // CHUNK):
            if answer.done():
                break
            writer.write(f"{CHUNK:x}\r\n".encode() + b" " * CHUNK + b"\r\n")
            await writer.drain()
        else:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except OSError:  # the server stopped reading: its answer came first, or never
        pass
    try:
        line = await asyncio.wait_for(answer, 30)
    except OSError:
        return "reset before an answer"
    finally:
        writer.close()
    return line.split()[1].decode() if line else "closed"


async def slowloris(url: str) -> str:
    """:data:`SLOW_SOCKETS` requests that send half a head and wait: how the server ends them."""
    host, port = url.removeprefix("http://").split(":")
    start = time.monotonic()

    async def one() -> float:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"POST /v1/choose HTTP/1.1\r\nHost: {host}\r\nX-Slow: a".encode())
        await writer.drain()
        try:
            await asyncio.wait_for(reader.read(), 30)  # b"" once the server closes it
            return time.monotonic() - start
        except asyncio.TimeoutError:
            return float("inf")
        finally:
            writer.close()

    ended = await asyncio.gather(*(one() for _ in range(SLOW_SOCKETS)))
    closed = [t for t in ended if t != float("inf")]
    return f"{len(closed)}/{SLOW_SOCKETS} closed by {max(closed, default=0):.1f} s"


@dataclass
class Probe:
    name: str
    send: Callable[[str], Awaitable[str]]
    expect: str  # what a server that holds answers


SET_1500 = "Pick one:\n{{" + "||".join(f"e{i}\n" for i in range(1500)) + "}}Answer:"
UNKNOWN = {**COMPLETE, **{f"field{i}": i for i in range(200)}, "☃": 1, "a\r\nb": 2}
PROBES = [
    Probe("100 prompts in one /v1/completions", post("/v1/completions", {**COMPLETE, "prompt": ["x"] * 100}), "400"),
    Probe("a stream whose client leaves after its first piece", stream_and_leave, "200, left"),
    Probe("a stop string of 100,000 characters", post("/v1/completions", {**COMPLETE, "stop": ["a" * 100_000]}), "422"),
    Probe("200 unknown fields, one named ☃, one with \\r\\n", post("/v1/completions", UNKNOWN), "400"),
    Probe("a 10 MB chunked body", huge_chunked, "413"),
    Probe(f"{SLOW_SOCKETS} half-sent request heads", slowloris, f"{SLOW_SOCKETS}/{SLOW_SOCKETS} closed"),
    Probe("a wrong Authorization header", post("/v1/choose", CHOOSE, {"Authorization": "Bearer wrong"}), "401"),
    Probe("a Host that is not loopback", post("/v1/choose", CHOOSE, {"Host": "evil.example"}), "400"),
    Probe("a set prompt of 1,500 elements", post("/v1/score", {"prompt": SET_1500, "options": [" e1"]}), "400"),
    Probe("invalid JSON", post("/v1/choose", b'{"question": "Q?", "options": ["a", '), "400"),
]


def held(probe: Probe, got: str) -> bool:
    return got.startswith(probe.expect)


# -- the victim --------------------------------------------------------------------------------
async def victim(client: httpx.AsyncClient, kind: str) -> tuple[float, str]:
    """(seconds, the answer as text) of one victim request."""
    path, body = VICTIMS[kind]
    start = time.perf_counter()
    r = await client.post(path, json=body, headers=AUTH)
    took = time.perf_counter() - start
    data = r.json()
    return took, json.dumps(data.get("answer") if kind == "choose" else data["choices"][0]["text"])


async def victims(client: httpx.AsyncClient, runs: int) -> dict[str, tuple[float, set[str]]]:
    """Each victim kind ``runs`` times in turn: (median seconds, the answers seen)."""
    out = {}
    for kind in VICTIMS:
        seen = [await victim(client, kind) for _ in range(runs)]
        out[kind] = (statistics.median(t for t, _ in seen), {a for _, a in seen})
    return out


@dataclass
class ProbeRun:
    probe: Probe
    statuses: Counter = field(default_factory=Counter)
    victims: dict = field(default_factory=dict)


async def under_probe(client: httpx.AsyncClient, url: str, probe: Probe) -> ProbeRun:
    """The victims measured while one client sends ``probe`` again and again."""
    run, done = ProbeRun(probe), asyncio.Event()

    async def keep_sending():
        while not done.is_set():
            try:
                run.statuses[await probe.send(url)] += 1
            except (httpx.HTTPError, OSError) as e:
                run.statuses[type(e).__name__] += 1

    sender = asyncio.ensure_future(keep_sending())
    await asyncio.sleep(0.2)  # the probe is under way
    run.victims = await victims(client, DURING_RUNS)
    done.set()
    await sender
    return run


RSS_EVERY_S = 30.0  # the soak's RSS samples


def tree_rss(pid: int) -> int:
    """Resident bytes of the server and every process it started (a fleet's Ray workers)."""
    proc = psutil.Process(pid)
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


async def probe_all(url: str, pid: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        await victims(client, 2)  # warm: the first requests build what later ones reuse
        quiet = await victims(client, QUIET_RUNS)
        rss_before = tree_rss(pid)
        runs = [await under_probe(client, url, p) for p in PROBES]
        rss_after = tree_rss(pid)
    print(f"quiet victim: {', '.join(f'{k} {1000 * t:.0f} ms' for k, (t, _) in quiet.items())} (median of {QUIET_RUNS})")
    print("\n| probe | statuses (count) | expected | choose victim x quiet | completions victim x quiet | victim answers changed |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        statuses = ", ".join(f"{s}: {n}" for s, n in sorted(run.statuses.items()))
        ratios = [f"{run.victims[k][0] / quiet[k][0]:.2f}" for k in VICTIMS]
        changed = sum(run.victims[k][1] != quiet[k][1] for k in VICTIMS)
        ok = "" if all(held(run.probe, s) for s in run.statuses) else " **(not held)**"
        print(f"| {run.probe.name} | {statuses}{ok} | {run.probe.expect} | {ratios[0]} | {ratios[1]} | {changed} |")
    worst = max(run.victims[k][0] / quiet[k][0] for run in runs for k in VICTIMS)
    fivexx = sum(n for run in runs for s, n in run.statuses.items() if s[:1] == "5")
    print(f"\nworst victim latency: {worst:.2f}x quiet (goal <= 2x); 5xx: {fivexx}")
    print(f"server RSS (process tree): {rss_before / 2**20:.1f} MB before the probes, {rss_after / 2**20:.1f} MB after "
          f"({100 * (rss_after - rss_before) / rss_before:+.2f}%, goal <= +10%)")


# -- the hostile soak ---------------------------------------------------------------------------
async def streamed_chat(client: httpx.AsyncClient) -> str:
    """A streamed chat completion's text, joined."""
    text = []
    async with client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}, headers=AUTH) as r:
        if r.status_code != 200:
            return f"status {r.status_code}"
        async for line in r.aiter_lines():
            if line.startswith("data: {"):
                choices = json.loads(line[6:]).get("choices") or [{}]
                text.append(choices[0].get("delta", {}).get("content") or "")
    return "".join(text)


async def hostile_soak(url: str, pid: int, seconds: float, clients: int, fraction: float, seed: int) -> None:
    from soak_serve import Outcome, Reference, one_request

    ref = Reference(1e-4)
    ref.warm()
    async with httpx.AsyncClient(base_url=url, timeout=120, headers=AUTH) as client:
        r = await client.post("/v1/chat/completions", json=CHAT)
        chat_want = r.json()["choices"][0]["message"]["content"]
    outcomes: list[Outcome] = []
    probes: Counter = Counter()
    missed: list[str] = []
    rss_start, deadline = tree_rss(pid), time.monotonic() + seconds
    rss_seen = [rss_start]  # every RSS_EVERY_S: growth that levels off is start-up, growth that goes on a leak

    async def sample_rss():
        while time.monotonic() + RSS_EVERY_S < deadline:
            await asyncio.sleep(RSS_EVERY_S)
            rss_seen.append(tree_rss(pid))

    async def one(client: httpx.AsyncClient, rng: random.Random) -> None:
        if rng.random() < fraction:
            probe = rng.choice(PROBES)
            got = await probe.send(url)
            probes[(probe.name, got)] += 1
            if not held(probe, got):
                missed.append(f"{probe.name}: {got}")
        elif rng.random() < 0.1:
            start = time.perf_counter()
            text = await streamed_chat(client)
            outcomes.append(Outcome("stream /v1/chat/completions", 200 if not text.startswith("status ") else int(text[7:]),
                                    time.perf_counter() - start, checked=True,
                                    differs=None if text == chat_want else f"streamed {text!r}, not streamed {chat_want!r}"))
        else:
            outcomes.append(await one_request(client, ref, rng))

    async def client_loop(k: int):
        rng = random.Random(seed * 1000 + k)
        async with httpx.AsyncClient(base_url=url, timeout=120, headers=AUTH) as client:
            while time.monotonic() < deadline:
                try:
                    await one(client, rng)
                except (httpx.HTTPError, OSError) as e:
                    outcomes.append(Outcome("transport", 599, 0.0, differs=f"{type(e).__name__}: {e}"))

    await asyncio.gather(sample_rss(), *(client_loop(k) for k in range(clients)))
    rss_end = tree_rss(pid)
    statuses = Counter(o.status for o in outcomes)
    fivexx = sum(n for s, n in statuses.items() if s >= 500) + sum(n for (_, s), n in probes.items() if s[:1] == "5")
    changed = [f"{o.route}: {o.differs}" for o in outcomes if o.differs]
    print(f"hostile soak: {seconds:g} s, {clients} clients, {len(outcomes)} normal requests ({dict(sorted(statuses.items()))}), "
          f"{sum(probes.values())} probes ({100 * sum(probes.values()) / max(1, len(outcomes) + sum(probes.values())):.1f}%)")
    for (name, got), n in sorted(probes.items()):
        print(f"  probe {name}: {got} x{n}")
    print(f"5xx: {fivexx}; answers checked: {sum(o.checked for o in outcomes)}, changed: {len(changed)}; probes not held: {len(missed)}")
    print(f"server RSS (process tree): {rss_start / 2**20:.1f} MB at the start, {rss_end / 2**20:.1f} MB at the end "
          f"({100 * (rss_end - rss_start) / rss_start:+.2f}%)")
    print(f"server RSS every {RSS_EVERY_S:g} s (MB): {', '.join(f'{r / 2**20:.0f}' for r in [*rss_seen, rss_end])}")
    for line in (changed + missed)[:5]:
        print(f"  {line}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="other arguments are passed to setllm serve")
    p.add_argument("--soak-seconds", type=float, help="run the hostile soak this long instead of the probes")
    p.add_argument("--hostile-fraction", type=float, default=0.1, help="share of the soak's requests that are probes")
    p.add_argument("--clients", type=int, default=4, help="the soak's concurrent clients")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the server (and of the soak's library here)")
    p.add_argument("--seed", type=int, default=0)
    args, server_flags = p.parse_known_args()
    import torch

    torch.set_num_threads(args.threads)
    print(f"{platform.machine()}, {os.cpu_count()} CPUs; setllm serve {' '.join([*SERVER_FLAGS, *server_flags])}")
    proc, url = start_server(["--threads", str(args.threads), *SERVER_FLAGS, *server_flags], key=KEY)
    try:
        if args.soak_seconds:
            asyncio.run(hostile_soak(url, proc.pid, args.soak_seconds, args.clients, args.hostile_fraction, args.seed))
        else:
            asyncio.run(probe_all(url, proc.pid))
    finally:
        stop_server(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
