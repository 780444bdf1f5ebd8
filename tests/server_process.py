"""`setllm serve` as a real process on a free loopback port, for the tests that talk to it
over HTTP (process tests, real clients, the docs' console examples)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time

START_TIMEOUT_S = 180


@contextlib.contextmanager
def serve_process(*flags: str, cwd=None):
    """``(process, "http://127.0.0.1:PORT")`` once the server says it listens; killed after."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "setllm", "serve", "--port", "0", *flags],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=cwd)
    lines = []
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
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
