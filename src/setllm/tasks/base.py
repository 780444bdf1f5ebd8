"""What every multiple-choice task file builds on: a template renders a record under an
ordering, a task names its source, its two templates and its table column, and one reader
turns a local JSONL or the hub into checked records.

The paper's two templates (Egressy & Stühmer 2025, Appendix D.3, Tables 7 and 9):

* ``original``: the question alone, each option scored as a continuation of
  ``Question: {question}\\nAnswer:``.
* ``modified``: the options in the prompt as one set; the response is the option's text
  (:func:`setllm.core.text.templates.mc_prompt`, the template the training data uses too).

and one of ours, ``held-out``: the options as a set in other words
(:func:`setllm.core.text.templates.held_out_prompt`), the same for every multiple-choice task and in no
training mix: a measurement of what an adapter learned beyond its template.

An ordering is a tuple of dataset option indices: the option shown at position ``p`` is
option ``ordering[p]`` of the record.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.text.prompt import SetPrompt
from ..core.text.templates import held_out_prompt, mc_prompt, original_prompt
from ..errors import SetLLMWarning
from ..io.records import DataError, MCRecord, iter_jsonl, parse_record, subset
from ..loading.hub import hub_problem

Ordering = tuple[int, ...]
TEMPLATES = ("original", "modified", "held-out")


@dataclass(frozen=True)
class Rendered:
    """A prompt and its options (the responses scored), in the ordering's positions."""

    prompt: SetPrompt
    options: list[str]


@dataclass(frozen=True)
class Template:
    """One way of asking.

    Attributes:
        render: ``(record, ordering) -> Rendered``.
        shows_options: the prompt contains the options. If not, every ordering is the same
            run and one run per question is enough.
        options_as_set: the options are one set, so an invariant variant reads them
            order-free and one run per question is enough (``--verify-invariance`` checks).
        orderings: ``k -> orderings`` this template is always tested under (a judge: the
            data's order and its reverse); None leaves it to ``--max-orderings``.
    """

    render: Callable[[MCRecord, Ordering], Rendered]
    shows_options: bool
    options_as_set: bool
    orderings: Callable[[int], list[Ordering]] | None = None  # fixed orderings to test (None: evaluation's choice)


def shown(record: MCRecord, order: Ordering) -> list[str]:
    return [record.choices[i] for i in order]


def _continuations(record: MCRecord, order: Ordering) -> Rendered:
    # No options in the prompt: each is scored as the answer, " {option}" after "Answer:".
    return Rendered(original_prompt(record.question, record.context), shown(record, order))


def _as_set(record: MCRecord, order: Ordering) -> Rendered:
    return Rendered(mc_prompt(record.question, shown(record, order), record.context), shown(record, order))


def _held_out(record: MCRecord, order: Ordering) -> Rendered:
    return Rendered(held_out_prompt(record.question, shown(record, order), record.context), shown(record, order))


CONTINUATION = Template(_continuations, shows_options=False, options_as_set=False)
OPTION_SET = Template(_as_set, shows_options=True, options_as_set=True)
HELD_OUT = Template(_held_out, shows_options=True, options_as_set=True)


@dataclass(frozen=True)
class HubSource:
    """Where a task lives on the Hugging Face hub, and how one of its rows becomes a record
    ``{"id"?, "question", "choices", "label", "context"?}``."""

    path: str
    config: str | None
    normalise: Callable[[dict], dict]
    split_names: dict[str, str] = field(default_factory=dict)  # ours -> the hub's, where they differ


# Every task by name, as its file registers it (:func:`register`): a new benchmark is one file
# in this package, and every surface (eval, train, export, report, lm-eval) knows it.
REGISTRY: dict[str, Any] = {}


def register(task):
    """Make ``task`` known by its name (``--dataset``, ``--data``); returns it."""
    if task.name in REGISTRY:
        raise ValueError(f"two tasks are named {task.name!r}")
    REGISTRY[task.name] = task
    return task


@dataclass(frozen=True)
class MCTask:
    """A multiple-choice task: its name, the paper's column title, templates, source.

    Attributes:
        name: the ``--dataset`` / ``--data`` name and the folder under ``--data-dir``.
        column: the column title in ``setllm report`` tables.
        original, modified: the paper's two templates.
        held_out: the options as a set in words no training mix uses (None: the task has no
            such template, e.g. a judge's candidates).
        eval_split: the split the paper evaluates on.
        hub: where the data comes from without ``--data-dir`` (None: local files only).
        needs_context: records must carry a non-empty ``context``.
        kind: ``"mc"`` (a question and its options) or ``"judge"`` (an instruction and
            candidate responses); decides the summary's extra keys.
        folder: the folder under ``--data-dir`` (default: ``name``).
        parse: ``(json object, "file:line") -> record`` (None: the row is skipped, e.g. a tie).
        position: where its column stands in tables (the paper's order; others after).
    """

    name: str
    column: str
    original: Template
    modified: Template
    eval_split: str = "test"
    hub: HubSource | None = None
    needs_context: bool = False
    kind: str = "mc"
    folder: str | None = None
    parse: Callable[[object, str], MCRecord | None] = parse_record
    held_out: Template | None = HELD_OUT
    position: int = 99

    def template(self, name: str) -> Template:
        if name not in TEMPLATES:
            raise DataError(f"unknown template {name!r}; choose one of: {', '.join(TEMPLATES)}")
        template = getattr(self, name.replace("-", "_"))
        if template is None:
            raise DataError(f"{self.name} has no {name} template")
        return template

    def check(self, record: MCRecord, where: str) -> None:
        if self.needs_context and not record.context:
            raise DataError(f"{where}: {self.name} records need a non-empty 'context'")

    def training_options(self, record: MCRecord) -> tuple[SetPrompt, tuple[str, ...]]:
        """The record as training reads it: the modified template in the dataset's order, and
        every option as ``setllm eval`` scores it (the right one is ``options[record.label]``)."""
        rendered = self.modified.render(record, tuple(range(len(record.choices))))
        return rendered.prompt, tuple(rendered.options)

    def training_pair(self, record: MCRecord) -> tuple[SetPrompt, str]:
        """The record as a training example: the correct option as the response."""
        prompt, options = self.training_options(record)
        return prompt, options[record.label]


# A local copy's folder when no --data-dir is passed (the flag wins; unset: the hub).
DATA_DIR_ENV = "SETLLM_DATA_DIR"
LAYOUT = "D/<dataset>/<split>.jsonl"


def data_dir_or_env(data_dir: str | Path | None) -> str | Path | None:
    """``data_dir`` if given, else ``$SETLLM_DATA_DIR`` if set, else None (the hub)."""
    return data_dir or os.environ.get(DATA_DIR_ENV) or None


def where_data_comes_from(task: MCTask) -> str:
    """One clause for error messages: how to point at a local copy, and the hub default."""
    hub = f"data comes from the hub ({task.hub.path})" if task.hub else f"{task.name} has no hub copy: pass --data-file"
    return (f"--data-dir D (or {DATA_DIR_ENV}=D) reads {LAYOUT} (setllm's record format, see docs/evaluation.md); "
            f"without either, {hub}")


def local_path(task: MCTask, split: str, data_dir: str | Path) -> Path:
    """``<data_dir>/<task>/<split>.jsonl``, or a :class:`DataError` listing the splits there
    and saying where data comes from (a newcomer's first error is often a missing folder)."""
    folder = task.folder or task.name
    path = Path(data_dir) / folder / f"{split}.jsonl"
    if not path.is_file():
        have = sorted(p.stem for p in (Path(data_dir) / folder).glob("*.jsonl"))
        raise DataError(f"{path}: no such file (splits here: {', '.join(have) or 'none'}); {where_data_comes_from(task)}")
    return path


@contextmanager
def datasets_offline(datasets, offline: bool):
    """``datasets`` reads only its cache while this runs, if ``offline`` (also lm-eval's loads:
    :mod:`setllm.lm_eval.local`)."""
    import datasets.config as config

    before = config.HF_HUB_OFFLINE
    config.HF_HUB_OFFLINE = before or offline
    try:
        yield
    finally:
        config.HF_HUB_OFFLINE = before


def hub_rows(task: MCTask, split: str) -> list[dict]:
    """A task's hub rows of ``split``, normalised to records; errors are one line."""
    hub = task.hub
    if hub is None:
        raise DataError(f"{task.name} has no hub source: pass --data-file, or --data-dir D (or set {DATA_DIR_ENV}=D) "
                        f"holding {LAYOUT}")
    try:
        import datasets
    except ImportError:
        raise DataError("loading from the hub needs `datasets` (pip install -e '.[eval]'), or pass --data-dir") from None
    # One quick try first: where the hub cannot answer, `datasets` would retry for ~25 s.
    # Then only a cached copy can serve, so the load runs offline.
    problem = hub_problem(hub.path, "dataset")
    try:
        with datasets_offline(datasets, problem is not None):
            ds = datasets.load_dataset(hub.path, hub.config, split=hub.split_names.get(split, split))
    except Exception as e:  # network, missing split, ...: one clear line for the user
        why = f"the hub is {problem} and no copy is cached" if problem else type(e).__name__
        raise DataError(f"could not load {hub.path} split {split!r} from the hub ({why}); pass --data-dir D or set {DATA_DIR_ENV}=D "
                        f"for a local copy (layout {LAYOUT}, setllm's record format, see docs/evaluation.md)") from None
    return [{"id": f"{task.name}-{i}", **hub.normalise(row)} for i, row in enumerate(ds)]


def read_records(task: MCTask, split: str | None = None, data_dir: str | None = None,
                 data_file: str | None = None) -> tuple[list[tuple[str, MCRecord | DataError]], str]:
    """``(where, record)`` pairs of a split and where they came from: ``data_file`` (a user's
    JSONL), else ``data_dir/<name>/<split>.jsonl`` (``data_dir`` defaults to ``$SETLLM_DATA_DIR``),
    else the hub. A malformed row is its :class:`DataError` in place of a record (the caller
    raises or skips it)."""
    split = split or task.eval_split
    data_dir = None if data_file else data_dir_or_env(data_dir)
    if data_file or data_dir:
        path = Path(data_file) if data_file else local_path(task, split, data_dir)
        pairs, source = iter_jsonl(path, errors="yield"), str(path.resolve())
    else:
        pairs, source = ((f"{task.name}[{i}]", obj) for i, obj in enumerate(hub_rows(task, split))), f"hub:{task.name}/{split}"
    parsed = ((where, _parsed(task, obj, where)) for where, obj in pairs)
    return [(where, r) for where, r in parsed if r is not None], source


def _parsed(task: MCTask, obj: object, where: str) -> MCRecord | DataError | None:
    if isinstance(obj, DataError):
        return obj
    try:
        record = task.parse(obj, where)
        if record is not None:
            task.check(record, where)
        return record
    except DataError as e:
        return e


def load_records(task: MCTask, split: str | None = None, data_dir: str | None = None, data_file: str | None = None,
                 limit: int | None = None, subset_seed: int | None = None, skip_bad: bool = False) -> tuple[list[MCRecord], str]:
    """The labelled, checked records to evaluate (or train on) and where they came from.

    Malformed records and duplicate ids raise :class:`DataError` naming file and line, or
    with ``skip_bad`` are skipped (one warning: how many, and the first).
    """
    if not (data_file or data_dir_or_env(data_dir) or task.hub):
        raise DataError("pass --dataset NAME or --data-file FILE.jsonl")
    found, source = read_records(task, split, data_dir, data_file)
    seen: dict[str, str] = {}
    rows, skipped = [], []
    for where, record in found:
        if not isinstance(record, DataError) and record.id in seen:  # ids key the resumable predictions file
            record = DataError(f"{where}: duplicate id {record.id!r} (first at {seen[record.id]})")
        if isinstance(record, DataError):
            if not skip_bad:
                raise record
            skipped.append(str(record))
            continue
        seen[record.id] = where
        rows.append((where, record))
    if skipped:
        warnings.warn(f"--skip-bad: skipped {len(skipped)} bad record(s) of {source}; the first: {skipped[0]}", SetLLMWarning, stacklevel=2)
    if not rows:
        raise DataError(f"{source}: no records" + (f" (all {len(skipped)} skipped as bad)" if skipped else ""))
    return subset([r for _, r in rows], limit, subset_seed), source
