"""Multiple-choice questions in several training frames: one seeded generator.

A choose adapter trained on the paper's template alone learns that template: on the
held-out template (:data:`setllm.core.text.templates.HELD_OUT`) the shipped one kept about half
its gain (docs/experiments/training-adapters.md). :data:`FRAMES` asks the same records in other
wordings, each with the options as one set; a mix drawn from them and the task's own
template (:data:`MODIFIED`) is meant to teach choosing among a set rather than one template
(measured with the shipped recipe: +1.7 points on the held-out template, -0.6 on the trained
one; docs/results.md, "The choose recipe with framed questions"). The
held-out template stays in no training mix, and no frame shares a word longer than three
letters with it (tested), so a measurement on it is still one on an unseen format.

``setllm data mc-framed --task piqa --n 2400 --seed 42 --out F.jsonl``
writes ``{"id", "prompt", "response"}`` rows that ``setllm train --data F.jsonl``
reads.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..core.text.prompt import SetPrompt
from ..core.text.templates import Frame
from ..io.records import DataError, MCRecord, subset
from ..tasks.base import MCTask
from .base import GeneratorConfig

MODIFIED = "modified"  # the task's own training template (the paper's), drawn like a frame
FRAMES: tuple[Frame, ...] = (
    Frame("options", "Passage: {context}\n", "Problem: {question}\nOptions:\n", "* {choice}\n", "Selected option:"),
    Frame("candidates", "Situation: {context}\n", "{question}\n\nCandidates:\n", "> {choice}\n", "Best candidate:"),
    Frame("replies", "Story: {context}\n", "Inquiry: {question}\nReplies:\n", "{choice}\n", "Reply:"),
    Frame("alternatives", "Text: {context}\n", "Exam item: {question}\nAlternatives:\n", "+ {choice}\n", "Chosen alternative:"),
    Frame("pick", "Setting: {context}\n", "{question}\nPick one:\n", "[ ] {choice}\n", "Pick:"),
)
FRAME_NAMES: tuple[str, ...] = (MODIFIED, *(f.name for f in FRAMES))


def framed_pair(task: MCTask, record: MCRecord, name: str) -> tuple[SetPrompt, str]:
    """The record as a training example in frame ``name``, options in the dataset's order."""
    if name == MODIFIED:
        return task.training_pair(record)
    frame = next(f for f in FRAMES if f.name == name)
    return frame.prompt(record.question, list(record.choices), record.context), record.choices[record.label]


def mc_framed(task: MCTask, records: list[MCRecord], n: int | None = None, seed: int = 0) -> list[dict]:
    """A seeded sample of ``n`` records (all if None), each in a frame of :data:`FRAME_NAMES`
    drawn with ``random.Random(seed)``, the correct option as the response: ``setllm train``
    data rows, the frame after the record's id (``"<id>:<frame>"``)."""
    rng = random.Random(seed)
    rows = []
    for record in subset(records, n, seed):
        name = rng.choice(FRAME_NAMES)
        prompt, response = framed_pair(task, record, name)
        rows.append({"id": f"{record.id}:{name}", **prompt.to_json(), "response": response})
    return rows


@dataclass
class MCFramedConfig(GeneratorConfig):
    """``setllm data mc-framed``: a benchmark's questions in several training frames."""

    n: int = field(default=0, metadata={"help": "questions to draw (0: all)", "metavar": "N"})
    task: str = field(default="", metadata={"help": "the benchmark (its records as --data-dir holds them)", "metavar": "NAME"})
    data_dir: str = field(default="", metadata={"help": "folder with <task>/<split>.jsonl (default: $SETLLM_DATA_DIR, else the hub)", "metavar": "DIR"})
    split: str = field(default="train", metadata={"help": "the split to draw from", "metavar": "SPLIT"})

    min_n = 0

    def check(self) -> None:
        if not self.task or not self.out:
            missing = [f"--{f}" for f in ("task", "out") if not getattr(self, f)]
            raise DataError(f"missing {', '.join(missing)}: e.g. --task piqa --out piqa-framed.jsonl")
