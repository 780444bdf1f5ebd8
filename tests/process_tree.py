"""A fleet's processes, found from the `setllm serve` process that started them (Ray's
included: its own processes start in their own session, still children of this one): what
the fleet tests and `benchmarks/bench_ray_fleet.py` kill, count and watch."""

from __future__ import annotations

import subprocess

import psutil

ENGINE = "ServeReplica:setllm:setllm-engine"  # an engine replica's process title


def processes(proc: subprocess.Popen) -> list[psutil.Process]:
    """``proc`` and every process it started, while it runs."""
    try:
        main = psutil.Process(proc.pid)
        return [main, *main.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def engines(proc: subprocess.Popen) -> list[psutil.Process]:
    """The engine replicas' processes."""
    out = []
    for p in processes(proc):
        try:
            if ENGINE in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass  # ended while listed
    return out


def kill(left: list[psutil.Process]) -> None:
    for p in left:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
