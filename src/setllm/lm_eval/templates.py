"""``doc_to_text`` / ``doc_to_choice`` / ``doc_to_target`` of the shipped task YAMLs.

Each renders a dataset row (a hub row, or a local record: :func:`as_record`) with setllm's
own *modified* template (:mod:`setllm.tasks`: the options as one set in the prompt, each
option's text scored) and writes the prompt as inline markup, so lm-eval's ``--model
setllm`` reads exactly the prompt ``setllm eval --template modified`` reads, and the
continuation lm-eval scores (``" " + option``) is the response setllm scores. A YAML names
them as ``!function setllm.lm_eval.templates.NAME``.
"""

from __future__ import annotations

from ..core.text.prompt import SetPrompt
from ..io.records import parse_record
from ..tasks import TASKS
from ..tasks.base import OPTION_SET, Rendered


def markup(prompt: SetPrompt) -> str:
    """A prompt as inline markup that keeps newlines readable (:func:`setllm.core.text.prompt.to_markup`
    escapes them too): only backslashes, braces and bars are escaped."""

    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("{", "\\{").replace("}", "\\}").replace("|", "\\|")

    return "".join(esc(s) if isinstance(s, str) else "{{" + "||".join(map(esc, s.elements)) + "}}" for s in prompt.segments)


def render(task: str, doc: dict) -> Rendered:
    """A row of one of the paper's tasks under its modified template, options in the data's order."""
    return _render_record(as_record(task, doc), TASKS[task].modified.render)


def as_record(task: str, doc: dict) -> dict:
    """A hub row normalised to setllm's record format, or a row already in it (a local copy
    read through ``SETLLM_DATA_DIR``, :mod:`setllm.lm_eval.local`) as it is: only records
    carry ``choices`` as a list of strings (the hub's ARC and CSQA rows carry a dict)."""
    return doc if isinstance(doc.get("choices"), list) else TASKS[task].hub.normalise(doc)


def records(doc: dict) -> Rendered:
    """A row in setllm's record format (``question``, ``choices``, ``label``, ``context``?)."""
    return _render_record(doc, OPTION_SET.render)


def lettered(doc: dict) -> Rendered:
    """An MMLU-style row (``question``, ``choices``, ``answer`` index): the choices as a set."""
    return records({"question": doc["question"].strip(), "choices": doc["choices"], "label": doc["answer"]})


def _render_record(row: dict, render_fn) -> Rendered:
    record = parse_record(row, "doc", require_label=False)
    return render_fn(record, tuple(range(len(record.choices))))


def _text_and_choices(task: str):
    """``doc_to_text`` and ``doc_to_choice`` of one shipped task (the names the YAMLs use)."""
    return (lambda doc: markup(render(task, doc).prompt)), (lambda doc: render(task, doc).options)


arc_challenge_text, arc_challenge_choices = _text_and_choices("arc_challenge")
piqa_text, piqa_choices = _text_and_choices("piqa")
commonsense_qa_text, commonsense_qa_choices = _text_and_choices("commonsense_qa")
social_iqa_text, social_iqa_choices = _text_and_choices("social_iqa")


def records_text(doc: dict) -> str:
    return markup(records(doc).prompt)


def records_choices(doc: dict) -> list[str]:
    return records(doc).options


def lettered_text(doc: dict) -> str:
    return markup(lettered(doc).prompt)


def lettered_choices(doc: dict) -> list[str]:
    return lettered(doc).options


def arc_challenge_target(doc: dict) -> int:
    return as_record("arc_challenge", doc)["label"]


def commonsense_qa_target(doc: dict) -> int:
    return as_record("commonsense_qa", doc)["label"]


def social_iqa_target(doc: dict) -> int:
    return as_record("social_iqa", doc)["label"]
