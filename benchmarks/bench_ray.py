"""Replicas on Ray Serve: where each request is computed decides how often its documents are
already cached. One stream of questions over a pool of documents (each question's documents
in a random order, each set of documents asked about several times) goes to one
``setllm serve --variant sbp --cache-mb`` and to ``--replicas 2`` under each router:
``documents`` (setllm's: to the replica holding the most of them, in any order),
``power-of-two`` (Ray's default, by load) and ``first-document`` (by the first document only,
as a prefix router sends it). For each: the document cache's hit rate over the stream (every
replica's hits and misses together), the router's decisions, the answers against one
server's (bit for bit), and the time from start to ``/health``.

    python benchmarks/bench_ray.py --threads 1 --json ray.json
"""

from __future__ import annotations

import argparse
import random
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from bench_doccache import documents
from report_io import emit

ROUTERS = ("documents", "power-of-two", "first-document")


def stream(args) -> list[dict]:
    """``--questions`` score requests: ``questions / asks`` sets of ``--per`` documents from
    the pool, each asked ``--asks`` times, in a random order each time, the stream shuffled."""
    pool, rng = documents(args.pool, 7), random.Random(3)
    sets = [rng.sample(pool, args.per) for _ in range(args.questions // args.asks)]
    asks = [(s, rng.sample(s, len(s))) for s in sets for _ in range(args.asks)]
    rng.shuffle(asks)
    return [{"prompt": ["Documents:\n", {"set": order}, f"Question: what is the code of record {q}?\nAnswer:"], "options": ["1", "2", "3"]}
            for q, (_, order) in enumerate(asks)]


def run(args, bodies: list[dict], extra: list[str]) -> dict:
    """One server (``extra``: its own flags) over ``bodies``: its start-up time, answers and counts."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "setllm", "serve", "--port", str(port), "--variant", "sbp", "--adapter", "none",
           "--threads", str(args.threads), "--no-batch-check", "--cache-mb", str(args.cache_mb), *extra]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait(url, proc)
        start_s = time.perf_counter() - start
        with httpx.Client(base_url=url, timeout=600) as client:
            begin = time.perf_counter()
            with ThreadPoolExecutor(args.clients) as pool:
                answers = list(pool.map(lambda b: client.post("/v1/score", json=b).json()["scores"], bodies))
            seconds = time.perf_counter() - begin
            metrics = client.get("/metrics").text
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    hits, misses = total(metrics, "setllm_document_cache_hits"), total(metrics, "setllm_document_cache_misses")
    return {"start_to_health_s": round(start_s, 1), "seconds": round(seconds, 1), "hits": hits, "misses": misses,
            "hit_rate": round(hits / (hits + misses), 4), "decisions": labelled(metrics, "setllm_router_decisions_total"),
            "requests_per_replica": sorted(labelled(metrics, "setllm_replica_requests_total").values(), reverse=True), "answers": answers}


def labelled(metrics: str, name: str) -> dict[str, int]:
    """``name``'s value by its one label's value."""
    return {line.split('"')[1]: int(float(line.split()[-1])) for line in metrics.splitlines() if line.startswith(name + "{")}


def total(metrics: str, name: str) -> int:
    """``name`` summed over its label sets (one server has none, replicas one each)."""
    return int(sum(float(line.split()[-1]) for line in metrics.splitlines() if line.split("{")[0].split(" ")[0] == name))


def _wait(url: str, proc: subprocess.Popen, timeout: float = 600) -> None:
    import httpx

    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"setllm serve did not answer at {url} within {timeout} s (exit code {proc.poll()})")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=100, help="questions in the stream")
    p.add_argument("--pool", type=int, default=50, help="documents the questions draw from")
    p.add_argument("--per", type=int, default=5, help="documents per question")
    p.add_argument("--asks", type=int, default=5, help="times each set of documents is asked about (in a new order each time)")
    p.add_argument("--clients", type=int, default=4, help="concurrent HTTP clients")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--cache-mb", type=float, default=512, help="each server's --cache-mb")
    p.add_argument("--threads", type=int, default=1, help="torch threads of each server and replica")
    p.add_argument("--routers", default=",".join(ROUTERS), help="comma-separated routers to measure")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args()
    bodies = stream(args)
    one = run(args, bodies, [])
    result = {"questions": len(bodies), "pool": args.pool, "per_question": args.per, "asks_per_set": args.asks, "clients": args.clients,
              "one_server": {k: v for k, v in one.items() if k != "answers"}}
    print(f"one server: hit rate {one['hit_rate']:.3f}, {one['seconds']} s for the stream, {one['start_to_health_s']} s to /health", flush=True)
    for router in args.routers.split(","):
        got = run(args, bodies, ["--replicas", str(args.replicas), "--router", router])
        differ = sum(a != b for a, b in zip(got.pop("answers"), one["answers"]))
        got |= {"of_one_server": round(got["hit_rate"] / one["hit_rate"], 4), "misses_over_one_server": round(got["misses"] / one["misses"], 2),
                "answers_differing": differ,
                "start_vs_one_server": round(got["start_to_health_s"] / one["start_to_health_s"], 2)}
        result[f"replicas_{router}"] = got
        print(f"{args.replicas} replicas, router {router}: hit rate {got['hit_rate']:.3f} ({got['of_one_server']:.0%} of one server's, "
              f"{got['misses_over_one_server']}x its misses), requests per replica {got['requests_per_replica']}, {differ} answers differ, "
              f"{got['seconds']} s for the stream, {got['start_to_health_s']} s to /health", flush=True)
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
