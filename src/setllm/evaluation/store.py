"""The run directory: settings, per-question predictions (appended as they finish), summary.

``predictions.jsonl`` holds one line per finished question. A rerun reads it and skips
those questions; a line cut short by a kill is dropped (and cut off the file) so nothing
that was completely written is lost. A question written twice (rerun with a mode that needs
more orderings) counts by its last line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..io.records import DataError

SETTINGS_FILE = "run.json"
PREDICTIONS_FILE = "predictions.jsonl"
SUMMARY_FILE = "summary.json"


def check_settings(out: Path, settings: dict[str, Any]) -> None:
    """Check that an earlier run in ``out`` (its ``run.json``) had the same settings.
    ``run.json`` itself is written with the first predictions (:func:`append_predictions`),
    so a run that fails before scoring anything leaves nothing that blocks the next one."""
    path = out / SETTINGS_FILE
    if not path.exists():
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise DataError(f"{path}: not valid JSON; delete it or use --overwrite") from None
    diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
    if diff:
        shown = ", ".join(f"{k}: {old.get(k)!r} -> {settings.get(k)!r}" for k in diff[:3])
        raise InputError(f"{out} holds a run with other settings ({shown}); use another --out, or --overwrite to start again")


def write_json(path: Path, obj: Any) -> None:
    """Write atomically: a killed run never leaves half a summary."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def load_predictions(out: Path) -> dict[str, dict]:
    """Finished questions by id; drops a trailing partial line left by a kill."""
    path = out / PREDICTIONS_FILE
    if not path.exists():
        return {}
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
        with path.open("r+b") as f:
            f.truncate(len(data))
    done: dict[str, dict] = {}
    for lineno, line in enumerate(data.decode("utf-8").splitlines(), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: malformed JSON ({e.msg}); delete the line or use --overwrite") from None
            done[row["id"]] = row
    return done


def append_predictions(out: Path, rows: list[dict], settings: dict[str, Any]) -> None:
    """Append finished questions and push them to disk (``run.json`` first, once)."""
    if not (out / SETTINGS_FILE).exists():
        write_json(out / SETTINGS_FILE, settings)
    with (out / PREDICTIONS_FILE).open("a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def rewrite_predictions(out: Path, rows: Iterable[dict]) -> None:
    """Replace the predictions file with one row per question (atomically)."""
    tmp = out / (PREDICTIONS_FILE + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, out / PREDICTIONS_FILE)


def clear(out: Path) -> None:
    for name in (SETTINGS_FILE, PREDICTIONS_FILE, SUMMARY_FILE):
        (out / name).unlink(missing_ok=True)
