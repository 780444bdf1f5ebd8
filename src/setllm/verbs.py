"""Each verb a user calls, built once as a request with its checks: ``choose``, ``judge``,
``answer``, ``score`` (its options) and ``generate`` (its decoding options).

The library (:class:`setllm.SetLLM`), the server (``serve/``) and the CLI build a verb's
request here and only batch, format and map errors around it, so every surface accepts and
refuses the same inputs with the same words (:class:`setllm.errors.InputError`; the server's
400, or 413 for a prompt too long). What a request is to the model (its prompt encoded, the
fit rule) is :meth:`setllm.SetLLM.score_request` / :meth:`setllm.SetLLM.generate_request`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .core.forward.values import GenerationConfig
from .core.text.prompt import SetPrompt
from .core.text.templates import mc_prompt, options_of
from .core.tokens.encoding import EncodedPrompt
from .errors import InputError
from .policy import Choice, check_candidates, check_choices, check_text, option_list, pick
from .readouts import JudgeRow
from .tasks.documents import documents_prompt

ANSWER_STOP = "\n"  # an answer ends at its line's end (documents_prompt puts one document per line)


@dataclass(frozen=True)
class Choose:
    """A multiple-choice question: its options (stripped, distinct) are read as a set."""

    question: str
    options: tuple[str, ...]
    context: str | None = None

    @property
    def prompt(self) -> SetPrompt:
        return mc_prompt(self.question, list(self.options), self.context)

    def choice(self, scores, normalize: bool = False) -> Choice:
        """The answer from the options' scores (:func:`setllm.policy.pick`)."""
        return pick(scores, normalize)


def choose(question, options, context=None, name: Callable[[str], str] = str) -> Choose:
    """A checked :class:`Choose`: a non-empty question, at least two distinct non-empty options.
    ``name``: how the caller's surface names a field in its errors (the CLI: its flag)."""
    return Choose(check_text(question, name("question")), tuple(check_choices(options, name("options"))),
                  optional_text(context, name("context")))


def judge(instruction, candidates, input=None, name: Callable[[str], str] = str) -> JudgeRow:
    """A checked judge row: a non-empty instruction, at least two candidates (stripped; an empty
    one is a real candidate, scored as EOS alone)."""
    return JudgeRow(check_text(instruction, name("instruction")), tuple(check_candidates(candidates, name("candidates"))),
                    optional_text(input, name("input")))


@dataclass(frozen=True)
class Answer:
    """A question answered from documents read as one set: greedy, up to a newline."""

    documents: tuple[str, ...]
    question: str
    max_new_tokens: int = 32

    @property
    def prompt(self) -> SetPrompt:
        return documents_prompt(list(self.documents), self.question)

    @property
    def config(self) -> GenerationConfig:
        return GenerationConfig(max_new_tokens=self.max_new_tokens, stop=[ANSWER_STOP])

    @staticmethod
    def text(generated: str) -> str:
        """The answer as given: the generated line without outer whitespace."""
        return generated.strip()


def answer(documents, question, max_new_tokens: int = 32, name: Callable[[str], str] = str) -> Answer:
    """A checked :class:`Answer`: at least one non-empty document, a non-empty question and a
    positive ``max_new_tokens`` (``name``: as :func:`choose`'s)."""
    docs = option_list(documents, name("documents"))
    if not docs:
        raise InputError(f"{name('documents')}: answering needs at least one document, got none")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise InputError(f"{name('max_new_tokens')} must be at least 1, got {max_new_tokens!r}")
    return Answer(tuple(docs), check_text(question, name("question")), max_new_tokens)


@dataclass(frozen=True)
class GenerateRequest:
    """A prompt encoded and its decoding options, checked to fit the model before any forward
    (:meth:`setllm.SetLLM.generate_request`); ``config`` None generates nothing (the server's
    echo of a prompt alone)."""

    prompt: EncodedPrompt
    config: GenerationConfig | None


# transformers' generate() names: those that map onto GenerationConfig, and how.
_GREEDY = {"do_sample": False}
_TRANSFORMERS_ONLY = ("num_beams", "top_k", "repetition_penalty", "max_length", "min_new_tokens", "num_return_sequences",
                      "no_repeat_ngram_size", "length_penalty", "early_stopping", "eos_token_id", "pad_token_id")


def generation_config(**kwargs) -> GenerationConfig:
    """A :class:`GenerationConfig` from keyword arguments, as transformers' ``generate`` takes
    them: ``max_new_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop`` (also
    ``stop_strings``), and ``do_sample`` (False: greedy; True: sampling, at temperature 1
    unless one is given). Any other transformers option is refused by name, in one line."""
    if "stop_strings" in kwargs:
        kwargs["stop"] = kwargs.pop("stop_strings")
    if "do_sample" in kwargs:
        sample = kwargs.pop("do_sample")
        if not isinstance(sample, bool):
            raise InputError(f"do_sample must be True or False, got {sample!r}")
        temperature = kwargs.get("temperature")
        if not sample:
            if temperature not in (None, 0, 0.0):
                raise InputError(f"do_sample=False decodes greedily; it contradicts temperature={temperature} (drop one)")
            kwargs["temperature"] = 0.0
        elif temperature is None:
            kwargs["temperature"] = 1.0  # transformers' default temperature when sampling
        elif temperature == 0:
            raise InputError("do_sample=True samples; temperature=0 decodes greedily (drop one, or give temperature > 0)")
    known = {f.name for f in dataclasses.fields(GenerationConfig)}
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        what = "a transformers option setllm's decoding does not support" if unknown[0] in _TRANSFORMERS_ONLY else "an unknown option"
        raise InputError(f"generate: {unknown[0]!r} is {what}; it takes {', '.join(sorted(known))}, do_sample and stop_strings")
    return GenerationConfig(**kwargs)


def score_options(prompt: SetPrompt, options: Sequence[str] | None, where: str = "options") -> list[str]:
    """The options a score request scores: as given (non-empty text), or by default the
    elements of the prompt's only set, in the caller's order."""
    return option_list(options_of(prompt) if options is None else options, where)


def flag(field: str) -> str:
    """A field as the CLI names it: its flag (``max_new_tokens`` -> ``--max-new-tokens``)."""
    return "--" + field.replace("_", "-")


def optional_text(value, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InputError(f"{where} must be text or None, got {type(value).__name__}")
    return value


def rows_of(rows, call: str, fields: tuple[str, ...], required: int) -> list[tuple]:
    """The rows of ``{call}_many``: a list of tuples of ``fields``, those after the first
    ``required`` optional (None where left out)."""
    shape = f"({', '.join(fields[:required])}{''.join(f'[, {f}]' for f in fields[required:])})"
    if isinstance(rows, (str, dict)) or not isinstance(rows, Sequence):
        raise InputError(f"{call}_many takes a list of rows {shape}, got {type(rows).__name__}; for one, call {call}")
    out = []
    for i, row in enumerate(rows):
        if isinstance(row, (str, dict)) or not isinstance(row, Sequence) or not required <= len(row) <= len(fields):
            got = f"{len(row)} items" if isinstance(row, (list, tuple)) else type(row).__name__
            raise InputError(f"rows[{i}] must be a tuple {shape}, got {got}")
        out.append((*row, *[None] * (len(fields) - len(row))))
    return out


def row_field(i: int, shared: tuple[str, ...] = ()) -> Callable[[str], str]:
    """How ``{call}_many`` names a field of row ``i`` in its errors (``rows[2].options``); a
    ``shared`` argument, one for every row, by its own name."""
    return lambda field: field if field in shared else f"rows[{i}].{field}"
