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
contains the answer). ``"answer": null`` marks a question no document answers: evaluation
records what the reader says to it (:func:`unanswered_kind`), training refuses it. Optional
``set`` (rows asking over the same documents) and ``answer_type`` (``person``, ``place``,
``year``, ``number``, ``time``, ``name``, ``kind``) let :func:`failure_modes` count one answer
given to several questions and answers of the wrong type. Evaluation moves the gold document to each asked position (negative
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

from ..core.text.prompt import Set, SetPrompt, template_prompt
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
    answer: str  # "" for a question no document answers (gold is then None)
    gold: int | None
    set: str | None = None
    answer_type: str | None = None

    @property
    def answerable(self) -> bool:
        return self.gold is not None


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
    if record.gold is None:  # nothing to move: the documents as given
        return tuple(range(k))
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
        if key == "answer" and obj[key] is None:
            continue  # a question no document answers
        if not isinstance(obj[key], str) or not obj[key].strip():
            raise DataError(f"{where}: {key!r} must be non-empty text{' (or null: no document answers it)' if key == 'answer' else ''}")
    extra = {k: obj[k] for k in ("set", "answer_type") if obj.get(k) is not None}
    if obj["answer"] is None:
        return DocRecord(str(obj.get("id", where)), tuple(docs), obj["question"].strip(), "", None, **extra)
    gold = obj.get("gold")
    if gold is None:
        gold = _find_gold(docs, obj["answer"], where)
    if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(docs):
        raise DataError(f"{where}: 'gold' must be an index into 'documents' (0..{len(docs) - 1}), got {gold!r}")
    return DocRecord(str(obj.get("id", where)), tuple(docs), obj["question"].strip(), obj["answer"].strip(), gold, **extra)


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
    if not record.answerable:
        raise DataError(f"{where}: 'answer' is null (no document answers it): a training row needs an answer")
    position = random.Random(f"{seed}:{record.id}").randrange(len(record.documents))
    return render(record, move_gold(record, position)), record.answer


# -- what an answer is -------------------------------------------------------------------------
def holds_answer(generated: str, answer: str) -> bool:
    """The gold string inside the generated answer (normalised, whole words: "may" is not in
    "mayor"): right, though worded otherwise."""
    return bool(answer) and f" {normalise(answer)} " in f" {normalise(generated)} "


_NUMERIC = {"year", "number"}
_TIME_WORDS = re.compile(r"\b(noon|midnight|january|february|march|april|may|june|july|august|september|october|november|december|"
                         r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b")


def expected_type(record: DocRecord) -> str | None:
    """The row's ``answer_type``, else one read off the question's first words (who, how many,
    what year), else None (not checked)."""
    if record.answer_type:
        return record.answer_type
    q = record.question.lower()
    if q.startswith("who"):
        return "person"
    if re.match(r"(how many|how much|in what year|in which year|what year|which year)\b", q):
        return "number"
    return None


def wrong_type(generated: str, kind: str | None) -> bool:
    """An answer that cannot be of the asked kind: digits for who/where/what kind, none for how
    many or what year, neither digits nor a month, day or noon for when."""
    text = normalise(generated)
    if not text or kind is None:
        return False
    digits = any(ch.isdigit() for ch in text)
    if kind in _NUMERIC:
        return not digits
    if kind == "time":
        return not digits and _TIME_WORDS.search(text) is None
    return digits


def copied_document(generated: str, documents: Sequence[str], answer: str = "") -> bool:
    """A whole document given as the answer: the answer holds a document's whole text, or is
    most (80%) of one, and is longer than the gold answer by more than two words."""
    text = normalise(generated)
    if not text or len(text.split()) <= len(normalise(answer).split()) + 2:
        return False
    for d in documents:
        doc = normalise(d)
        if doc and (doc in text or (text in doc and len(text.split()) >= 0.8 * len(doc.split()))):
            return True
    return False


_ABSTAINS = re.compile(r"\b(not|no|unknown|none|cannot|can t|don t|doesn t|isn t|unclear|neither|nothing)\b")


def unanswered_kind(generated: str, documents: Sequence[str]) -> str:
    """What a reader said to a question no document answers: ``empty``, ``abstains`` (says it
    does not know), ``from_a_document`` (a span of some document: an answer made up from a
    distractor) or ``other``."""
    text = normalise(generated)
    if not text:
        return "empty"
    if _ABSTAINS.search(text):
        return "abstains"
    return "from_a_document" if any(text in normalise(d) for d in documents) else "other"


def failure_modes(pairs: Sequence[tuple[DocRecord, str]]) -> dict:
    """Counts over (answerable record, generated answer) pairs read in one order: ``collapses``
    (answers given to 3+ questions of one set with different gold answers) and the
    ``collapsed_rows`` they cover, ``wrong_type`` answers, ``copied_document`` answers."""
    by_set: dict[object, dict[str, set[str]]] = {}
    for r, text in pairs:
        key = r.set if r.set is not None else r.documents
        by_set.setdefault(key, {}).setdefault(normalise(text), set()).add(normalise(r.answer))
    collapsed = [len(golds) for answers in by_set.values() for text, golds in answers.items() if text and len(golds) >= 3]
    return {"collapses": len(collapsed), "collapsed_rows": sum(collapsed),
            "wrong_type": sum(wrong_type(t, expected_type(r)) for r, t in pairs),
            "copied_document": sum(copied_document(t, r.documents, r.answer) for r, t in pairs)}


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
