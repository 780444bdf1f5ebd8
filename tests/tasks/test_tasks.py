"""Benchmark specs: templates as in the paper's Appendix D.3, and loaders that name file and line."""

import dataclasses
import json
import re
from pathlib import Path

import pytest

from setllm.core.text.prompt import Set
from setllm.core.text.templates import response_text
from setllm.io.records import DataError, MCRecord
from setllm.tasks import CUSTOM, TASKS, get_task, load_records

FIXTURES = Path(__file__).parents[1] / "fixtures" / "eval"

# Appendix D.3 of Egressy & Stühmer (2025), Tables 7 (original) and 9 (modified), as the text
# we could read them: the line breaks were lost, so renderings are compared with whitespace
# collapsed. Table 9 shows no "Answer:" for ARC and SIQA (PIQA and CSQA have it); we end
# every modified prompt with "Answer:" (the cue the response follows), hence PAPER + " Answer:".
PAPER_ORIGINAL = "Question: {question} Answer:"
PAPER_SIQA_ORIGINAL = ("Question: Given the context, answer correctly the question. Context: {context} Question: {question} "
                       "Choices: (0) {c[0]} (1) {c[1]} (2) {c[2]} Answer:")
PAPER_MODIFIED = {
    "piqa": "Question: {question} Choices: {c[0]} {c[1]} Answer:",
    "arc_challenge": "Question: {question} Choices: {c[0]} {c[1]} {c[2]} {c[3]}",
    "commonsense_qa": "Question: {question} Choices: {c[0]} {c[1]} {c[2]} {c[3]} {c[4]} Answer:",
    "social_iqa": "Question: Given the context, answer correctly the question. Context: {context} Question: {question} "
                  "Choices: {c[0]} {c[1]} {c[2]}",
}


def first_record(name):
    records, _ = load_records(TASKS[name], data_dir=FIXTURES)
    return records[0]


def squash(text):
    return " ".join(text.split())


@pytest.mark.parametrize("name", list(TASKS))
def test_templates_match_the_appendix(name):
    r = first_record(name)
    ident = tuple(range(len(r.choices)))
    orig = TASKS[name].original.render(r, ident)
    paper_orig = PAPER_SIQA_ORIGINAL if name == "social_iqa" else PAPER_ORIGINAL
    assert squash(orig.prompt.text()) == squash(paper_orig.format(question=r.question, context=r.context, c=r.choices))
    assert orig.options == (["(0)", "(1)", "(2)"] if name == "social_iqa" else list(r.choices))
    mod = TASKS[name].modified.render(r, ident)
    paper_mod = PAPER_MODIFIED[name] + ("" if PAPER_MODIFIED[name].endswith("Answer:") else " Answer:")
    assert squash(mod.prompt.text()) == squash(paper_mod.format(question=r.question, context=r.context, c=r.choices))
    assert mod.options == list(r.choices)
    (the_set,) = mod.prompt.sets  # the options are one set, and nothing else is
    assert isinstance(the_set, Set) and [e.strip() for e in the_set.elements] == [c.strip() for c in r.choices]
    assert not orig.prompt.sets


def test_exact_renderings_pinned():
    arc = first_record("arc_challenge")  # "Planets orbit" / Earth., the Moon., the galaxy., the Sun.
    mod = TASKS["arc_challenge"].modified.render(arc, (3, 0, 1, 2))
    assert mod.prompt.text() == "Question: Planets orbit\n\nChoices:\nthe Sun.\nEarth.\nthe Moon.\nthe galaxy.\nAnswer:"
    assert mod.options == ["the Sun.", "Earth.", "the Moon.", "the galaxy."]
    assert response_text(mod.options[0]) == " the Sun."
    orig = TASKS["arc_challenge"].original.render(arc, (0, 1, 2, 3))
    assert orig.prompt.text() == "Question: Planets orbit\nAnswer:"
    siqa = first_record("social_iqa")
    num = TASKS["social_iqa"].original.render(siqa, (2, 0, 1))
    assert num.prompt.text() == (
        "Question: Given the context, answer correctly the question.\nContext: Remy went to the store after work.\n"
        "Question: Why did Remy do this?\n\nChoices:\n(0) to swim\n(1) to buy milk\n(2) to sleep\nAnswer:")
    assert TASKS["social_iqa"].original.options_as_set is False  # numbering orders the options
    assert TASKS["social_iqa"].modified.render(siqa, (0, 1, 2)).prompt.segments[-1] == "Answer:"


def test_held_out_template_pinned_and_apart_from_the_trained_one():
    from setllm.tasks.judge import TASK as JUDGE

    siqa = first_record("social_iqa")
    held = TASKS["social_iqa"].template("held-out").render(siqa, (2, 0, 1))
    assert held.prompt.text() == ("Background: Remy went to the store after work.\nQ: Why did Remy do this?\nPossible answers:\n"
                                  "- to swim\n- to buy milk\n- to sleep\nThe correct answer is:")
    assert held.prompt.sets[0].elements == ("- to swim\n", "- to buy milk\n", "- to sleep\n")
    assert held.options == ["to swim", "to buy milk", "to sleep"] and response_text(held.options[0]) == " to swim"
    for name in ("arc_challenge", "piqa", "commonsense_qa", "social_iqa"):
        record = first_record(name)
        order = tuple(range(len(record.choices)))
        trained = {line for line in TASKS[name].modified.render(record, order).prompt.text().splitlines()}
        frame = TASKS[name].template("held-out").render(record, order).prompt.text()
        for text in (record.question, record.context or "", *record.choices):
            frame = frame.replace(text, "")
        assert not {line for line in frame.splitlines() if line.strip(" -")} & trained  # no frame line in common
    with pytest.raises(DataError, match="has no held-out template"):
        dataclasses.replace(JUDGE, held_out=None).template("held-out")


def test_judge_held_out_template_pinned_and_apart_from_the_trained_one():
    """The judge's held-out prompt: its own words (no word of the trained frame), candidates
    unnamed and framed alike, the same candidates as options, both orders tested."""
    from setllm.tasks.judge import PAIRS, TASK

    row = MCRecord("r1", "Name a fruit.", ("An apple.", "", "A rock.\nHard."), 0, "Be brief.")
    held = TASK.template("held-out").render(row, (2, 0, 1))
    assert held.prompt.text() == ("Request: Name a fruit.\nDetails: Be brief.\nHere are some replies to it.\n"
                                  "- A rock.\nHard.\n- An apple.\n-\nThe most helpful reply is:")
    assert held.prompt.sets[0].elements == ("- A rock.\nHard.\n", "- An apple.\n", "-\n")
    assert held.options == ["A rock.\nHard.", "An apple.", ""]
    content = " ".join([row.question, row.context, *row.choices]).lower()

    def frame_words(rendered) -> set[str]:
        return {w for w in re.findall(r"[a-z]+", rendered.prompt.text().lower()) if w not in re.findall(r"[a-z]+", content)}

    trained = frame_words(TASK.modified.render(row, (0, 1, 2)))
    assert trained == {"instruction", "input", "responses", "response", "best"}
    assert frame_words(held) == {"request", "details", "here", "are", "some", "replies", "to", "it", "the", "most", "helpful", "reply", "is"}
    assert PAIRS.template("held-out") is TASK.template("held-out")
    assert TASK.template("held-out").orderings(2) == [(0, 1), (1, 0)]


def test_fixture_counts_and_default_splits():
    sizes = {name: len(load_records(t, data_dir=FIXTURES)[0]) for name, t in TASKS.items()}
    assert sizes == {"piqa": 6, "arc_challenge": 6, "commonsense_qa": 4, "social_iqa": 4}
    assert TASKS["arc_challenge"].eval_split == "test" and TASKS["piqa"].eval_split == "validation"
    records, source = load_records(TASKS["piqa"], data_dir=FIXTURES, limit=3, subset_seed=1)
    assert len(records) == 3 and source.endswith("piqa/validation.jsonl")


def write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


GOOD = {"id": "a", "question": "Q?", "choices": ["x", "y"], "label": 0}


@pytest.mark.parametrize("bad, message", [
    ('{"id": "b", "question": "Q?", ', "malformed JSON"),
    ({"id": "b", "question": "Q?", "choices": ["x", "y"]}, "missing 'label'"),
    ({"id": "b", "question": "Q?", "choices": ["x", "y"], "label": 2}, "'label' must be an integer index"),
    ({"id": "b", "question": "Q?", "choices": ["x"], "label": 0}, "at least two"),
    ({"id": "b", "choices": ["x", "y"], "label": 0}, "missing field 'question'"),
    ({"id": "a", "question": "Q?", "choices": ["x", "y"], "label": 1}, "duplicate id 'a'"),
])
def test_loader_rejects_malformed_records_with_file_and_line(tmp_path, bad, message):
    path = write(tmp_path / "mine.jsonl", [GOOD, "", bad])  # the blank line still counts
    with pytest.raises(DataError, match=message) as err:
        load_records(CUSTOM, data_file=path)
    assert str(err.value).startswith(f"{path}:3:")


def test_siqa_needs_context_and_missing_split_lists_splits(tmp_path):
    (tmp_path / "social_iqa").mkdir()
    write(tmp_path / "social_iqa" / "validation.jsonl", [GOOD])
    with pytest.raises(DataError, match=r"validation.jsonl:1: social_iqa records need a non-empty 'context'"):
        load_records(TASKS["social_iqa"], data_dir=tmp_path)
    with pytest.raises(DataError, match=r"no such file \(splits here: validation\)"):
        load_records(TASKS["social_iqa"], split="test", data_dir=tmp_path)


def test_users_own_file_works_like_a_benchmark(tmp_path):
    path = write(tmp_path / "mine.jsonl", [GOOD, {"question": "Which?", "choices": ["a", "b", "c"], "label": 2, "context": "Ctx."}])
    records, _ = load_records(get_task(None), data_file=path)
    assert records[1] == MCRecord(f"{path}:2", "Which?", ("a", "b", "c"), 2, "Ctx.")
    rendered = CUSTOM.modified.render(records[1], (0, 1, 2))
    assert rendered.prompt.text() == "Context: Ctx.\nQuestion: Which?\n\nChoices:\na\nb\nc\nAnswer:"
    with pytest.raises(ValueError, match="unknown dataset"):
        get_task("mmlu")


def test_export_renders_training_data_as_evaluated(tmp_path):
    from setllm.cli import main
    from setllm.training.examples import load_examples

    out = tmp_path / "siqa.jsonl"
    assert main(["export", "data", "--dataset", "social_iqa", "--template", "modified", "--data-dir", str(FIXTURES), "--split", "validation",
                 "--out", str(out)]) == 0
    examples, _ = load_examples([str(out)])
    record = first_record("social_iqa")
    assert examples[0].prompt == TASKS["social_iqa"].modified.render(record, (0, 1, 2)).prompt
    assert examples[0].response == record.choices[record.label]


def test_one_multiple_choice_file_serves_eval_train_and_export(tmp_path):
    """A user's ``{"question", "choices", "label"}`` file: ``setllm train --data`` trains on it
    in the template ``setllm eval --data-file`` asks with (the right option the response, the
    others ranked below it), and ``setllm export data --data-file`` renders it in another."""
    from setllm.cli import main
    from setllm.training.examples import load_examples

    path = str(write(tmp_path / "mine.jsonl", [GOOD, {"question": "Which?", "choices": ["a", "b", "c"], "label": 2, "context": "Ctx."}]))
    records, _ = load_records(get_task(None), data_file=path)  # as setllm eval --data-file reads it
    examples, _ = load_examples([path])
    shown = [CUSTOM.modified.render(r, tuple(range(len(r.choices)))) for r in records]
    assert [e.prompt for e in examples] == [s.prompt for s in shown]
    assert [(e.response, e.rejected) for e in examples] == [("x", ("y",)), ("c", ("a", "b"))]
    assert [e.response for e in examples] == [s.options[r.label] for s, r in zip(shown, records)]  # the option eval scores
    out = tmp_path / "original.jsonl"
    assert main(["export", "data", "--data-file", path, "--template", "original", "--out", str(out)]) == 0
    exported, _ = load_examples([str(out)])
    assert [e.prompt for e in exported] == [CUSTOM.original.render(r, tuple(range(len(r.choices)))).prompt for r in records]
    with pytest.raises(DataError, match=r'mine.jsonl:1: expected \{"prompt": ..., "response": str\} or a multiple-choice row'):
        load_examples([str(write(tmp_path / "mine.jsonl", [{"question": "Q?", "answer": "x"}]))])


def test_unreadable_files_are_named(tmp_path):
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes(b'{"question": "Q?", "choices": ["a", "b"], "label": 0}\n{"question": "caf\xe9?", "choices": ["a", "b"], "label": 0}\n')
    with pytest.raises(DataError, match=r"latin1.jsonl:2: not UTF-8 text"):
        load_records(get_task(None), data_file=str(latin))
    with pytest.raises(DataError, match=r"is a directory, not a file"):
        load_records(get_task(None), data_file=str(tmp_path))
    with pytest.raises(DataError, match=r"missing.jsonl: no such file"):
        load_records(get_task(None), data_file=str(tmp_path / "missing.jsonl"))


def test_a_hub_split_that_cannot_be_had_is_one_line_at_once(monkeypatch):
    """Offline (or unreachable on one quick try) and not cached: say so, without the
    retries `datasets` would make first."""
    pytest.importorskip("datasets")
    from setllm.tasks import get_task, hub_rows

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError, match=r"could not load ybisk/piqa split 'validation' from the hub \(the hub is offline "
                                        r"\(HF_HUB_OFFLINE is set\) and no copy is cached\); pass --data-dir"):
        hub_rows(get_task("piqa"), "validation")
