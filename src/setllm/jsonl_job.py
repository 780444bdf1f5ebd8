"""Many questions from a JSONL file, answers to a JSONL file: checked first, batched, in input
order, resumable (a rerun with the same ``--output`` skips the rows already answered), and
with nothing half-written (a line cut by a kill is dropped on resume).

Used by ``setllm choose --input`` (and any command that maps rows to rows).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .data import DataError, iter_jsonl

Row = dict[str, Any]


def read_rows(path: str | Path, parse: Callable[[object, str], Row]) -> list[Row]:
    """Every row parsed (``parse(obj, "file:line") -> row`` raises :class:`DataError`), with an
    ``id`` (default: the line's index) unique across the file."""
    rows, seen = [], {}
    for i, (where, obj) in enumerate(iter_jsonl(path)):
        row = parse(obj, where)
        row["id"] = str(obj.get("id", i)) if isinstance(obj, dict) else str(i)
        if row["id"] in seen:
            raise DataError(f"{where}: duplicate id {row['id']!r} (first at {seen[row['id']]})")
        seen[row["id"]] = where
        rows.append(row)
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def check_output(output: str | Path) -> None:
    """Fail now, before a model loads, if ``--output`` cannot be written."""
    path = Path(output)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.open("a").close()
    except OSError as e:
        raise DataError(f"--output {path}: cannot write it ({e.strerror})") from None


def done_ids(output: Path) -> set[str]:
    """Ids already answered in ``output``; a trailing partial line (a kill) is cut off."""
    if not output.exists():
        return set()
    data = output.read_bytes()
    if data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
        with output.open("r+b") as f:
            f.truncate(len(data))
    ids = set()
    for lineno, line in enumerate(data.decode("utf-8").splitlines(), 1):
        try:
            ids.add(str(json.loads(line)["id"]))
        except (ValueError, KeyError, TypeError):
            raise DataError(f"{output}:{lineno}: not an answer row; use another --output") from None
    return ids


def run(rows: Sequence[Row], output: str | Path, answer: Callable[[list[Row]], list[Row]], batch_size: int, progress: bool = True) -> int:
    """Answer the rows not yet in ``output``, ``batch_size`` at a time, appending each batch
    as it finishes; returns how many were answered now."""
    from tqdm.auto import tqdm

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("a", encoding="utf-8") as out:
        try:
            fcntl.flock(out, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataError(f"--output {output}: another setllm process is writing it") from None
        done = done_ids(output)
        todo = [r for r in rows if r["id"] not in done]
        with tqdm(total=len(rows), initial=len(rows) - len(todo), unit="row", disable=not progress) as bar:
            for lo in range(0, len(todo), batch_size):
                for result in answer(todo[lo : lo + batch_size]):
                    out.write(json.dumps(result, ensure_ascii=False) + "\n")
                out.flush()
                os.fsync(out.fileno())
                bar.update(min(batch_size, len(todo) - lo))
    return len(todo)
