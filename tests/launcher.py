"""Real multi-process launches for the ``multiprocess`` tests: ``setllm`` under ``accelerate
launch`` on CPU, rendezvous on 127.0.0.1 at a free port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(n: int, *argv: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """``accelerate launch --multi_gpu --num_processes N -m setllm ARGV`` on CPU: accelerate
    hands it to torchrun; with no GPU visible every rank joins a gloo group. (``--cpu``
    would start one process: accelerate's CPU launcher is mpirun.)"""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(n), "--num_machines", "1",
           "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port()), "--mixed_precision", "no",
           "--dynamo_backend", "no", "-m", "setllm", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
