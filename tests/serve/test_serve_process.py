"""`setllm serve` as a real process on a loopback port: it says where it listens, answers,
and on SIGTERM finishes the request in flight, turns new ones away, and exits in time."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from setllm.cli import COMMANDS

STOP_WITHIN_S = 10


def serve_command(*flags: str) -> list[str]:
    """`setllm serve` (as `python -m setllm.cli.serve` until the CLI lists it)."""
    if "serve" in COMMANDS:
        return [sys.executable, "-m", "setllm", "serve", *flags]
    return [sys.executable, "-m", "setllm.cli.serve", *flags]


@pytest.fixture
def server(model_dir):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(serve_command("--model", model_dir, "--adapter", "none", "--port", "0"),
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    lines = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not any("Ctrl-C stops" in line for line in lines):
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
        port = re.search(r"listening on http://127\.0\.0\.1:(\d+) \(loopback only", "".join(lines))
        assert port, "".join(lines)
        yield proc, f"http://127.0.0.1:{port.group(1)}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_drains_and_exits(server):
    proc, url = server
    assert httpx.post(f"{url}/v1/choose", json={"question": "Which city?", "options": ["Paris", "Rome"]}).status_code == 200
    result = {}

    def generate():
        r = httpx.post(f"{url}/v1/generate", json={"prompt": "Say:", "max_new_tokens": 150}, timeout=30)
        result["status"], result["text"] = r.status_code, r.json().get("text")

    worker = threading.Thread(target=generate)
    worker.start()
    _wait_until_running(url)
    proc.send_signal(signal.SIGTERM)
    stopped_at = time.monotonic()
    late = httpx.post(f"{url}/v1/choose", json={"question": "Which city?", "options": ["Paris", "Rome"]})
    assert late.status_code == 503 and late.json() == {"error": "server is shutting down"}
    proc.wait(timeout=STOP_WITHIN_S + 5)
    assert time.monotonic() - stopped_at < STOP_WITHIN_S
    worker.join(timeout=5)
    assert result["status"] == 200 and result["text"]  # the request in flight was finished
    rest = proc.stderr.read()
    assert proc.returncode == 0, rest
    assert "setllm serve: stopping; finishing 1 request(s) in flight" in rest and rest.rstrip().endswith("setllm serve: stopped")


def _wait_until_running(url: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if "setllm_batch_running 1" in httpx.get(f"{url}/metrics").text.splitlines():
            return
        time.sleep(0.02)
    raise AssertionError("the generation never started")
