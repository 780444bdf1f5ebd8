"""Multiple-choice prompt templates.

*modified* (the paper's Set-LLM template): the options sit in the prompt as a set, the
response is the chosen option. *original*: the question alone, options scored as
continuations (the classic lm-eval way, which needs no set at all). *held-out*: the options
as a set again, in wording no training mix uses (:func:`held_out_prompt`), to measure whether
an adapter learned to choose or learned one template.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import InputError
from .prompt import Set, SetPrompt, template_prompt


def mc_prompt(question: str, choices: Sequence[str], context: str | None = None) -> SetPrompt:
    """``Question: ...\\n\\nChoices:\\n{c1\\n, c2\\n, ...}Answer:``.

    Each element ends with its own newline, so every element is the same kind of line
    wherever it lands. Nothing ends in a space or in two newlines: byte-level BPE would
    merge those with the next token in joined text, and separate tokenization would differ.
    """
    head = f"Question: {question}\n\nChoices:\n"
    if context:
        head = f"Context: {context}\n{head}"
    return template_prompt([head, Set([f"{c}\n" for c in choices]), "Answer:"])


def held_out_prompt(question: str, choices: Sequence[str], context: str | None = None) -> SetPrompt:
    """``Q: ...\nPossible answers:\n{- c1\n, - c2\n, ...}The correct answer is:``, written apart
    from :func:`mc_prompt` (no line or word of its frame in common) and never trained on."""
    head = f"Q: {question}\nPossible answers:\n"
    if context:
        head = f"Background: {context}\n{head}"
    return template_prompt([head, Set([f"- {c}\n" for c in choices]), "The correct answer is:"])


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
