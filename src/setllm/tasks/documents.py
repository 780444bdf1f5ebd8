"""Reading many documents as a set: a question answered from k documents, one of which (the
gold one) holds the answer ("lost in the middle", Liu et al. 2023).

The prompt puts every document in one set, each in the same frame, then the question::

    Documents:
    {Document: doc_1\\n, Document: doc_2\\n, ...}   (one set)
    Question: {question}
    Answer:

and the answer is generated greedily after ``Answer:`` (up to the first newline) and scored by
normalised exact match (:func:`normalise`), and by the log-likelihood of the gold answer as
the response (a smooth metric). The chat variant (``--chat`` / ``SetLLM(chat=True)``) sends the
same prompt as the user turn of the tokenizer's chat template; the answer is then the
assistant's turn. Under an invariant variant the documents' order, and so where the gold one
sits, cannot change the answer; ``causal-pe`` reads them in order (the baseline).

Rows: ``{"id"?, "documents": [str, ...], "question": str, "answer": str, "gold"?: int}``
(``gold``: index of the document holding the answer; without it, the one document whose text
contains the answer). Evaluation moves the gold document to each asked position (negative
counts from the end; the others keep their order); training moves it to a seeded random one.

Generators (seeded, no download): :func:`kv_retrieval` (Liu et al.'s synthetic key-value
retrieval: k pairs of random UUID-like keys and values, the question names one key) and
:func:`qa_lookup` (natural language: benchmark questions with their answers as statements,
the question's own statement among distractors).
"""

from __future__ import annotations

import random
import re
import string
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core.prompt import Set, SetPrompt, template_prompt
from ..io.records import DataError
from .base import register

NAME = "documents"
HEAD = "Documents:\n"
FRAME = "Document: {document}\n"
CUE = "Question: {question}\nAnswer:"

Ordering = tuple[int, ...]


@dataclass(frozen=True)
class DocRecord:
    """One question over a set of documents; ``gold`` indexes ``documents``."""

    id: str
    documents: tuple[str, ...]
    question: str
    answer: str
    gold: int


def documents_prompt(documents: Sequence[str], question: str) -> SetPrompt:
    """The prompt: every document in the same frame, one set; then the question.

    Each element ends with its own newline (no trailing space), so it tokenizes the same
    wherever it lands; a document's inner newlines become spaces so that one document is one
    line and the answer, generated up to a newline, never runs into the frame."""
    frames = [FRAME.format(document=" ".join(d.split())) for d in documents]
    return template_prompt([HEAD, Set(frames) if len(frames) > 1 else frames[0], CUE.format(question=" ".join(question.split()))])


def render(record: DocRecord, order: Ordering) -> SetPrompt:
    return documents_prompt([record.documents[i] for i in order], record.question)


def move_gold(record: DocRecord, position: int) -> Ordering:
    """The ordering with the gold document at ``position`` (negative: from the end), the other
    documents in their given order."""
    k = len(record.documents)
    index = position + k if position < 0 else position
    if not 0 <= index < k:
        raise DataError(f"question {record.id}: gold position {position} is outside its {k} documents")
    rest = [i for i in range(k) if i != record.gold]
    return tuple(rest[:index] + [record.gold] + rest[index:])


def normalise(text: str) -> str:
    """SQuAD-style answer normalisation: first line, NFKC, lower case, no punctuation, no
    articles, single spaces."""
    text = unicodedata.normalize("NFKC", text.strip().split("\n")[0]).lower()
    text = "".join(" " if ch in string.punctuation else ch for ch in text)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


# -- rows ---------------------------------------------------------------------------------
def parse_row(obj: object, where: str) -> DocRecord:
    """Validate one row; every error names ``where`` (``file:line``)."""
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for key in ("documents", "question", "answer"):
        if key not in obj:
            raise DataError(f"{where}: missing field {key!r}")
    docs = obj["documents"]
    if not isinstance(docs, list) or not docs:
        raise DataError(f"{where}: 'documents' must be a non-empty list of strings")
    if bad := [i for i, d in enumerate(docs) if not isinstance(d, str) or not d.strip()]:
        raise DataError(f"{where}: document {bad[0]} is empty or not text")
    for key in ("question", "answer"):
        if not isinstance(obj[key], str) or not obj[key].strip():
            raise DataError(f"{where}: {key!r} must be non-empty text")
    gold = obj.get("gold")
    if gold is None:
        gold = _find_gold(docs, obj["answer"], where)
    if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(docs):
        raise DataError(f"{where}: 'gold' must be an index into 'documents' (0..{len(docs) - 1}), got {gold!r}")
    return DocRecord(str(obj.get("id", where)), tuple(docs), obj["question"].strip(), obj["answer"].strip(), gold)


def _find_gold(docs: list[str], answer: str, where: str) -> int:
    hits = [i for i, d in enumerate(docs) if normalise(answer) in normalise(d)]
    if len(hits) != 1:
        raise DataError(f"{where}: no 'gold' and the answer is in {len(hits)} documents; add 'gold' (the index of the document holding it)")
    return hits[0]


def training_pair(obj: object, where: str, seed: int = 0) -> tuple[SetPrompt, str]:
    """A row as a training example: the gold document moved to a position drawn from
    ``random.Random(f"{seed}:{id}")`` (so a causal model cannot learn "it is always first"),
    the answer as the response."""
    record = parse_row(obj, where)
    position = random.Random(f"{seed}:{record.id}").randrange(len(record.documents))
    return render(record, move_gold(record, position)), record.answer


# -- gold positions -----------------------------------------------------------------------
def parse_positions(text: str | None) -> list[int] | None:
    """``"0,4,9,-1"`` -> ``[0, 4, 9, -1]`` (None: every position of each row)."""
    if text is None or text == "":
        return None
    try:
        positions = [int(p) for p in str(text).split(",") if p.strip()]
    except ValueError:
        raise DataError(f"--gold-positions takes comma-separated integers (e.g. 0,4,9,-1), got {text!r}") from None
    if not positions or len(set(positions)) != len(positions):
        raise DataError(f"--gold-positions needs distinct integers, got {text!r}")
    return positions


def row_positions(record: DocRecord, positions: list[int] | None) -> list[tuple[str, Ordering]]:
    """``(key, ordering)`` per asked position; ``key`` is the position as asked ("-1")."""
    asked = positions if positions is not None else list(range(len(record.documents)))
    return [(str(p), move_gold(record, p)) for p in asked]


def position_accuracy(rows: Sequence[dict], keys: Sequence[str]) -> dict:
    """Per-position accounting over finished rows (each with ``positions``, ``correct``,
    ``answer_logprob`` and ``one_run``): accuracy (%) and mean answer log-likelihood per gold
    position, the best-minus-worst gap and the mean over positions. A one-run row (an
    invariant variant) stands for every position by construction."""
    right: dict[str, list[bool]] = {k: [] for k in keys}
    logp: dict[str, list[float]] = {k: [] for k in keys}
    for row in rows:
        got = dict(zip(row["positions"], zip(row["correct"], row["answer_logprob"])))
        for k in keys:
            c, lp = got[k] if not row["one_run"] else (row["correct"][0], row["answer_logprob"][0])
            right[k].append(bool(c))
            logp[k].append(lp)
    acc = {k: round(100.0 * sum(v) / len(v), 4) for k, v in right.items() if v}
    return {
        "accuracy_by_gold_position": acc,
        "answer_logprob_by_gold_position": {k: round(sum(v) / len(v), 4) for k, v in logp.items() if v},
        "gold_position_gap": round(max(acc.values()) - min(acc.values()), 4) if acc else None,
        "gold_position_mean": round(sum(acc.values()) / len(acc), 4) if acc else None,
    }


@dataclass(frozen=True)
class DocumentsTask:
    """The task as :func:`setllm.tasks.get_task` / :func:`~setllm.tasks.load_records` read it
    (a user's file via ``--data-file``, or ``<data_dir>/documents/<split>.jsonl``)."""

    name: str = NAME
    column: str = "Documents"
    eval_split: str = "test"
    hub: None = None
    needs_context: bool = False
    kind: str = "documents"
    folder: str | None = None
    parse: Callable[[object, str], DocRecord] = parse_row
    position: int = 99

    def check(self, record: DocRecord, where: str) -> None:  # parse_row checks everything
        return None


TASK = register(DocumentsTask())
