"""Training data: data specs -> (set prompt, response) examples.

A spec is a benchmark name (its train split, rendered by its task file in the paper's
modified template: ``Question / Choices as a set / Answer``, SIQA with its instruction and
context and no numbering), the word ``ultrafeedback`` (instruction -> chosen response, see
:mod:`setllm.tasks.ultrafeedback`), ``ultrafeedback-judge`` (the same pairs as judge examples:
both responses as a set, the chosen one as the response, see :mod:`setllm.tasks.judge`), or a
path to a JSONL file of ``{"prompt": <set prompt>, "response": str}``, of multiple-choice rows
``{"question", "choices", "label", "context"?}`` (a ``setllm eval --data-file`` file, in the
template that command asks with), of judge rows
``{"instruction", "candidates", "label"}`` or of documents rows ``{"documents", "question",
"answer", "gold"?}`` (:mod:`setllm.tasks.documents`, the gold document at a seeded random
position); ``spec:N`` takes N examples of it.

Bad records stop with a :class:`~setllm.io.records.DataError` naming file and line, or, with
``skip_bad``, are counted and reported; never dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from ..core.text.prompt import PromptError, SetPrompt, as_prompt
from ..io.records import DataError, iter_jsonl, parse_record, subset
from ..tasks import TASKS, documents, get_task, hub_rows, judge, ultrafeedback
from ..tasks.base import data_dir_or_env, local_path

ULTRAFEEDBACK = ultrafeedback.NAME
ULTRAFEEDBACK_JUDGE = "ultrafeedback-judge"  # the same pairs as judge examples (chosen vs rejected)


@dataclass(frozen=True)
class Example:
    """One training example; ``response`` is the raw answer text (no EOS, no leading space).
    A benchmark or judge row also carries its other options or candidates as ``rejected``
    (what ``--objective preference`` ranks the response above; ``sft`` ignores them)."""

    prompt: SetPrompt
    response: str
    where: str
    rejected: tuple[str, ...] = ()

    @classmethod
    def ranked(cls, prompt: SetPrompt, options: tuple[str, ...] | list[str], label: int, where: str) -> Example:
        """``options[label]`` as the response, every other option ``rejected``."""
        return cls(prompt, options[label], where, tuple(o for i, o in enumerate(options) if i != label))


@dataclass
class LoadReport:
    """What loading kept and skipped, per spec."""

    kept: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, list[str]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = []
        for spec, n in self.kept.items():
            bad = self.skipped.get(spec, [])
            out.append(f"{spec}: {n} examples" + (f", {len(bad)} bad records skipped (first: {bad[0]})" if bad else ""))
        return out


def mc_example(obj: object, where: str, task: str | None = None) -> Example:
    """A benchmark record as its task file renders it for training (the template
    ``setllm eval`` asks with); response = the correct option, the others ``rejected``."""
    spec = get_task(task)
    record = parse_record(obj, where)
    spec.check(record, where)
    return Example.ranked(*spec.training_options(record), record.label, where)


def ultrafeedback_example(obj: object, where: str) -> Example:
    return Example(*ultrafeedback.instruction_pair(obj, where), where)


def judge_example(obj: object, where: str) -> Example | None:
    """A judge row ``{"instruction", "input"?, "candidates", "label"}`` as the judge reads it
    (:mod:`setllm.tasks.judge`), the better candidate as the response; a tie is skipped."""
    record = judge.parse_row(obj, where)
    if record is None:
        return None
    rendered = judge.JUDGE.render(record, tuple(range(len(record.choices))))
    return Example.ranked(rendered.prompt, rendered.options, record.label, where)


def judge_pair_example(obj: object, where: str) -> Example | None:
    """An UltraFeedback pair as a judge example: both responses in a seeded random order (so a
    causal judge cannot learn "the first one"), ties dropped."""
    row = judge.pair_row(obj, where)
    return None if row is None else judge_example(row, where)


def documents_example(obj: object, where: str) -> Example:
    """A documents row ``{"documents", "question", "answer", "gold"?}`` as
    :mod:`setllm.tasks.documents` asks it, the gold document moved to a seeded random position
    (seed 0 and the row's id), the answer as the response."""
    return Example(*documents.training_pair(obj, where), where)


def prompt_response_example(obj: object, where: str) -> Example | None:
    """A user record ``{"prompt": <set prompt>, "response": str}`` (the prompt in JSON form,
    or one string read as markup, :mod:`setllm.core.text.prompt`), a multiple-choice row
    ``{"question", "choices", "label", "context"?}`` (the file ``setllm eval --data-file``
    reads, rendered as it renders it: :data:`setllm.tasks.CUSTOM`'s modified template), a
    judge row ``{"instruction", "candidates", "label"}`` or a documents row ``{"documents",
    "question", "answer"}``."""
    if isinstance(obj, dict) and "candidates" in obj:
        return judge_example(obj, where)
    if isinstance(obj, dict) and "documents" in obj:
        return documents_example(obj, where)
    if isinstance(obj, dict) and "choices" in obj:
        return mc_example(obj, where)
    if not isinstance(obj, dict) or set(obj) - {"prompt", "response", "id"} or not {"prompt", "response"} <= set(obj):
        keys = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        raise DataError(f"{where}: expected {{\"prompt\": ..., \"response\": str}} or a multiple-choice row {{\"question\", "
                        f"\"choices\", \"label\"}} (as `setllm eval --data-file` reads), got {keys}")
    if not isinstance(obj["response"], str) or not obj["response"].strip():
        raise DataError(f"{where}: 'response' must be a non-empty string")
    try:
        prompt = as_prompt(obj["prompt"])  # one string is markup, as on every surface (a list or {"prompt": [...]}: JSON form)
    except PromptError as e:
        raise DataError(f"{where}: {e}") from None
    return Example(prompt, obj["response"], where)


def read_examples(path: Path, parse: Callable[[object, str], Example], skip_bad: bool, skipped: list[str]) -> list[Example]:
    """Parse every line of a JSONL file; bad lines raise, or are appended to ``skipped``."""
    return parse_all(iter_jsonl(path, errors="yield"), parse, skip_bad, skipped)


def parse_all(rows, parse: Callable[[object, str], Example], skip_bad: bool, skipped: list[str]) -> list[Example]:
    """``(where, object)`` rows parsed; a bad one (a :class:`DataError`, or one ``parse``
    raises) raises, or with ``skip_bad`` is appended to ``skipped``."""
    out = []
    for where, obj in rows:
        try:
            if isinstance(obj, DataError):
                raise obj
            example = parse(obj, where)
            if example is not None:  # None: a row with nothing to learn (a tied judge pair)
                out.append(example)
        except DataError as e:
            if not skip_bad:
                raise
            skipped.append(str(e))
    return out


def resolve_spec(spec: str, data_dir: str | None) -> tuple[Path | None, Callable[[object, str], Example]]:
    """The file a spec reads (None = the hub) and the parser of its records; ``data_dir``
    defaults to ``$SETLLM_DATA_DIR``, and a missing file says where data comes from."""
    data_dir = data_dir_or_env(data_dir)
    if spec in TASKS:
        return (local_path(TASKS[spec], "train", data_dir) if data_dir else None), partial(mc_example, task=spec)
    if spec == ULTRAFEEDBACK:
        return (local_path(judge.PAIRS, "train", data_dir) if data_dir else None), ultrafeedback_example  # both read ultrafeedback/
    if spec == ULTRAFEEDBACK_JUDGE:
        return (local_path(judge.PAIRS, "train", data_dir) if data_dir else None), judge_pair_example
    if spec.endswith(".jsonl") or Path(spec).is_file():
        return Path(spec), prompt_response_example
    raise DataError(f"unknown data spec {spec!r}: use a benchmark ({', '.join(TASKS)}), {ULTRAFEEDBACK}, {ULTRAFEEDBACK_JUDGE}, or a path to a .jsonl file")


def split_count(spec: str) -> tuple[str, int | None]:
    """``name:N`` -> (name, N): a per-spec limit that overrides ``--limit``."""
    name, sep, count = spec.rpartition(":")
    if sep and count.isdigit() and name:
        if int(count) < 1:
            raise DataError(f"data spec {spec!r}: the count after ':' must be at least 1")
        return name, int(count)
    return spec, None


def load_examples(specs: list[str], data_dir: str | None = None, limit: int | None = None, sample_seed: int | None = None,
                  skip_bad: bool = False) -> tuple[list[Example], LoadReport]:
    """All examples of ``specs`` in spec order (the trainer shuffles), ``limit`` per spec
    unless the spec says ``name:N``."""
    report = LoadReport()
    examples: list[Example] = []
    for spec in specs:
        spec, count = split_count(spec)
        path, parse = resolve_spec(spec, data_dir)
        skipped: list[str] = []
        rows = read_examples(path, parse, skip_bad, skipped) if path else _from_hub(spec, parse, skip_bad, skipped)
        rows = subset(rows, count or limit, sample_seed)
        if not rows:
            raise DataError(f"data spec {spec!r} gave no usable examples" + (f" ({len(skipped)} bad records skipped)" if skipped else ""))
        report.kept[spec], report.skipped[spec] = len(rows), skipped
        examples += rows
    return examples, report


def _from_hub(spec: str, parse, skip_bad: bool, skipped: list[str]) -> list[Example]:
    """Where the hub is reachable: the same records through ``datasets`` (``hub_rows``: one
    quick try of the hub first, so offline fails at once instead of retrying). Both UltraFeedback
    specs read the pairs' train split, as both read ``ultrafeedback/`` locally."""
    rows = hub_rows(judge.PAIRS if spec in (ULTRAFEEDBACK, ULTRAFEEDBACK_JUDGE) else TASKS[spec], "train")
    return parse_all(((f"{spec}[{i}]", obj) for i, obj in enumerate(rows)), parse, skip_bad, skipped)
