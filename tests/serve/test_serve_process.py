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
from serve_helpers import running

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


def _generate_in_background(url: str, result: dict) -> threading.Thread:
    def generate():
        r = httpx.post(f"{url}/v1/generate", json={"prompt": "Say:", "max_new_tokens": 200}, timeout=60)
        result["status"], result["body"], result["type"] = r.status_code, r.json(), r.headers["content-type"]

    worker = threading.Thread(target=generate)
    worker.start()
    _wait_until_running(url)
    return worker


def test_a_stop_finishes_a_long_accepted_request_then_exits(lm):
    """A 200-token generation that outlasts the old fixed 7 s drain still gets its text."""
    from serve_helpers import slow_forwards

    result = {}
    with slow_forwards(lm, 0.045), running(lm) as (server, thread, url):
        worker = _generate_in_background(url, result)
        started = time.monotonic()
        server.handle_exit(signal.SIGINT, None)
        late = httpx.post(f"{url}/v1/choose", json={"question": "Which city?", "options": ["Paris", "Rome"]})
        assert late.status_code == 503 and late.json() == {"error": "server is shutting down"}
        worker.join(timeout=60)
        thread.join(timeout=20)
        assert not thread.is_alive()  # the server exited by itself once the request was answered
    assert time.monotonic() - started > 7  # longer than the old drain limit
    assert result["status"] == 200 and result["body"]["text"]


def test_a_forced_stop_answers_the_accepted_request_with_json_503(lm):
    from serve_helpers import slow_forwards

    result = {}
    with slow_forwards(lm, 0.045), running(lm, drain_s=0.5) as (server, thread, url):
        worker = _generate_in_background(url, result)
        server.handle_exit(signal.SIGINT, None)
        worker.join(timeout=30)
        thread.join(timeout=20)
        assert not thread.is_alive()
    assert result["status"] == 503 and result["type"] == "application/json"
    assert result["body"] == {"error": "server stopped before this request finished"}
