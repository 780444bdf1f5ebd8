"""Weights files checked before anything loads them: a truncated or corrupt safetensors file
is one line naming it, not a traceback from deep inside the loader."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ModelLoadError
from .hub import files_on_this_machine

MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit


def safetensors_problem(path: str | Path) -> str | None:
    """What is wrong with a safetensors file, judged from its header alone (cheap: the data is
    never read), or None. An interrupted download or copy otherwise surfaces as a long
    traceback from deep inside the loader."""
    path = Path(path)
    size = path.stat().st_size
    if size < 8:
        return f"{size} bytes, too short even for the header length"
    with path.open("rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if n > MAX_HEADER_BYTES:
            return f"not safetensors: a header length of {n} bytes"
        if n > size - 8:
            return f"truncated or not safetensors: the header claims {n} bytes, the file has {size - 8} after it"
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return "the header is not JSON"
    if not isinstance(header, dict):
        return "the header is not a JSON object"
    return _data_problem(header, size - 8 - n) or _rust_problem(path)


def _data_problem(header: dict, data_bytes: int) -> str | None:
    """Whether the tensors the header lists lie inside the file."""
    try:
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (KeyError, TypeError, ValueError, IndexError):
        return "the header does not describe tensors"
    if end > data_bytes:
        return f"truncated: the tensors need {end} bytes of data, the file holds {data_bytes}"
    return None


def _rust_problem(path: Path) -> str | None:
    """The loader's own header checks (offsets, dtypes, shapes), for what ours let through."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt"):
            return None
    except SafetensorError as e:
        return str(e).removeprefix("Error while deserializing header: ").strip() or "rejected by safetensors"


def check_safetensors(path: str | Path) -> None:
    """Refuse a corrupt or truncated safetensors file with one line naming it."""
    problem = safetensors_problem(path)
    if problem:
        raise ModelLoadError(f"{path} is not a valid safetensors file ({problem})")


def check_model_files(path: str | Path) -> None:
    """Check every safetensors file of a model (shards included): a local directory, or the
    snapshot of a hub id in the Hugging Face cache (a download cut short stays there)."""
    folder = files_on_this_machine(str(path))
    for file in sorted(folder.glob("*.safetensors")) if folder else ():
        check_safetensors(file)


def first_problem(e: Exception) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    hits = [line for line in lines if line.startswith("size mismatch")]
    return (hits or lines or [type(e).__name__])[0]
