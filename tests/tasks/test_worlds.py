"""Natural documents about fictional worlds (``setllm.generators.worlds``): held-out words apart
from training ones, one answering document per question, questions no document answers, and
the failure modes counted on hand-built answers; through ``setllm eval`` with a tiny model."""

import json
import re

import pytest
from tiny import run_cli, tiny_model, tiny_tokenizer

from setllm.generators.worlds import FAMILIES, worlds
from setllm.io.records import DataError
from setllm.tasks import documents as docs


def _templates(family: str, part: int) -> set[str]:
    return {r.templates[family][part] for d in FAMILIES[family] for r in d.relations}


_QUESTION_WORDS = {"what", "which", "when", "where", "does", "that", "with", "from", "many"}


def _words(texts: set[str]) -> set[str]:
    """Content words: longer than three letters, not a question word."""
    return {w for t in texts for w in re.findall(r"[a-z]+", t.lower().replace("{e}", " ").replace("{v}", " "))
            if len(w) > 3 and w not in _QUESTION_WORDS}


def test_held_out_questions_are_worded_apart_from_training_ones():
    for family in ("held-out", "held-out-2"):
        assert not _templates(family, 1) & _templates("train", 1) and not _templates(family, 0) & _templates("train", 0)
    # held-out-2's domains are in no training family at all
    assert not {d.name for d in FAMILIES["held-out-2"]} & {d.name for d in FAMILIES["train"]}
    # most of a held-out question's content words are not its training twin's (a paraphrase, not a copy)
    for d in FAMILIES["held-out"]:
        for r in d.relations:
            train, held = _words({r.templates["train"][1]}), _words({r.templates["held-out"][1]})
            assert len(train & held) <= len(held) / 2, (r.name, train & held)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("k", [8, 32, 64])
def test_each_question_has_one_answering_document_and_sets_share_entities(family, k):
    rows = worlds(family, k, n=3, seed=5)
    assert rows == worlds(family, k, n=3, seed=5) and rows != worlds(family, k, n=3, seed=6)
    for i, row in enumerate(rows):
        record = docs.parse_row(row, f"row {i}")
        assert len(record.documents) == k and record.set == row["set"]
        if record.answerable:
            holding = [j for j, d in enumerate(record.documents) if docs.holds_answer(d, record.answer)]
            assert holding == [record.gold]
        else:  # asks about an entity the documents name, a fact none of them states
            assert any(row["entity"] in d for d in record.documents) and not any(row["withheld"] in d for d in record.documents)
            assert record.gold is None and record.answer == ""
    for set_id in {r["set"] for r in rows}:
        asked = [r for r in rows if r["set"] == set_id]
        answers = [r["answer"] for r in asked if r["answer"] is not None]
        assert len(asked) == 5 and len(answers) == 4 and len(set(answers)) == 4
        assert len({r["answer_type"] for r in asked if r["answer"]}) >= 3  # one answer to all of them would be wrong


def test_unanswerable_rows_are_refused_for_training_and_bad_rows_named():
    row = next(r for r in worlds("train", 8, n=1) if r["answer"] is None)
    with pytest.raises(DataError, match="row 3: 'answer' is null .* a training row needs an answer"):
        docs.training_pair(row, "row 3")
    with pytest.raises(DataError, match="unknown family 'mixed'; choose one of: train, held-out, held-out-2"):
        worlds("mixed")
    with pytest.raises(DataError, match=r"'answer' must be non-empty text \(or null: no document answers it\)"):
        docs.parse_row({"documents": ["a b"], "question": "q?", "answer": ""}, "row")


def _record(question: str, answer: str, set_id: str = "s", kind: str | None = None) -> docs.DocRecord:
    documents = ("Quillfern employs 240 people.", "Quillfern opens at 8 am every weekday.", "Lena Ruiz leads engineering at Quillfern.")
    return docs.DocRecord(question, documents, question, answer, 0, set_id, kind)


def test_failure_modes_on_hand_built_answers():
    a = _record("How many people?", "240", kind="number")
    b = _record("Who leads engineering?", "Lena Ruiz", kind="person")
    c = _record("What is the mascot?", "fox", kind="name")
    d = _record("When does it open?", "8 am", kind="time")
    # one answer ("8 am") to four questions with different gold answers: one collapse over 4 rows
    counts = docs.failure_modes([(a, "8 am"), (b, "8 am"), (c, "8 am"), (d, "8 am")])
    assert counts == {"collapses": 1, "collapsed_rows": 4, "wrong_type": 2, "copied_document": 0}  # digits for who and for the mascot
    # the same answer twice is no collapse; right answers are of the right type
    assert docs.failure_modes([(a, "240"), (b, "Lena Ruiz"), (c, "8 am"), (d, "8 am")]) == \
        {"collapses": 0, "collapsed_rows": 0, "wrong_type": 1, "copied_document": 0}
    # sets apart: three questions over three different sets never collapse
    apart = [_record(r.question, r.answer, set_id=s, kind=r.answer_type) for r, s in ((a, "1"), (b, "2"), (c, "3"))]
    assert docs.failure_modes([(r, "8 am") for r in apart])["collapses"] == 0
    assert docs.copied_document("Quillfern opens at 8 am every weekday.", a.documents, "8 am")
    assert not docs.copied_document("8 am", a.documents, "8 am") and not docs.copied_document("at 8 am", a.documents, "8 am")
    # without answer_type the question's first words decide (who: no digits; how many: digits)
    assert docs.wrong_type("8 am to 6 pm", docs.expected_type(_record("Who is the head of engineering?", "x")))
    assert docs.wrong_type("Lena", docs.expected_type(_record("How many people work there?", "x")))
    assert docs.expected_type(_record("Which river flows through it?", "x")) is None
    assert [docs.unanswered_kind(t, a.documents) for t in ("", "It does not say.", "240 people", "Paris")] == \
        ["empty", "abstains", "from_a_document", "other"]


@pytest.fixture(scope="module")
def long_model_dir(tmp_path_factory):
    """A tiny llama with room for sentences (the tiny tokenizer spends a token on most letters)."""
    path = tmp_path_factory.mktemp("tiny-long")
    tiny_model("llama", max_position_embeddings=1024).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return str(path)


def test_eval_counts_the_unanswerable_apart_and_the_failure_modes(capsys, tmp_path, long_model_dir):
    data = tmp_path / "worlds.jsonl"
    code, _, err = run_cli(capsys, "data", "worlds", "--family", "held-out", "--docs", "4", "--n", "2", "--seed", "3", "--out", str(data))
    assert code == 0 and err == f"wrote 10 worlds rows to {data}\n"
    out = tmp_path / "run"
    argv = ("eval", "--dataset", "documents", "--data-file", str(data), "--model", long_model_dir, "--adapter", "none", "--variant", "causal-pe",
            "--gold-positions", "0,-1", "--out", str(out), "--no-progress", "--batch-size", "4")
    code, said, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert "2 questions no document answers:" in said and "gold answer in the text" in said
    s = json.loads((out / "summary.json").read_text())
    assert s["n"] == 8 and s["unanswerable"]["n"] == 2 and sum(v for k, v in s["unanswerable"].items() if k != "n") == 2
    assert set(s["failure_modes"]["by_gold_position"]) == {"0", "-1"}
    assert set(s["answer_in_text"]) == {"single", "random"} and s["answer_in_text"]["random"] >= s["accuracy"]["random"]
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert sum(r.get("answerable", True) is False for r in rows) == 2
    before = (out / "predictions.jsonl").read_text()
    code, _, _ = run_cli(capsys, *argv)  # resumed: nothing run again, the same summary
    assert code == 0 and (out / "predictions.jsonl").read_text() == before
    assert json.loads((out / "summary.json").read_text())["unanswerable"] == s["unanswerable"]
