"""A fleet of replicas (`setllm serve --replicas`) as a team runs it: how fast it starts against
one server, how fast a replica that replaces a dead one answers over documents another replica
read (the shared `--cache-dir`), what a replica SIGKILLed in the middle of a stream costs, how
autoscaling follows a ramp of clients, and how each stop ends.

    python benchmarks/bench_ray_fleet.py --threads 1 --json fleet.json
    python benchmarks/bench_ray_fleet.py --parts start,warm --threads 1

Parts (``--parts``): ``start`` (one server and ``--replicas 2`` to ``/health``, alternately,
``--rounds`` times), ``warm`` (a question over ``--docs`` new documents, cold; both replicas
SIGKILLed; the first question of a replacement over those documents, from the folder),
``kill`` (``--questions`` requests from ``--clients`` clients, a replica SIGKILLed a third of
the way: failed requests and answers unlike one server's), ``ramp`` (1 to 3 replicas under 1,
then ``--peak`` clients, then 1 again: failures, when replicas come and go, the hit rate),
``stop`` (an idle fleet's SIGTERM to its group; eight open requests and SIGTERM to the group,
then a double SIGINT: how each request ended, how long, what was left running), ``faults``
(eight requests open, the ingress, Ray's raylet or its GCS SIGKILLed: how those requests and the
next one end, how long a SIGTERM then takes, what was left running).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
from bench_doccache import documents
from bench_ray import labelled, stream, total
from report_io import emit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fleet tests' process helpers
from process_tree import ENGINE, engines, kill, processes  # noqa: E402

PARTS = ("start", "warm", "kill", "ramp", "stop", "faults")


@contextmanager
def server(args, *extra: str):
    """``(process, url, seconds to /health)``: `setllm serve` (the embedded model under sbp) with
    ``extra`` flags; it and everything it started are killed after."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "setllm", "serve", "--port", str(port), "--variant", "sbp", "--adapter", "none", "--threads", str(args.threads),
           "--no-batch-check", "--cache-mb", "512", *extra]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        health(url, proc, cpu := {})
        yield proc, url, time.perf_counter() - start, cpu
    finally:
        left = processes(proc)
        kill(left)
        proc.wait()
        psutil.wait_procs(left, timeout=10)


@contextmanager
def _gone():
    try:
        yield
    except psutil.NoSuchProcess:
        pass


def health(url: str, proc: subprocess.Popen, cpu: dict, timeout: float = 600) -> None:
    """Until ``/health`` answers; ``cpu`` gets the CPU seconds each process of the server spent by then."""
    def sample() -> None:  # CPU seconds so far of each process alive now (one that ended keeps its last count)
        for p in processes(proc):
            with _gone():
                times = p.cpu_times()
                cpu[p.pid] = (kind(p), times.user + times.system)

    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        sample()
        try:
            if httpx.get(f"{url}/health", timeout=30).status_code == 200:
                return sample()
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"setllm serve did not answer at {url} within {timeout} s: {proc.stderr.read() if proc.poll() is not None else ''}")


def kind(p) -> str:
    """Which part of a fleet a process is."""
    line = " ".join(p.cmdline())
    for name, mark in (("engine replicas", ENGINE), ("ingress", "setllm-ingress"), ("Serve's controller and proxy", "ServeController"),
                       ("Serve's controller and proxy", "ProxyActor"), ("setllm serve", "-m setllm serve")):
        if mark in line:
            return name
    return "Ray's own processes"




def ask(url: str, body: dict, path: str = "/v1/score", timeout: float = 600) -> tuple[object, float, str]:
    """``(status or "no answer", seconds, replica)``."""
    start = time.perf_counter()
    try:
        r = httpx.post(url + path, json=body, timeout=timeout)
        return r.status_code, time.perf_counter() - start, r.headers.get("x-setllm-replica", "")
    except httpx.HTTPError:
        return "no answer", time.perf_counter() - start, ""


def part_start(args) -> dict:
    one, fleet, one_cpu, cpu = [], [], [], {}
    for _ in range(args.rounds):
        with server(args) as (_, _, s, used):
            one.append(round(s, 1))
            one_cpu.append(sum(c for _, c in used.values()))
        with server(args, "--replicas", "2") as (_, _, s, used):
            fleet.append(round(s, 1))
            for name, c in used.values():
                cpu[name] = cpu.get(name, 0.0) + c / args.rounds
    ratio = statistics.median(f / o for f, o in zip(fleet, one))
    cpu = {k: round(v, 1) for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])}
    print(f"start to /health: one server {one} s, 2 replicas {fleet} s; median ratio {ratio:.2f}x; CPU seconds to /health: one server "
          f"{sum(one_cpu) / len(one_cpu):.1f}, 2 replicas {sum(cpu.values()):.1f} ({cpu})", flush=True)
    return {"one_server_s": one, "replicas_2_s": fleet, "median_ratio": round(ratio, 2), "one_server_cpu_s": round(sum(one_cpu) / len(one_cpu), 1),
            "replicas_2_cpu_s": cpu}


def ready(url: str, n: int, old: set[str], timeout: float = 600) -> None:
    """Until ``n`` replicas not in ``old`` have answered ``/health`` (by load: any replica that is up)."""
    seen, end = set(), time.monotonic() + timeout
    while len(seen - old) < n:
        if time.monotonic() > end:
            raise RuntimeError(f"{n} new replicas did not come up within {timeout} s")
        try:
            seen.add(httpx.get(url + "/health", timeout=600).headers.get("x-setllm-replica", ""))
        except httpx.HTTPError:
            time.sleep(0.2)


def question(docs: list[str], rng: random.Random) -> dict:
    order = rng.sample(docs, len(docs))
    return {"prompt": ["Documents:\n", {"set": order}, "Question: what is the code of record 0?\nAnswer:"], "max_new_tokens": 1}


def part_warm(args) -> dict:
    rng, folder = random.Random(5), tempfile.mkdtemp(prefix="setllm-fleet-cache-")
    warmups = [documents(args.docs, seed, args.doc_words) for seed in (21, 22)]
    read, new = documents(args.docs, 11, args.doc_words), documents(args.docs, 13, args.doc_words)
    with server(args, "--replicas", "2", "--cache-dir", folder) as (proc, url, _, _):
        for docs in warmups:  # new sets go to the replica holding the fewest documents: one each, so neither's first forward is timed
            ask(url, question(docs, rng), "/v1/generate")
        cold = ask(url, question(read, rng), "/v1/generate")[1]
        hot = ask(url, question(read, rng), "/v1/generate")[1]
        killed = engines(proc)
        for p in killed:
            p.kill()
        psutil.wait_procs(killed, timeout=30)
        ready(url, 2, set(labelled(httpx.get(url + "/metrics").text, "setllm_replica_requests_total")))
        status, joined, warm_replica = ask(url, question(read, rng), "/v1/generate")  # waits for a replacement
        fresh_cold = ask(url, question(new, rng), "/v1/generate")[1]  # new documents: to the other replacement, its first question
        metrics = httpx.get(url + "/metrics").text
    shutil.rmtree(folder, ignore_errors=True)
    disk_hits = labelled(metrics, "setllm_document_cache_disk_hits").get(warm_replica)
    misses = labelled(metrics, "setllm_document_cache_misses").get(warm_replica)
    out = {"documents": args.docs, "words_per_document": args.doc_words, "cold_s": round(cold, 3), "in_memory_s": round(hot, 3),
           "replacement_first_question_s": round(joined, 3), "status": status, "replacement_cold_first_question_s": round(fresh_cold, 3),
           "of_cold": round(joined / cold, 3), "replacement_disk_hits": disk_hits, "replacement_misses": misses}
    print(f"warm join: a replacement's first question over {args.docs} documents another replica read: {joined:.3f} s, "
          f"{joined / cold:.3f}x the cold {cold:.3f} s ({1 / (joined / cold):.1f}x sooner; in memory {hot:.3f} s; a replacement's first "
          f"question over new documents {fresh_cold:.3f} s); {disk_hits} pieces from the folder, {misses} computed", flush=True)
    return out


def part_kill(args) -> dict:
    bodies = stream(argparse.Namespace(pool=args.pool, per=5, questions=args.questions, asks=3))
    with server(args) as (_, url, _, _):
        with ThreadPoolExecutor(args.clients) as pool:
            want = list(pool.map(lambda b: httpx.post(url + "/v1/score", json=b, timeout=600).json(), bodies))
    runs = []
    for run in range(args.kill_runs):
        answers: list = [None] * len(bodies)
        done = threading.Semaphore(0)
        with server(args, "--replicas", "2") as (proc, url, _, _):
            def one(i: int) -> None:
                try:
                    r = httpx.post(url + "/v1/score", json=bodies[i], timeout=600)
                    answers[i] = (r.status_code, r.json())
                except httpx.HTTPError as e:
                    answers[i] = ("no answer", repr(e))
                done.release()

            with ThreadPoolExecutor(args.clients) as pool:
                futures = [pool.submit(one, i) for i in range(len(bodies))]
                for _ in range(len(bodies) // 3):
                    done.acquire()
                victim = engines(proc)[run % 2]
                victim.kill()
                for f in futures:
                    f.result()
            metrics = httpx.get(url + "/metrics").text
        failed = sum(a[0] != 200 for a in answers)
        differ = sum(a[0] == 200 and a[1] != w for a, w in zip(answers, want))
        if differ:
            print("first difference:", next((a, w) for a, w in zip(answers, want) if a[0] == 200 and a[1] != w), flush=True)
        retried = int(total(metrics, "setllm_endpoint_retries_total"))
        runs.append({"failed": failed, "answers_differing": differ, "retried": retried})
        print(f"kill run {run + 1}: {len(bodies)} requests from {args.clients} clients, a replica SIGKILLed after {len(bodies) // 3}: "
              f"{failed} failed, {differ} answers unlike one server's, {retried} sent again to the other replica", flush=True)
    return {"questions": len(bodies), "clients": args.clients, "runs": runs}


def part_ramp(args) -> dict:
    bodies = stream(argparse.Namespace(pool=args.pool, per=5, questions=2000, asks=5))
    phases = [(1, args.low_s), (args.peak, args.peak_s), (1, args.low_s), (0, args.idle_s)]
    timeline, statuses, stop = [], [], threading.Event()
    flags = ["--replicas", "1", "--min-replicas", "1", "--max-replicas", "3", "--target-in-flight", "2", "--scale-up-s", str(args.scale_up_s),
             "--scale-down-s", str(args.scale_down_s)]
    with server(args, *flags) as (proc, url, _, _):
        begin = time.perf_counter()
        clients = {"n": 0}

        def watch() -> None:
            while not stop.is_set():
                timeline.append((round(time.perf_counter() - begin, 1), clients["n"], len(engines(proc))))
                time.sleep(1.0)

        def client(k: int, until: float) -> None:
            while time.perf_counter() < until:
                statuses.append(ask(url, bodies[(k * 997 + len(statuses)) % len(bodies)])[0])

        watcher = threading.Thread(target=watch)
        watcher.start()
        starts = []
        for n, seconds in phases:
            clients["n"], until = n, time.perf_counter() + seconds
            starts.append(round(time.perf_counter() - begin, 1))
            workers = [threading.Thread(target=client, args=(k, until)) for k in range(n)]
            for w in workers:
                w.start()
            if not workers:
                time.sleep(seconds)
            for w in workers:
                w.join()
        stop.set()
        watcher.join()
        metrics = httpx.get(url + "/metrics").text
    peak_at, down_at = starts[1], starts[2]
    first = {k: next((t for t, _, e in timeline if t >= peak_at and e >= k), None) for k in (2, 3)}
    back = next((t for t, _, e in timeline if t >= down_at and e == 1), None)
    hits, misses = total(metrics, "setllm_document_cache_hits"), total(metrics, "setllm_document_cache_misses")
    failed = sum(s != 200 for s in statuses)
    out = {"phases_clients_s": phases, "requests": len(statuses), "failed": failed, "most_replicas": max(e for _, _, e in timeline),
           "up_to_2_s": None if first[2] is None else round(first[2] - peak_at, 1),
           "up_to_3_s": None if first[3] is None else round(first[3] - peak_at, 1),
           "down_to_1_s": None if back is None else round(back - down_at, 1), "hit_rate_live_replicas": round(hits / max(hits + misses, 1), 3),
           "timeline": timeline}
    print(f"ramp: {len(statuses)} requests, {failed} failed; replicas {out['most_replicas']} at most; 2 replicas {out['up_to_2_s']} s and 3 "
          f"{out['up_to_3_s']} s after the peak began; back to 1 {out['down_to_1_s']} s after it ended; hit rate {out['hit_rate_live_replicas']}",
          flush=True)
    return out


def part_stop(args) -> dict:
    out = {}
    with server(args, "--replicas", "2") as (proc, url, _, _):
        started, t = processes(proc), time.perf_counter()
        os.killpg(os.getpgid(proc.pid), signal.SIGTERM)
        proc.wait(timeout=120)
        out["idle_group_sigterm"] = {"seconds": round(time.perf_counter() - t, 1), "left_running": len(psutil.wait_procs(started, timeout=5)[1])}
    long = {"prompt": "Say:", "max_new_tokens": 64}
    for how in ("group_sigterm", "double_sigint"):
        with server(args, "--replicas", "2", "--max-batch-size", "2") as (proc, url, _, _):
            with ThreadPoolExecutor(8) as pool:
                futures = [pool.submit(ask, url, long, "/v1/generate") for _ in range(8)]
                time.sleep(2.0)
                started, t = processes(proc), time.perf_counter()
                if how == "group_sigterm":
                    os.killpg(os.getpgid(proc.pid), signal.SIGTERM)
                else:
                    proc.send_signal(signal.SIGINT)
                    time.sleep(1.0)
                    proc.send_signal(signal.SIGINT)
                proc.wait(timeout=300)
                seconds = time.perf_counter() - t
                ended = [f.result()[0] for f in futures]
            out[how] = {"seconds": round(seconds, 1), "answers": {str(s): ended.count(s) for s in set(ended)},
                        "left_running": len(psutil.wait_procs(started, timeout=5)[1])}
    print(f"stops: {out}", flush=True)
    return out


def orphans(since: float) -> list:
    """Ray's processes a dead raylet left to init since ``since`` (its agents, started again while it died)."""
    out = []
    for p in psutil.process_iter(["ppid", "name", "create_time", "cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        if p.info["ppid"] == 1 and p.info["create_time"] >= since and line.startswith(("ray::DashboardAgent", "ray::RuntimeEnvAgent")):
            out.append(p)
    return out


def part_faults(args) -> dict:
    out, long = {}, {"prompt": "Say:", "max_new_tokens": 64}
    for victim, mark in (("ingress", "ServeReplica:setllm:setllm-ingress"), ("raylet", "raylet/raylet "), ("gcs", "gcs/gcs_server ")):
        since = time.time()
        with server(args, "--replicas", "2", "--max-batch-size", "1") as (proc, url, _, _):
            with ThreadPoolExecutor(8) as pool:
                futures = [pool.submit(ask, url, long, "/v1/generate", args.fault_wait_s) for _ in range(8)]
                time.sleep(2.0)
                for p in processes(proc):
                    with _gone():
                        if mark in " ".join(p.cmdline()):
                            p.kill()
                held = [f.result()[0] for f in futures]
            status, after, _ = ask(url, {"prompt": "Say:", "max_new_tokens": 2}, "/v1/generate", args.fault_wait_s)
            started, t = processes(proc), time.perf_counter()
            proc.terminate()
            proc.wait(timeout=300)
            stop_s = time.perf_counter() - t
            left = psutil.wait_procs(started, timeout=5)[1] + orphans(since)
            kill(left)
        out[victim] = {"open_requests": {str(s): held.count(s) for s in set(held)}, "next_request": status, "next_request_s": round(after, 1),
                       "sigterm_stop_s": round(stop_s, 1), "exit": proc.returncode, "left_running": len(left)}
        print(f"faults: {victim} SIGKILLed with 8 requests open: {out[victim]}", flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated parts to run: " + ", ".join(PARTS))
    p.add_argument("--threads", type=int, default=1, help="torch threads of each server and replica")
    p.add_argument("--rounds", type=int, default=2, help="start: starts of each kind")
    p.add_argument("--docs", type=int, default=8, help="warm: documents of the question")
    p.add_argument("--doc-words", type=int, default=240, help="warm: filler words per document (about 1.5 tokens each)")
    p.add_argument("--questions", type=int, default=60, help="kill: requests in the stream")
    p.add_argument("--pool", type=int, default=50, help="kill, ramp: documents the questions draw from")
    p.add_argument("--clients", type=int, default=4, help="kill: concurrent clients")
    p.add_argument("--kill-runs", type=int, default=1, help="kill: runs")
    p.add_argument("--peak", type=int, default=8, help="ramp: clients at the peak")
    p.add_argument("--low-s", type=float, default=30, help="ramp: seconds of one client before and after the peak")
    p.add_argument("--peak-s", type=float, default=90, help="ramp: seconds of the peak")
    p.add_argument("--idle-s", type=float, default=40, help="ramp: seconds without clients at the end")
    p.add_argument("--scale-up-s", type=float, default=5, help="ramp: the fleet's --scale-up-s")
    p.add_argument("--scale-down-s", type=float, default=20, help="ramp: the fleet's --scale-down-s")
    p.add_argument("--fault-wait-s", type=float, default=60, help="faults: how long a client waits for its answer")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args()
    result = {"cpus": os.cpu_count(), "threads": args.threads}
    for part in args.parts.split(","):
        result[part] = globals()[f"part_{part}"](args)
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
