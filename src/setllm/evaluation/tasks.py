"""The four benchmarks as small specs: how a record becomes a prompt and the options scored.

Each spec has the paper's two templates (Egressy & Stühmer 2025, Appendix D.3, Tables 7
and 9). Their words are the paper's; the line breaks are ours, because the text of the
appendix available to us had lost them (see docs/evaluation.md):

* ``original``: the question alone, each option scored as a continuation of
  ``Question: {question}\\nAnswer:``. SIQA's original prompt instead lists the options
  numbered ``(0) .. (2)`` and the response is the number, ``(i)``.
* ``modified``: the options in the prompt as one set, the response is the option's text
  (:func:`setllm.templates.mc_prompt`, the template the training data uses). SIQA keeps its
  instruction and context and drops the numbering, which would order the options.

A template renders a record under an ordering (see :mod:`.orderings`); the option picked at
position ``p`` is option ``ordering[p]`` of the dataset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..data import BENCHMARKS, DataError, MCRecord, iter_jsonl, load_benchmark, parse_record, subset
from ..prompt import Set, SetPrompt, as_prompt
from ..templates import mc_prompt, original_prompt
from .orderings import Ordering

TEMPLATES = ("original", "modified")


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
    """

    render: Callable[[MCRecord, Ordering], Rendered]
    shows_options: bool
    options_as_set: bool


@dataclass(frozen=True)
class TaskSpec:
    """A benchmark: its name, the paper's column title, its two templates, record checks."""

    name: str
    column: str
    original: Template
    modified: Template
    needs_context: bool = False

    def template(self, name: str) -> Template:
        if name not in TEMPLATES:
            raise ValueError(f"unknown template {name!r}; choose one of: {', '.join(TEMPLATES)}")
        return getattr(self, name)

    def check(self, record: MCRecord, where: str) -> None:
        if self.needs_context and not record.context:
            raise DataError(f"{where}: {self.name} records need a non-empty 'context'")

    @property
    def eval_split(self) -> str:
        return BENCHMARKS[self.name].eval_split if self.name in BENCHMARKS else "test"


def _shown(record: MCRecord, order: Ordering) -> list[str]:
    return [record.choices[i] for i in order]


def _continuations(record: MCRecord, order: Ordering) -> Rendered:
    # No options in the prompt: each is scored as the answer, " {option}" after "Answer:".
    return Rendered(original_prompt(record.question, record.context), _shown(record, order))


def _as_set(record: MCRecord, order: Ordering) -> Rendered:
    return Rendered(mc_prompt(record.question, _shown(record, order), record.context), _shown(record, order))


SIQA_HEAD = "Question: Given the context, answer correctly the question.\nContext: {context}\nQuestion: {question}\n\nChoices:\n"


def _siqa_numbered(record: MCRecord, order: Ordering) -> Rendered:
    # The numbers order the options: this template is order-sensitive for every variant.
    lines = "".join(f"({i}) {c}\n" for i, c in enumerate(_shown(record, order)))
    head = SIQA_HEAD.format(context=record.context, question=record.question)
    return Rendered(as_prompt([head + lines + "Answer:"]), [f"({i})" for i in range(len(order))])


def _siqa_set(record: MCRecord, order: Ordering) -> Rendered:
    # Each element ends with its own newline and "Answer:" follows the set (see mc_prompt).
    head = SIQA_HEAD.format(context=record.context, question=record.question)
    shown = _shown(record, order)
    return Rendered(as_prompt([head, Set([f"{c}\n" for c in shown]), "Answer:"]), shown)


CONTINUATION = Template(_continuations, shows_options=False, options_as_set=False)
OPTION_SET = Template(_as_set, shows_options=True, options_as_set=True)

TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in [
        TaskSpec("piqa", "PIQA", CONTINUATION, OPTION_SET),
        TaskSpec("arc_challenge", "ARC", CONTINUATION, OPTION_SET),
        TaskSpec("commonsense_qa", "CSQA", CONTINUATION, OPTION_SET),
        TaskSpec("social_iqa", "SIQA", Template(_siqa_numbered, True, False), Template(_siqa_set, True, True), needs_context=True),
    ]
}
# A user's own JSONL of {"question", "choices", "label", "context"?}: the generic templates.
CUSTOM = TaskSpec("custom", "custom", CONTINUATION, OPTION_SET)


def get_task(name: str | None) -> TaskSpec:
    if name is None or name == CUSTOM.name:
        return CUSTOM
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; choose one of: {', '.join(TASKS)}") from None


def load_records(task: TaskSpec, split: str | None = None, data_dir: str | None = None, data_file: str | None = None,
                 limit: int | None = None, subset_seed: int | None = None) -> tuple[list[MCRecord], str]:
    """The labelled records to evaluate and where they came from.

    From ``data_file`` (a user's JSONL), else ``data_dir/<name>/<split>.jsonl``, else the HF
    hub. Malformed records and duplicate ids raise :class:`DataError` naming file and line.
    """
    split = split or task.eval_split
    if data_file:
        path = Path(data_file)
    elif data_dir:
        path = Path(data_dir) / task.name / f"{split}.jsonl"
        if not path.exists():
            have = sorted(p.stem for p in (Path(data_dir) / task.name).glob("*.jsonl"))
            raise DataError(f"{path}: no such file (splits here: {', '.join(have) or 'none'})")
    elif task is CUSTOM:
        raise ValueError("pass --dataset (one of: " + ", ".join(TASKS) + ") or --data-file FILE.jsonl")
    else:
        records = load_benchmark(task.name, split)
        return _checked(task, [(f"{task.name}[{i}]", r) for i, r in enumerate(records)], limit, subset_seed), f"hub:{task.name}/{split}"
    rows = [(where, parse_record(obj, where)) for where, obj in iter_jsonl(path)]
    return _checked(task, rows, limit, subset_seed), str(path.resolve())


def _checked(task: TaskSpec, rows: list[tuple[str, MCRecord]], limit: int | None, seed: int | None) -> list[MCRecord]:
    seen: dict[str, str] = {}
    for where, record in rows:
        if record.label is None:
            raise DataError(f"{where}: missing 'label' (an unlabelled split cannot be scored)")
        task.check(record, where)
        if record.id in seen:  # ids key the resumable predictions file
            raise DataError(f"{where}: duplicate id {record.id!r} (first at {seen[record.id]})")
        seen[record.id] = where
    if not rows:
        raise DataError("no records to evaluate")
    return subset([r for _, r in rows], limit, seed)
