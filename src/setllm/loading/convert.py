"""GGUF files converted once to a safetensors folder in setllm's cache (dequantizing takes
~25 s; loading the converted folder under a second)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from ..errors import ModelLoadError
from .checks import first_problem, safetensors_problem
from .quiet import on_terminal, quiet_loading


def cache_dir() -> Path:
    return Path(os.environ.get("SETLLM_CACHE") or Path.home() / ".cache" / "setllm")


def convert_once(gguf: Path, target: Path, progress: bool, what: str) -> Path:
    """``target``, converted from ``gguf`` unless a usable conversion is there already (a
    truncated copy, a full disk during conversion: converted again). Written elsewhere, then
    renamed: an interrupted conversion never leaves a half cache."""
    problem = converted_problem(target)
    if problem is None:
        return target
    if progress:
        again = "converting" if problem == "missing" else f"the cached copy is unusable ({problem}); converting again"
        print(f"setllm: {what} in {target}: {again} to safetensors (once)", file=sys.stderr)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".convert-"))
    try:
        with quiet_loading(progress and on_terminal()):  # a conversion's bars on a terminal only, never in a log
            convert_gguf(gguf, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def converted_problem(target: Path) -> str | None:
    """Why the cached conversion cannot be used (``"missing"`` if absent), or None."""
    config, weights = target / "config.json", target / "model.safetensors"
    if not config.is_file() or not weights.is_file():
        return "missing"
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return "config.json is not valid JSON"
    problem = safetensors_problem(weights)
    return f"model.safetensors: {problem}" if problem else None


def convert_gguf(gguf: Path, dest: Path) -> None:
    """Dequantize a GGUF model and save it, with its tokenizer, as safetensors in ``dest``."""
    import torch  # here, as transformers: where a model's source is named (the CLI's flags, a fleet's launcher) none is needed
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise ModelLoadError(f"{gguf}: transformers could not read it ({first_problem(e)})") from None
    # A gguf-loaded model cannot save_pretrained; a fresh model of the same config can.
    config = quantized.config
    config.__dict__.pop("quantization_config", None)  # a plain fp32 model, saved as safetensors
    plain = type(quantized)(config)
    plain.load_state_dict(quantized.state_dict())
    plain.generation_config = quantized.generation_config
    plain.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)
