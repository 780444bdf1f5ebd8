"""Multiple-choice records and JSONL reading, shared by every task.

Records are ``{"id", "question", "context"?, "choices": [...], "label": int}`` (``"options"``
is read as ``"choices"``, as ``setllm choose --input`` names them; what
``--data-dir D`` holds as ``D/<dataset>/<split>.jsonl``); where each benchmark's data comes from, and how a hub row becomes such a
record, is its task file's business (:mod:`setllm.tasks`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError, InputError  # noqa: F401  (DataError is imported from here too)
from .files import check_file, decode_line


@dataclass(frozen=True)
class MCRecord:
    """One multiple-choice question. ``label`` is None where the split is unlabelled."""

    id: str
    question: str
    choices: tuple[str, ...]
    label: int | None
    context: str | None = None


def parse_record(obj: object, where: str, require_label: bool = True) -> MCRecord:
    """Validate one JSON object as an :class:`MCRecord`; errors say ``where``."""
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if "choices" not in obj and "options" in obj:  # setllm choose --input's name for them: one row format for both
        obj = {**obj, "choices": obj["options"]}
    for key in ("question", "choices"):
        if key not in obj:
            raise DataError(f"{where}: missing field {key!r}{' (or its other name, options)' if key == 'choices' else ''}")
    choices = obj["choices"]
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) and c.strip() for c in choices):
        raise DataError(f"{where}: 'choices' must be a list of at least two non-empty strings")
    if not isinstance(obj["question"], str):
        raise DataError(f"{where}: 'question' must be a string")
    label = obj.get("label")
    if label is None and require_label:
        raise DataError(f"{where}: missing 'label' (an unlabelled split cannot be scored or trained on; "
                        "setllm choose --input answers rows without one)")
    if label is not None and (not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < len(choices)):
        raise DataError(f"{where}: 'label' must be an integer index into 'choices' (0..{len(choices) - 1}), got {label!r}")
    context = obj.get("context")
    if context is not None and not isinstance(context, str):
        raise DataError(f"{where}: 'context' must be a string")
    return MCRecord(str(obj.get("id", where)), obj["question"], tuple(choices), label, context or None)


def iter_jsonl(path: str | Path, errors: str = "raise") -> Iterator[tuple[str, object]]:
    """Yield ``("file:line", parsed object)`` for each non-blank line.

    A malformed line raises :class:`DataError`, or with ``errors="yield"`` is yielded as
    that error so the caller can count and skip it.
    """
    path = check_file(path, "data file")
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            line = decode_line(raw, path, lineno)
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as e:
                error = DataError(f"{where}: malformed JSON ({e.msg})")
                if errors != "yield":
                    raise error from None
                yield where, error


def subset(records: list, limit: int | None = None, seed: int | None = None) -> list:
    """The first ``limit`` records, or a seeded random sample of ``limit`` if ``seed`` is set."""
    if limit is None or limit >= len(records):
        return list(records)
    if seed is None:
        return list(records[:limit])
    picked = sorted(random.Random(seed).sample(range(len(records)), limit))
    return [records[i] for i in picked]
