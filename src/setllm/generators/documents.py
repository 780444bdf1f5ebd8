"""Documents read as a set, generated: Liu et al. (2023)'s key-value retrieval and a
benchmark's questions turned into statements (``setllm data kv-retrieval`` / ``qa-lookup``).
The rows are what :mod:`setllm.tasks.documents` reads."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..io.records import DataError, MCRecord
from ..tasks.documents import normalise
from .base import GeneratorConfig, at_least


@dataclass
class KVRetrievalConfig(GeneratorConfig):
    """``setllm data kv-retrieval``: Liu et al. (2023)'s synthetic key-value retrieval."""

    pairs: int = field(default=20, metadata={"help": "key-value pairs (documents) per question", "metavar": "K"})
    key_length: int = field(default=32, metadata={"help": "hex digits per key (32: a UUID, written 8-4-4-4-12)", "metavar": "L"})
    value_length: int = field(default=32, metadata={"help": "hex digits per value (32: a UUID)", "metavar": "L"})

    def check(self) -> None:
        at_least(pairs=(self.pairs, 1), key_length=(self.key_length, 4), value_length=(self.value_length, 1))


def random_hex(rng: random.Random, length: int) -> str:
    """``length`` random hex digits; 32 of them written as a UUID (8-4-4-4-12)."""
    if length == 32:
        return str(uuid.UUID(int=rng.getrandbits(128)))
    return format(rng.getrandbits(4 * length), f"0{length}x")


def distinct(draw: Callable[[random.Random], str], rng: random.Random, k: int) -> list[str]:
    """``k`` different draws, in the order drawn (repeats are drawn again)."""
    out: list[str] = []
    for _ in range(100 * k):  # a small space (24 words) runs out: say so instead of looping
        if len(out) == k:
            return out
        if (x := draw(rng)) not in out:
            out.append(x)
    raise DataError(f"cannot draw {k} distinct values of this kind; use fewer documents")


def kv_retrieval(pairs: int = 20, n: int = 500, seed: int = 0, key_length: int = 32, value_length: int = 32) -> list[dict]:
    """``n`` rows of ``pairs`` documents ``"key": "value"``; the question names one key (drawn
    uniformly, so the gold position is uniform too) and the answer is its value."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        keys = distinct(lambda r: random_hex(r, key_length), rng, pairs)  # the question must have one answer
        values = [random_hex(rng, value_length) for _ in keys]
        gold = rng.randrange(pairs)
        rows.append({"id": f"kv{pairs}-s{seed}-{i}", "documents": [f'"{k}": "{v}"' for k, v in zip(keys, values)],
                     "question": f'What is the value of key "{keys[gold]}"?', "answer": values[gold], "gold": gold})
    return rows


@dataclass
class QALookupConfig(GeneratorConfig):
    """``setllm data qa-lookup``: natural-language documents from a benchmark (``--data-dir``,
    ``$SETLLM_DATA_DIR`` or the hub, as ``setllm eval`` reads it)."""

    source: str = field(default="commonsense_qa", metadata={"help": "benchmark whose labelled questions become documents", "metavar": "NAME"})
    split: str = field(default="validation", metadata={"help": "its split", "metavar": "S"})
    data_dir: str = field(default="", metadata={
        "help": "folder of <source>/<split>.jsonl; default: $SETLLM_DATA_DIR if set, else the HF hub", "metavar": "D"})
    docs: int = field(default=10, metadata={"help": "documents per question", "metavar": "K"})

    def check(self) -> None:
        at_least(docs=(self.docs, 2))


STATEMENT = 'The answer to "{question}" is: {answer}.'


def qa_lookup(records: Sequence[MCRecord], docs: int = 10, n: int = 500, seed: int = 0) -> list[dict]:
    """Each labelled question's answer as a statement, among ``docs - 1`` statements of other
    questions; the question is asked again and its answer is the gold statement's answer.
    Distractors never share the gold answer, so exactly one document answers."""
    rng = random.Random(seed)
    pool = [r for r in records if r.label is not None and "\n" not in r.choices[r.label]]
    if len(pool) < docs:
        raise DataError(f"{len(pool)} usable questions, fewer than --docs {docs}")
    picked = rng.sample(range(len(pool)), min(n, len(pool)))
    rows = []
    for i in picked:
        gold = pool[i]
        answer = gold.choices[gold.label].strip()
        others: list[MCRecord] = []
        while len(others) < docs - 1:
            r = pool[rng.randrange(len(pool))]
            if r.id != gold.id and r not in others and normalise(r.choices[r.label]) != normalise(answer):
                others.append(r)
        order = [gold, *others]
        rng.shuffle(order)
        documents = [STATEMENT.format(question=" ".join(r.question.split()), answer=r.choices[r.label].strip()) for r in order]
        rows.append({"id": f"{gold.id}-k{docs}-s{seed}", "documents": documents, "question": " ".join(gold.question.split()),
                     "answer": answer, "gold": order.index(gold)})
    return rows
