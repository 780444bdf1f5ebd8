"""Multiple-choice prompt templates.

*modified* (the paper's Set-LLM template): the options sit in the prompt as a set, the
response is the chosen option. *original*: the question alone, options scored as
continuations (the classic lm-eval way, which needs no set at all). *held-out*: the options
as a set again, in wording no training mix uses (:func:`held_out_prompt`), to measure whether
an adapter learned to choose or learned one template.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...errors import InputError
from .prompt import Set, SetPrompt, template_prompt


@dataclass(frozen=True)
class Frame:
    """One wording of a question with its options as a set: ``context`` (a line before the
    question, for records that have one), ``head`` ("{question}"), ``element`` ("{choice}",
    one per option) and ``tail``.

    Each element ends with its own newline, so every element is the same kind of line
    wherever it lands. Nothing ends in a space or in two newlines: byte-level BPE would
    merge those with the next token in joined text, and separate tokenization would differ.
    The tail ends in ":", the response follows as " <option>" (:func:`response_text`).
    """

    name: str
    context: str
    head: str
    element: str
    tail: str

    def prompt(self, question: str, choices: Sequence[str], context: str | None = None) -> SetPrompt:
        head = self.head.format(question=question)
        if context:
            head = self.context.format(context=context) + head
        return template_prompt([head, Set([self.element.format(choice=c) for c in choices]), self.tail])


PAPER = Frame("modified", "Context: {context}\n", "Question: {question}\n\nChoices:\n", "{choice}\n", "Answer:")
# Written apart from PAPER (no line or word of its frame in common) and never trained on.
HELD_OUT = Frame("held-out", "Background: {context}\n", "Q: {question}\nPossible answers:\n", "- {choice}\n", "The correct answer is:")


def mc_prompt(question: str, choices: Sequence[str], context: str | None = None) -> SetPrompt:
    """``Question: ...\\n\\nChoices:\\n{c1\\n, c2\\n, ...}Answer:`` (:data:`PAPER`)."""
    return PAPER.prompt(question, choices, context)


def held_out_prompt(question: str, choices: Sequence[str], context: str | None = None) -> SetPrompt:
    """``Q: ...\nPossible answers:\n{- c1\n, - c2\n, ...}The correct answer is:`` (:data:`HELD_OUT`)."""
    return HELD_OUT.prompt(question, choices, context)


def original_prompt(question: str, context: str | None = None) -> SetPrompt:
    """``Question: ...\\nAnswer:`` with no options in the prompt."""
    head = f"Question: {question}\nAnswer:"
    return template_prompt([f"{context}\n{head}" if context else head])


def response_text(option: str, after: str = ":") -> str:
    """The response for an option. A leading space joins it to ``Answer:`` as in running
    text (" Paris" is one token; "Paris" after ":" would be another)."""
    return option if after[-1:].isspace() or not after else f" {option}"


def options_of(prompt: SetPrompt) -> list[str]:
    """Default options: the elements of the prompt's only set, stripped of whitespace."""
    sets = prompt.sets
    if len(sets) != 1:
        raise InputError(f"options default to the elements of the prompt's set, but it has {len(sets)} sets; pass options explicitly")
    return [e.strip() for e in sets[0].elements]
