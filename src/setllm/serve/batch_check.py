"""The batching check, remembered: run once per machine, torch build and model, not at
every start.

Whether a batch of different questions gives every request the bits it gets alone is a
property of the kernels (CPU model, torch build, thread count, dtype, device) and of the
shapes the model gives them (its architecture, the variant), not of the moment the server
starts. So the first server on a machine checks it in the background while it already
answers (batching only identical requests meanwhile: those are the same computation by
construction), writes the verdict to ``$SETLLM_CACHE/batch-check.json``, and later starts
read it in a millisecond.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

import torch

from .. import __version__
from ..loading.convert import cache_dir

CACHE_FILE = "batch-check.json"


def check_key(lm, max_batch_size: int) -> str:
    """A short hash of everything the check's verdict depends on."""
    config, param = lm.model.config, next(lm.model.parameters())
    shape = {k: getattr(config, k, None) for k in ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
                                                    "num_attention_heads", "num_key_value_heads", "vocab_size")}
    parts = (__version__, torch.__version__, platform.machine(), _cpu_model(), torch.get_num_threads(), str(param.device),
             str(param.dtype), sorted(shape.items()), str(lm.origin.model), str(lm.origin.adapter), lm.variant.name, max_batch_size)
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def remembered(key: str) -> bool | None:
    """The verdict stored for ``key`` (None: never checked here, or the file is unreadable)."""
    verdict = _read().get(key)
    return verdict if isinstance(verdict, bool) else None


def remember(key: str, exact: bool) -> None:
    """Store a verdict; a cache that cannot be written only means checking again next time."""
    path = cache_dir() / CACHE_FILE
    verdicts = {**_read(), key: exact}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # renamed into place: readers never see half a file
        tmp.write_text(json.dumps(verdicts, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass


def _read() -> dict:
    try:
        data = json.loads((cache_dir() / CACHE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _cpu_model() -> str:
    """The CPU's model name (kernels differ between CPUs of one architecture)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
