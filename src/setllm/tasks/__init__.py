"""One home per task kind: each file says where a task's data comes from, how a row becomes
a record, how a record becomes a prompt (the paper's templates), and its table column.
Evaluation, training, report and ``setllm export`` all read them from here.

Multiple-choice benchmarks: :mod:`.arc_challenge`, :mod:`.piqa`, :mod:`.commonsense_qa`,
:mod:`.social_iqa`; a user's own file: :mod:`.custom`. Instruction data:
:mod:`.ultrafeedback`. Judging: :mod:`.judge`. Documents read as a set: :mod:`.documents`.
"""

from __future__ import annotations

import importlib
import pkgutil

from ..io.records import DataError
from .base import (
    CONTINUATION,
    OPTION_SET,
    REGISTRY,
    TEMPLATES,
    HubSource,
    MCTask,
    Ordering,
    Rendered,
    Template,
    hub_rows,
    load_records,
    read_records,
    register,
)

# Each task file registers its tasks as it is imported (:func:`.base.register`); importing
# every module here is what makes a new file in this package a known task.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f".{_module.name}", __name__)

from . import custom, documents, judge, ultrafeedback  # noqa: E402  (named below; imported above)

CUSTOM = custom.TASK


def _of_kind(kind: str) -> dict:
    """The registered tasks of one kind, in table order (a user's own file, ``custom``, apart)."""
    tasks = sorted((t for t in REGISTRY.values() if t.kind == kind and t is not CUSTOM), key=lambda t: t.position)
    return {t.name: t for t in tasks}


# The multiple-choice benchmarks (the paper's four, in the order its tables give them, first).
TASKS: dict[str, MCTask] = _of_kind("mc")
# Judging candidate responses (:mod:`.judge`): the UltraFeedback test pairs, or a user's rows.
JUDGE_TASKS: dict[str, MCTask] = _of_kind("judge")
# Reading many documents as a set (:mod:`.documents`): a user's or a generated file.
DOCUMENT_TASKS = _of_kind("documents")


def get_task(name: str | None) -> MCTask:
    """A benchmark by name; None (or ``custom``) is a user's own file."""
    if name is None or name == CUSTOM.name:
        return CUSTOM
    known = {**TASKS, **JUDGE_TASKS, **DOCUMENT_TASKS}
    if name not in known:
        raise DataError(f"unknown dataset {name!r}; choose one of: {', '.join(known)}")
    return known[name]


def column(name: str) -> str:
    """The table column title of a dataset (its name if unknown)."""
    known = {**TASKS, **JUDGE_TASKS, **DOCUMENT_TASKS}
    return known[name].column if name in known else name


__all__ = ["CONTINUATION", "CUSTOM", "REGISTRY", "register", "DOCUMENT_TASKS", "JUDGE_TASKS", "OPTION_SET", "TASKS", "TEMPLATES",
           "HubSource", "MCTask", "Ordering", "Rendered", "Template",
           "column", "documents", "get_task", "hub_rows", "judge", "load_records", "read_records", "ultrafeedback"]
