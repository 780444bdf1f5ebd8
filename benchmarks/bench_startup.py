"""Start-up cost of the CLI and the server, measured side by side in one run.

(a) ``setllm --help`` vs ``python -c "import torch"``: help imports neither torch nor
    transformers (target: ratio <= 1.0).
(b) a warm ``setllm choose`` (embedded model + shipped adapter, already converted) vs a plain
    transformers + PEFT script that loads the same model (the converted weights, the same
    adapter merged in) and scores the same four options (target: ratio <= 1.3).
(c) ``setllm serve`` (a fresh process) until ``GET /health`` answers 200 vs one ``setllm
    choose`` (target: ratio <= 1.2).
(d) SIGTERM to ``setllm serve`` during start-up (while the model loads, and just after it
    listens, while the batching check runs in the background): seconds until the process has
    ended, and its exit status (target: <= 5 s).

Each command runs ``--repeats`` times, in turns, in fresh processes; medians are reported.
The environment is passed on as it is: set ``SETLLM_THREADS`` to measure with that many
threads. Usage: python benchmarks/bench_startup.py [--repeats 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

from report_io import emit  # benchmarks/, this script's folder

OPTIONS = ["Budapest", "Paris", "Zurich", "Rome"]
QUESTION = ["Which city is the capital of France?", "--options", *OPTIONS]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
SETLLM = [sys.executable, "-m", "setllm"]

# The same work as `setllm choose`, minus setllm: load the converted model with the shipped
# adapter merged in (PEFT), score the 4 options.
PLAIN = """
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
from setllm.api import default_adapter
from setllm.loading import embedded_model_dir
path = embedded_model_dir()
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
model = PeftModel.from_pretrained(model, default_adapter("choose")).merge_and_unload().eval()
text = "Question: Which city is the capital of France?\\n\\nChoices:\\nBudapest\\nParis\\nZurich\\nRome\\nAnswer:"
with torch.no_grad():
    for opt in ["Budapest", "Paris", "Zurich", "Rome"]:
        ids = tok(text + " " + opt, return_tensors="pt").input_ids
        model(ids)
"""


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=ENV)
    return time.perf_counter() - start


def serve_until_healthy(first_start: bool = False, checked: bool = False) -> float:
    """Seconds from starting ``setllm serve`` until ``/health`` answers 200 (then it is
    stopped); ``first_start``: with no batching verdict remembered on this machine;
    ``checked``: also wait until the batching check has its verdict (and stored it)."""
    if first_start:
        forget_batch_check()
    start = time.perf_counter()
    proc, url = _start_serve()
    try:
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as r:
                    if r.status == 200 and not (checked and "until" in json.load(r)["batching"]):
                        return time.perf_counter() - start
            except OSError:
                pass
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait()


def forget_batch_check() -> None:
    """Remove the remembered batching verdicts (``$SETLLM_CACHE/batch-check.json``), so the
    next server start checks batching again, as the first one on a machine does."""
    from setllm.loading.convert import cache_dir
    from setllm.serve.batch_check import CACHE_FILE

    (cache_dir() / CACHE_FILE).unlink(missing_ok=True)


def _start_serve() -> tuple[subprocess.Popen, str]:
    """A server on a port picked here (free now), and its URL once the process has started."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([*SETLLM, "serve", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=ENV)
    return proc, f"http://127.0.0.1:{port}"


def stop_during_start_up(after_s: float | None) -> dict:
    """SIGTERM ``after_s`` seconds into start-up (None: as soon as it says it listens):
    seconds until the process ended, and its exit status."""
    forget_batch_check()  # so that, once it listens, the check runs in the background
    proc = subprocess.Popen([*SETLLM, "serve", "--port", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
    if after_s is None:
        for line in proc.stderr:
            if "listening on" in line:
                break
    else:
        time.sleep(after_s)
    sent = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    try:
        status = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        status = "still running after 60 s (killed)"
    return {"signal_after_s": after_s if after_s is not None else "listening", "exit_s": round(time.perf_counter() - sent, 2),
            "exit_status": status}


def medians(fns: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each function, run in turns so load drifts hit all alike."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(fn())
    return {k: round(statistics.median(v), 2) for k, v in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", metavar="FILE", help="also write the report here")
    args = p.parse_args()
    timed([*SETLLM, "choose", *QUESTION])  # warm: conversion and file caches
    serve_until_healthy(first_start=True, checked=True)  # and the batching verdict of this machine
    t = medians({
        "help": lambda: timed([*SETLLM, "--help"]),
        "import_torch": lambda: timed([sys.executable, "-c", "import torch"]),
        "choose": lambda: timed([*SETLLM, "choose", *QUESTION]),
        "plain_transformers": lambda: timed([sys.executable, "-c", PLAIN]),
        "serve_health_first_start": lambda: serve_until_healthy(first_start=True),
        "serve_health": serve_until_healthy,
    }, args.repeats)
    stops = [stop_during_start_up(s) for s in (1.0, 3.0, None)]
    report = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads: {os.environ.get('SETLLM_THREADS') or 'default'}",
        "repeats": args.repeats, "seconds": t,
        "ratios": {
            "help / import torch (<= 1.0)": round(t["help"] / t["import_torch"], 2),
            "choose / plain transformers (<= 1.3)": round(t["choose"] / t["plain_transformers"], 2),
            "serve until /health / choose (<= 1.2)": round(t["serve_health"] / t["choose"], 2),
            "serve until /health, first start on this machine / choose (<= 1.2)": round(t["serve_health_first_start"] / t["choose"], 2),
        },
        "sigterm_during_start_up (<= 5 s)": stops,
    }
    emit(report, args.json)


if __name__ == "__main__":
    main()
