"""Peak memory of one scoring batch: CUDA allocator peak on GPU, the process's peak RSS on CPU.

On Linux the RSS high-water mark (``VmHWM``) can be reset by writing ``5`` to
``/proc/self/clear_refs``, so each batch is measured on its own. Where that is not possible
the lifetime peak (``ru_maxrss``) is reported, and :func:`memory_measure` says so.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import torch

_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


def _on_cuda(device) -> bool:
    return torch.device(device).type == "cuda" and torch.cuda.is_available()


def memory_measure(device) -> str:
    """What :func:`peak_memory_mb` reports on ``device``."""
    if _on_cuda(device):
        return "cuda_max_allocated_per_batch"
    return "rss_peak_per_batch" if _can_reset_rss() else "rss_peak_lifetime"


def reset_peak_memory(device) -> None:
    if _on_cuda(device):
        torch.cuda.reset_peak_memory_stats(device)
    elif _can_reset_rss():
        _CLEAR_REFS.write_text("5")


def peak_memory_mb(device) -> float:
    if _on_cuda(device):
        return torch.cuda.max_memory_allocated(device) / 2**20
    for line in _STATUS.read_text().splitlines() if _STATUS.exists() else []:
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # bytes on macOS, kB on Linux


_RESETTABLE: bool | None = None


def _can_reset_rss() -> bool:
    global _RESETTABLE
    if _RESETTABLE is None:
        try:
            _CLEAR_REFS.write_text("5")
            _RESETTABLE = _STATUS.exists()
        except OSError:
            _RESETTABLE = False
    return _RESETTABLE
