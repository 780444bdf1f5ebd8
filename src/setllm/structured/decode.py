"""A :class:`setllm.structured.plan.Plan` run on a reader: each step's text after the prompt
and the steps before it. A :class:`Pick` scores its values through the reader's one scoring
driver (:meth:`setllm.reader.Reader.score_encoded`), each after the same text, and writes the
best (:func:`setllm.policy.pick`: equal scores go by text), as do an array's places
(:class:`Items`, :class:`Objects`: the end against what may come next); a :class:`Free` piece decodes on
the project's loop (:func:`setllm.core.forward.generation.generate_tokens`) with a grammar's guide
masking the logits. A piece's prefix is the prompt and the answer so far read as one prompt,
whose answer text is plain text after the prompt's sets.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..core.forward import generation, scoring
from ..core.forward.runtime import prompt_length
from ..core.forward.values import GenerationConfig
from ..core.layout.positions import NOT_IN_SET
from ..core.text.prompt import PromptLike, as_prompt
from ..core.tokens.batch import collate
from ..core.tokens.encoding import EncodedPrompt
from ..policy import pick
from .engine import Guide
from .plan import JSON_SEPARATORS, Free, Items, Objects, Pick, Plan, Step, Text, plan
from .shown import with_shown
from .spec import AnswerError, Spec


@dataclass(frozen=True)
class Answer:
    """A structured answer: its text, its token ids, why it ended (``stop``: complete;
    ``length``: ``max_new_tokens`` ran out first, as OpenAI says it) and the prompt's length."""

    text: str
    token_ids: list[int]
    finish_reason: str
    prompt_tokens: int = 0

    def value(self, spec: Spec):
        """The answer parsed (:meth:`Spec.parse`); an :class:`AnswerError` if it is incomplete."""
        if self.finish_reason != "stop":
            raise AnswerError(f"max_new_tokens ran out before the answer was complete ({len(self.token_ids)} tokens: "
                              f"{self.text[:60]!r}...); give more", self.text)
        return spec.parse(self.text)


def answer(reader, prompt: PromptLike | EncodedPrompt, spec: Spec, config: GenerationConfig, show: bool = False,
           on_piece: Callable[[str], None] | None = None) -> Answer:
    """The answer to ``prompt`` under ``spec`` (``show``: the constraint shown before the prompt,
    :mod:`.shown`): the one structured reading of the library, the CLI and the server."""
    if show:  # else the prompt as given: an EncodedPrompt (the server's, sized already) is read as is
        prompt = with_shown(as_prompt(prompt), spec, reader.exact)
    request = reader.generate_request(prompt, config)
    return run(reader, request.prompt, plan(spec, reader.exact), config, on_piece)


def run(reader, prompt: EncodedPrompt, plan: Plan, config: GenerationConfig, on_piece: Callable[[str], None] | None = None) -> Answer:
    """The answer ``plan`` makes after ``prompt`` under ``reader``, at most
    ``config.max_new_tokens`` tokens; ``on_piece(text)`` with each piece as it is decided (the
    pieces join to the answer's text)."""
    ids: list[int] = []
    finish = "stop"
    for piece, complete in _pieces(reader, prompt, plan.steps, config, ids):
        if on_piece is not None and piece:
            on_piece(piece)
        if not complete:
            finish = "length"
            break
    return Answer(reader.tokenizer.decode(ids, skip_special_tokens=True), ids, finish, len(prompt))


def _pieces(reader, prompt: EncodedPrompt, steps: tuple[Step, ...], config: GenerationConfig, ids: list[int]) -> Iterator[tuple[str, bool]]:
    """Each step's text and whether it was completed, up to the first that was not; ``ids``
    grows with each."""
    for step in _expanded(reader, prompt, steps, ids):
        left = config.max_new_tokens - len(ids)
        if isinstance(step, Text):
            new, complete = text_ids(reader, step.text), True
        elif isinstance(step, Pick):
            new, complete = text_ids(reader, _pick(reader, prefix(prompt, ids), step)), True
        elif isinstance(step, Items):
            new, complete = _items(reader, prompt, ids, step, left)
        else:
            new, complete = _free(reader, prefix(prompt, ids), step, config, left)
        complete = complete and len(new) <= left
        new = new[:left]
        ids += new
        yield reader.tokenizer.decode(new, skip_special_tokens=True), complete
        if not complete:
            return


def _expanded(reader, prompt: EncodedPrompt, steps: tuple[Step, ...], ids: list[int]) -> Iterator[Step]:
    """``steps``, each :class:`Objects` as the steps it decides. Lazily: a decision is made
    when the step before it is written (``ids`` grows in between), and none after a step the
    tokens cut."""
    for step in steps:
        if isinstance(step, Objects):
            yield from _objects(reader, prompt, step, ids)
        else:
            yield step


def _objects(reader, prompt: EncodedPrompt, step: Objects, ids: list[int]) -> Iterator[Step]:
    """An array of objects decided place by place (:class:`Objects`): each place a :class:`Pick`
    of the end and the next item's opening, then the item's other steps."""
    yield Text("[")
    for written in itertools.count():
        room = step.max_items is None or written < step.max_items
        ends = ["]"] if written >= step.min_items or not room else []
        more = [(JSON_SEPARATORS[0] if written else "") + step.item[0].text] if room else []
        options = tuple(sorted(ends + more))
        best = options[0] if len(options) == 1 else _pick(reader, prefix(prompt, ids), Pick(options, step.path))
        yield Text(best)
        if best == "]":
            return
        yield from _expanded(reader, prompt, step.item[1:], ids)


def text_ids(reader, text: str) -> list[int]:
    """Text as the answer's tokens: tokenized alone (the model sees it as if it had written it)."""
    return reader.tokenizer.encode(text, add_special_tokens=False)


def prefix(prompt: EncodedPrompt, ids: list[int]) -> EncodedPrompt:
    """The prompt and the answer so far, read as one prompt (the answer is plain text)."""
    n = len(ids)
    return EncodedPrompt(prompt.input_ids + ids, prompt.set_ids + [NOT_IN_SET] * n, prompt.element_ids + [NOT_IN_SET] * n, prompt.prompt)


def _pick(reader, prefix: EncodedPrompt, step: Pick) -> str:
    """The best of ``step.values`` as the continuation of ``prefix``: each scored alone after it
    (with EOS where the value ends the answer, as ``choose`` scores an option)."""
    eos = step.last and reader.options.eos
    options = [text_ids(reader, v) + ([reader.tokenizer.eos_token_id] if eos else []) for v in step.values]
    request = reader.encoded_request(prefix, options, step.path)
    [scores] = reader.score_encoded([request])
    return pick(scoring.to_option_scores(step.values, scores)).answer


def _items(reader, prompt: EncodedPrompt, ids: list[int], step: Items, left: int) -> tuple[list[int], bool]:
    """The tokens of an array decided place by place (:class:`Items`), each place a :class:`Pick`
    of the end and the values still allowed; and whether it was closed within ``left`` tokens."""
    new, chosen = text_ids(reader, "["), []
    while len(new) <= left:
        room = step.max_items is None or len(chosen) < step.max_items
        options = [v for v in step.values if not (step.unique and v in chosen)] if room else []
        ends = ["]"] if len(chosen) >= step.min_items or not options else []
        sep = JSON_SEPARATORS[0] if chosen else ""
        best = ends[0] if not options else _pick(reader, prefix(prompt, ids + new), Pick((*ends, *(sep + v for v in options)), step.path))
        new += text_ids(reader, best)
        if best == "]":
            return new, len(new) <= left
        chosen.append(best[len(sep):])
    return new, False


def _free(reader, prefix: EncodedPrompt, step: Free, config: GenerationConfig, left: int) -> tuple[list[int], bool]:
    """Tokens decoded under ``step.grammar`` (its EOS dropped) and whether the grammar was completed."""
    if left <= 0:
        return [], False
    config = dataclasses.replace(config, max_new_tokens=left, stop=[])
    with reader._running() as model:
        guide = Guide(reader.tokenizer, getattr(model.config, "vocab_size", None) or len(reader.tokenizer), step.grammar)
        batch = collate([prefix], reader.variant.positions, reader.pad_id, length=prompt_length(model, len(prefix)))
        [(_, tokens)] = generation.generate_tokens(model, reader.tokenizer, reader.variant, batch, config, processor=guide)
    stop = generation.eos_ids(reader.model, reader.tokenizer)
    ended = bool(tokens) and tokens[-1] in stop  # the grammar let the answer end there, and the model ended it
    return [t for t in tokens if t not in stop], ended or guide.matcher.is_stopped()
