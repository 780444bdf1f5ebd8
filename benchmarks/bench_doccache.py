"""Documents read once: what the document cache (``setllm.core.doccache``) saves on the embedded
model under ``--variant sbp``, measured side by side in one run.

- **First token**: a question over ``--docs`` cached documents (about 100 tokens each) against
  the same question read afresh: the time to the first generated token, and whether the
  answer, its scores and the answer under every tested order are the same.
- **Server**: ``--questions`` questions over a pool of ``--pool`` documents (``--per`` a
  question, in random order) sent to a real ``setllm serve --variant sbp`` over HTTP by
  ``--clients`` concurrent clients, with ``--cache-mb`` and without: requests per second of
  each, and whether every answer is the cold server's. ``--fill-pool``: each server reads the
  pool once before the stream, untimed (a server over cached documents); ``--in-process``: the
  same stream through the library in batches of ``--clients``, no server (the model's share of
  the time, and the seconds the cached reading spent computing documents).
- **Memory**: the bytes the cache says it holds against the bytes of the tensors it holds.
- **Restart**: a server with ``--cache-dir`` reads the first-token question's documents,
  stops, starts again on the same folder and answers a question over them (another order):
  the time of that first question against a cold server's (``--cache-mb 0``), each after a
  warm-up request over one unrelated document, whether the answers are the same bits, the folder's
  bytes on disk against the server's accounting, and the seconds the restarted server spent
  verifying the files it read (their checksums) as a share of that first question.

    python benchmarks/bench_doccache.py --threads 2 --json doccache.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

WORDS = "river stone garden lamp winter orange violin harbor copper meadow signal ladder candle forest silver".split()


def documents(n: int, seed: int, words: int = 60) -> list[str]:
    """``n`` documents of about 100 tokens (``words`` filler words each), each naming its own key and value."""
    rng = random.Random(seed)
    return [f"Record {i}: the code of {rng.choice(WORDS)}-{i} is {rng.randint(1000, 9999)}. "
            + " ".join(rng.choices(WORDS, k=words)) + "\n" for i in range(n)]


def first_token(lm, docs: list[str], orders: int) -> dict:
    """Time to the first token, cold and cached, and what each reading answered."""
    from setllm import Set

    question = "Question: what is the code of the first record?\nAnswer:"
    prompt = lambda d: ["Documents:\n", Set(d), question]  # noqa: E731
    lm.cache_documents(0)  # off: every reading afresh
    start = time.perf_counter()
    cold = lm.generate(prompt(docs), max_new_tokens=1)
    cold_s = time.perf_counter() - start
    cold_scores = [s.logprob for s in lm.score(prompt(docs), ["1", "2"])]
    store = lm.cache_documents(max_mb=1024)
    lm.generate(prompt(docs), max_new_tokens=1)  # reads and keeps the documents
    shuffled = random.Random(1).sample(docs, len(docs))
    start = time.perf_counter()
    warm = lm.generate(prompt(shuffled), max_new_tokens=1)
    warm_s = time.perf_counter() - start
    warm_scores = [s.logprob for s in lm.score(prompt(shuffled), ["1", "2"])]
    answers = {lm.generate(prompt(random.Random(k).sample(docs, len(docs))), max_new_tokens=8) for k in range(orders)}
    tokens = len(lm.encode(prompt(docs)))
    return {"documents": len(docs), "tokens": tokens, "cold_s": cold_s, "cached_s": warm_s, "speedup": cold_s / warm_s,
            "same_first_token": cold == warm, "same_score_bits": cold_scores == warm_scores,
            "max_score_diff": max(abs(a - b) for a, b in zip(cold_scores, warm_scores)),
            "answers_over_orders": len(answers), "orders": orders, **memory(store)}


def memory(store) -> dict:
    """The cache's own count of its bytes against the bytes of the tensors it holds."""
    held = sum(t.untyped_storage().nbytes() for layers, _ in store._pieces.values() for k, v in layers for t in (k, v))
    return {"cache_bytes_counted": store.stats().bytes, "cache_bytes_held": held, "counted_over_held": store.stats().bytes / held}


@contextlib.contextmanager
def server(args, flags: list[str]):
    """A real ``setllm serve --variant sbp`` with ``flags``, and an HTTP client for it."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "setllm", "serve", "--port", str(port), "--variant", "sbp", "--adapter", "none",
           "--threads", str(args.threads), "--no-batch-check", *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait(url)
        with httpx.Client(base_url=url, timeout=600) as client:
            yield client
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def counts(client) -> dict:
    return {line.split()[0]: float(line.split()[1]) for line in client.get("/metrics").text.splitlines()
            if line.startswith("setllm_document_cache")}


def serve(args, cache_mb: float, bodies: list[dict], before: list[dict] = ()) -> dict:
    """Requests per second of a real ``setllm serve`` over ``bodies``, and its answers
    (``before``: requests sent first, untimed: the pool read beforehand)."""
    with server(args, ["--cache-mb", str(cache_mb)]) as client:
        client.post("/v1/score", json=bodies[0])  # warm-up: first-call costs are not the cache's
        for body in before:
            client.post("/v1/score", json=body)
        start = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            answers = list(pool.map(lambda b: client.post("/v1/score", json=b).json()["scores"], bodies))
        seconds = time.perf_counter() - start
        metrics = counts(client)
    return {"cache_mb": cache_mb, "requests": len(bodies), "seconds": seconds, "requests_per_s": len(bodies) / seconds,
            "answers": answers, "metrics": metrics}


# A first request over one unrelated document: a fresh server's first-call costs (the first packed
# forward included) are paid before the timed question, by the cold and the restarted server alike.
WARM_UP = {"prompt": ["Notes:\n", {"set": ["Two and two make four.\n"]}, "Question: what is two and two?\nAnswer:"], "options": ["4", "5"]}


def first_question(args, flags: list[str], body: dict) -> tuple[float, list, dict]:
    """Seconds to answer ``body`` on a fresh server with ``flags`` (after a warm-up over
    another document), the answer, and the cache's counts after it."""
    with server(args, flags) as client:
        client.post("/v1/score", json=WARM_UP)
        start = time.perf_counter()
        answer = client.post("/v1/score", json=body).json()["scores"]
        return time.perf_counter() - start, answer, counts(client)


def restart(args, docs: list[str], lm=None) -> dict:
    """A restarted server's first question over documents it read before, against a cold one
    (``lm``: and, in this process, where such a question's time goes)."""
    question = "Question: what is the code of the first record?\nAnswer:"
    body = lambda d: {"prompt": ["Documents:\n", {"set": d}, question], "options": ["1", "2", "3"]}  # noqa: E731
    shuffled = random.Random(2).sample(docs, len(docs))
    with tempfile.TemporaryDirectory() as folder:
        cold_s, cold, _ = first_question(args, ["--cache-mb", "0"], body(shuffled))
        first_s, _, written = first_question(args, ["--cache-dir", folder], body(docs))
        warm_s, warm, found = first_question(args, ["--cache-dir", folder], body(shuffled))
        on_disk = sum(p.stat().st_size for p in Path(folder).glob("*.safetensors"))
        where = restarted_in_process(lm, folder, ["Documents:\n", shuffled, question]) if lm is not None else None
    return {"documents": len(docs), "cold_s": cold_s, "first_read_with_disk_s": first_s, "restarted_s": warm_s, "in_process": where,
            "speedup": cold_s / warm_s, "same_bits": cold == warm, "disk_writes": written.get("setllm_document_cache_disk_writes"),
            "restarted_disk_hits": found.get("setllm_document_cache_disk_hits"),
            "restarted_misses": found.get("setllm_document_cache_misses"), "disk_bytes_on_disk": on_disk,
            "restarted_check_s": found.get("setllm_document_cache_disk_check_seconds"),
            "check_share_of_restarted": found.get("setllm_document_cache_disk_check_seconds", 0) / warm_s,
            "disk_bytes_counted": found.get("setllm_document_cache_disk_bytes"),
            "counted_over_on_disk": found.get("setllm_document_cache_disk_bytes", 0) / on_disk if on_disk else None}


def restarted_in_process(lm, folder: str, parts: list) -> dict:
    """A fresh memory cache over ``folder`` (as a restarted process has), in this process: the
    first question over its documents (every piece read from disk and checked), the same
    question again (every piece in memory: the question's forward alone), and the check's seconds."""
    from setllm import Set

    request = lm.score_request([parts[0], Set(parts[1]), parts[2]], ["1", "2", "3"])
    w = WARM_UP["prompt"]
    lm.score([w[0], Set(w[1]["set"]), w[2]], WARM_UP["options"])  # this process's first-call costs, as the servers' warm-up
    store = lm.cache_documents(512, directory=folder)
    start = time.perf_counter()
    lm.score_encoded([request])
    first = time.perf_counter() - start
    start = time.perf_counter()
    lm.score_encoded([request])
    again = time.perf_counter() - start
    s = store.stats()
    lm.cache_documents(0)
    return {"first_s": first, "in_memory_s": again, "files_s": first - again, "check_s": s.disk_check_s, "disk_hits": s.disk_hits,
            "misses": s.misses}


def in_process(lm, bodies: list[dict], batch: int, cache_mb: float, before: list[dict] = ()) -> dict:
    """The server's stream without the server: ``bodies`` scored in batches of ``batch`` (as
    ``--clients`` concurrent clients fill the server's batches) by the library, the cache off
    and on (``before`` read first, untimed): what the model's work alone gives, and where the
    cached reading's seconds go (the documents computed, the questions)."""
    from setllm import Set

    def requests(bs):
        return [lm.score_request([b["prompt"][0], Set(b["prompt"][1]["set"]), b["prompt"][2]], b["options"]) for b in bs]

    out = {}
    for mb in (0, cache_mb):
        store = lm.cache_documents(mb)
        if store is not None:
            store.clear()
            lm.score_encoded(requests(before))
            computed = store.stats().computed_s
        start = time.perf_counter()
        for i in range(0, len(bodies), batch):
            lm.score_encoded(requests(bodies[i : i + batch]))
        seconds = time.perf_counter() - start
        out["cold" if mb == 0 else "cached"] = {"seconds": seconds, "requests_per_s": len(bodies) / seconds}
        if store is not None:
            out["cached"]["documents_computed_s"] = store.stats().computed_s - computed
    out["throughput_ratio"] = out["cached"]["requests_per_s"] / out["cold"]["requests_per_s"]
    return out


def _wait(url: str, timeout: float = 300) -> None:
    import httpx

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"setllm serve did not answer at {url} within {timeout} s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=20, help="documents behind the first-token question (default 20: about 2k tokens)")
    p.add_argument("--orders", type=int, default=6, help="orders of those documents whose answers are compared")
    p.add_argument("--questions", type=int, default=100, help="questions sent to the server")
    p.add_argument("--pool", type=int, default=50, help="documents the server's questions draw from")
    p.add_argument("--per", type=int, default=5, help="documents per server question")
    p.add_argument("--clients", type=int, default=4, help="concurrent HTTP clients")
    p.add_argument("--cache-mb", type=float, default=512, help="the cached server's --cache-mb")
    p.add_argument("--threads", type=int, default=2, help="torch threads, here and in each server")
    p.add_argument("--skip-server", action="store_true", help="the first-token part only")
    p.add_argument("--skip-restart", action="store_true", help="no restart part")
    p.add_argument("--skip-first-token", action="store_true", help="no first-token part")
    p.add_argument("--skip-throughput", action="store_true", help="no server throughput part")
    p.add_argument("--fill-pool", action="store_true", help="each server reads the pool's documents before the stream, untimed")
    p.add_argument("--in-process", action="store_true", help="also the stream through the library, no server (the model's share)")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args()
    import torch

    from setllm import SetLLM

    torch.set_num_threads(args.threads)
    lm = SetLLM.from_pretrained(variant="sbp", adapter=None)
    result = {}
    if not args.skip_first_token:
        result["first_token"] = first_token(lm, documents(args.docs, 0), args.orders)
        print(json.dumps(result["first_token"], indent=1), flush=True)
    if not args.skip_server and not args.skip_restart:
        result["restart"] = restart(args, documents(args.docs, 0), lm)
        print(json.dumps(result["restart"], indent=1), flush=True)
    if not args.skip_server and not args.skip_throughput:
        pool, rng = documents(args.pool, 7), random.Random(3)
        bodies = [{"prompt": ["Documents:\n", {"set": rng.sample(pool, args.per)}, f"Question: what is the code of record {q}?\nAnswer:"],
                   "options": ["1", "2", "3"]} for q in range(args.questions)]
        # --fill-pool: "a server over cached documents": every pool document read once before the stream, untimed
        before = [{"prompt": ["Documents:\n", {"set": pool[i : i + args.per]}, "Question: what is the code?\nAnswer:"], "options": ["1"]}
                  for i in range(0, len(pool), args.per)] if args.fill_pool else []
        if args.in_process:
            result["in_process"] = in_process(lm, bodies, args.clients, args.cache_mb, before)
            print(json.dumps(result["in_process"], indent=1), flush=True)
        cold, warm = serve(args, 0, bodies, before), serve(args, args.cache_mb, bodies, before)
        same = cold["answers"] == warm["answers"]  # the same bits
        diff = max(abs(a - b) for c, w in zip(cold["answers"], warm["answers"]) for a, b in zip(c, w))
        result["server"] = {"cold_requests_per_s": cold["requests_per_s"], "cached_requests_per_s": warm["requests_per_s"],
                            "throughput_ratio": warm["requests_per_s"] / cold["requests_per_s"], "same_bits": same,
                            "max_score_diff": diff, "cached_metrics": warm["metrics"], "questions": args.questions,
                            "pool": args.pool, "per_question": args.per, "clients": args.clients, "pool_read_before": args.fill_pool,
                            "cold_seconds": cold["seconds"], "cached_seconds": warm["seconds"]}
        print(json.dumps(result["server"], indent=1), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
