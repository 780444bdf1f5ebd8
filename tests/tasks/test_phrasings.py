"""Key-value documents in many phrasings (``setllm.generators.phrasings``): train and held-out
phrasings apart, every phrasing and kind generated, rows valid documents rows, and a mixed
training spec (benchmarks, UltraFeedback, judge pairs, phrased documents) loading every task."""

import json
import re
from pathlib import Path

import pytest

from setllm.generators.phrasings import (
    HELD_OUT,
    HELD_OUT_2,
    KEY_KINDS,
    TRAIN,
    TRAIN_MORE,
    VALUE_KINDS,
    kv_phrased,
)
from setllm.io.records import DataError
from setllm.tasks import documents
from setllm.training.examples import load_examples

FIXTURES = Path(__file__).parents[1] / "fixtures" / "train"


def content_words(template: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z]+", template.replace("{key}", "").replace("{value}", "")) if len(w) > 3}


@pytest.mark.parametrize("held_out", [HELD_OUT, HELD_OUT_2])
def test_held_out_phrasings_share_no_wording_with_training_ones(held_out):
    training = TRAIN + TRAIN_MORE
    train_words = set().union(*(content_words(p.document) | content_words(p.question) for p in training))
    for p in held_out:
        assert not (content_words(p.document) & train_words), p.name
    names = [p.name for p in TRAIN + TRAIN_MORE + HELD_OUT + HELD_OUT_2]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("which,phrasings", [("train", TRAIN), ("train-more", TRAIN_MORE), ("held-out", HELD_OUT),
                                             ("held-out-2", HELD_OUT_2)])
def test_rows_cover_every_phrasing_and_kind_and_are_valid(which, phrasings):
    rows = kv_phrased(which, docs=6, n=200, seed=3)
    assert rows == kv_phrased(which, docs=6, n=200, seed=3)  # seeded
    assert rows != kv_phrased(which, docs=6, n=200, seed=4)
    assert {r["phrasing"] for r in rows} == {p.name for p in phrasings}
    assert {r["key_kind"] for r in rows} == set(KEY_KINDS) and {r["value_kind"] for r in rows} == set(VALUE_KINDS)
    assert len({r["gold"] for r in rows}) == 6  # the asked key at every position
    for i, row in enumerate(rows):
        record = documents.parse_row(row, f"row {i}")
        phrasing = next(p for p in phrasings if p.name == row["phrasing"])
        pattern = re.escape(phrasing.document).replace(r"\{key\}", "(?P<key>.+)").replace(r"\{value\}", "(?P<value>.+)")
        facts = [re.fullmatch(pattern, d).group("key", "value") for d in record.documents]
        keys, values = zip(*facts)
        assert len(set(keys)) == len(set(values)) == len(facts)  # one document answers
        assert values[record.gold] == record.answer
        assert record.question == phrasing.question.format(key=keys[record.gold])


def test_bad_requests_are_one_line():
    with pytest.raises(DataError, match="unknown phrasings 'mixed'; choose one of: train, train-more, held-out, held-out-2"):
        kv_phrased("mixed")
    with pytest.raises(DataError, match="cannot draw 40 distinct values of this kind; use fewer documents"):
        kv_phrased("train", docs=40, n=50)


def test_a_mixed_training_spec_loads_every_task(tmp_path):
    phrased = tmp_path / "kv-train.jsonl"
    phrased.write_text("".join(json.dumps(r) + "\n" for r in kv_phrased("train", docs=4, n=8, seed=0)))
    pairs = tmp_path / "judge.jsonl"
    pairs.write_text(json.dumps({"instruction": "Say hi.", "candidates": ["Hi!", "Go away."], "label": 0}) + "\n")
    examples, report = load_examples(["piqa", "ultrafeedback", str(pairs), str(phrased)], str(FIXTURES))
    assert report.kept == {"piqa": 6, "ultrafeedback": 6, str(pairs): 1, str(phrased): 8}
    by_source = {e.where.split(":")[0] for e in examples}
    assert len(by_source) == 4
    judge = next(e for e in examples if e.where.startswith(str(pairs)))
    assert judge.response == "Hi!" and judge.prompt.sets[0].elements  # the better candidate, candidates as a set
    docs = [e for e in examples if e.where.startswith(str(phrased))]
    assert all(len(e.prompt.sets[0]) == 4 for e in docs)
