"""One home per task kind: each file says where a task's data comes from, how a row becomes
a record, how a record becomes a prompt (the paper's templates), and its table column.
Evaluation, training, report and ``setllm export`` all read them from here.

Multiple-choice benchmarks: :mod:`.arc_challenge`, :mod:`.piqa`, :mod:`.commonsense_qa`,
:mod:`.social_iqa`; a user's own file: :mod:`.custom`. Instruction data:
:mod:`.ultrafeedback`. Judging: :mod:`.judge`. Documents read as a set: :mod:`.documents`.
"""

from __future__ import annotations

from ..data import DataError
from . import (
    arc_challenge,
    commonsense_qa,
    custom,
    documents,
    judge,
    piqa,
    social_iqa,
    ultrafeedback,
)
from .base import (
    CONTINUATION,
    OPTION_SET,
    TEMPLATES,
    HubSource,
    MCTask,
    Ordering,
    Rendered,
    Template,
    hub_rows,
    load_records,
    read_records,
)

# The paper's four benchmarks, in the order its tables give them.
TASKS: dict[str, MCTask] = {m.TASK.name: m.TASK for m in (piqa, arc_challenge, commonsense_qa, social_iqa)}
# Judging candidate responses (:mod:`.judge`): the UltraFeedback test pairs, or a user's rows.
JUDGE_TASKS: dict[str, MCTask] = {t.name: t for t in (judge.PAIRS, judge.TASK)}
# Reading many documents as a set (:mod:`.documents`): a user's or a generated file.
DOCUMENT_TASKS = {documents.TASK.name: documents.TASK}
CUSTOM = custom.TASK


def get_task(name: str | None) -> MCTask:
    """A benchmark by name; None (or ``custom``) is a user's own file."""
    if name is None or name == CUSTOM.name:
        return CUSTOM
    known = {**TASKS, **JUDGE_TASKS, **DOCUMENT_TASKS}
    try:
        return known[name]
    except KeyError:
        raise DataError(f"unknown dataset {name!r}; choose one of: {', '.join(known)}") from None


def column(name: str) -> str:
    """The table column title of a dataset (its name if unknown)."""
    known = {**TASKS, **JUDGE_TASKS, **DOCUMENT_TASKS}
    return known[name].column if name in known else name


__all__ = ["CONTINUATION", "CUSTOM", "DOCUMENT_TASKS", "JUDGE_TASKS", "OPTION_SET", "TASKS", "TEMPLATES", "HubSource", "MCTask", "Ordering", "Rendered", "Template",
           "column", "documents", "get_task", "hub_rows", "judge", "load_records", "read_records", "ultrafeedback"]
