"""`setllm serve` as a real process on a free loopback port, for the tests that talk to it
over HTTP (process tests, real clients, the docs' console examples)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

START_TIMEOUT_S = 180


def _wait_for_batching_verdict(url: str, deadline: float, key: str | None = None) -> None:
    """Until the server's batching check (run in the background on a first start) has its
    verdict: tests see the server as it serves once started, not while it checks. ``key``:
    the server's ``--api-key`` (without it /health names only its status)."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    while time.monotonic() < deadline:
        with urllib.request.urlopen(urllib.request.Request(url + "/health", headers=headers), timeout=10) as r:
            if "until" not in json.load(r)["batching"]:
                return
        time.sleep(0.05)


def listening_url(proc: subprocess.Popen, deadline: float) -> str:
    """The loopback URL a starting ``setllm serve`` prints on stderr, read until it says how
    to stop it (or the ``time.monotonic()`` deadline, or its stderr ends: then fail with what it said)."""
    lines: list[str] = []
    while time.monotonic() < deadline and not any("Ctrl-C stops" in line for line in lines):
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
    port = re.search(r"listening on http://127\.0\.0\.1:(\d+)", "".join(lines))
    assert port, "".join(lines)
    return f"http://127.0.0.1:{port.group(1)}"


@contextlib.contextmanager
def serve_process(*flags: str, cwd=None):
    """``(process, "http://127.0.0.1:PORT")`` once the server says it listens; killed after."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "setllm", "serve", "--port", "0", *flags],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=cwd)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        url = listening_url(proc, deadline)
        key = flags[flags.index("--api-key") + 1] if "--api-key" in flags else None
        _wait_for_batching_verdict(url, deadline, key)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
