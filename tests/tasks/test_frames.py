"""Multiple-choice training frames (``setllm.generators.frames``): the frames share no word with the
held-out template, every frame asks with the options as one set, "modified" is the task's own
training example, and the generated rows train through ``setllm train``'s loader."""

import json
import re
from pathlib import Path

import pytest

from setllm.cli import main
from setllm.core.text.templates import held_out_prompt
from setllm.generators.frames import (
    FRAME_NAMES,
    FRAMES,
    MODIFIED,
    framed_pair,
    mc_framed,
)
from setllm.tasks import TASKS, load_records
from setllm.training.examples import load_examples

FIXTURES = Path(__file__).parents[1] / "fixtures" / "train"


def words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z]+", text) if len(w) > 3}


def frame_words(prompt) -> set[str]:
    return words(prompt.text().replace("QQQ", "").replace("CCC", "").replace("OOO", ""))


def test_no_frame_shares_a_word_with_the_held_out_template():
    held_out = frame_words(held_out_prompt("QQQ", ["OOO", "OOO"], "CCC"))
    assert held_out  # the check has something to compare
    for frame in FRAMES:
        assert not frame_words(frame.prompt("QQQ", ["OOO", "OOO"], "CCC")) & held_out, frame.name
    assert len(set(FRAME_NAMES)) == len(FRAME_NAMES) and len({f.tail for f in FRAMES}) == len(FRAMES)


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: f.name)
def test_every_frame_asks_with_the_options_as_one_set(frame):
    prompt = frame.prompt("Which is red?", ["a cherry", "a lime", "the sky"], "Fruit and colours.")
    (options,) = prompt.sets
    assert sorted(options.elements) == sorted(frame.element.format(choice=c) for c in ["a cherry", "a lime", "the sky"])
    assert all(e.endswith("\n") for e in options.elements)
    assert prompt.text().endswith(":") and "Fruit and colours." in prompt.text()
    assert "Fruit" not in frame.prompt("Which is red?", ["a", "b"]).text()  # no context line without a context


@pytest.mark.parametrize("task", sorted(TASKS))
def test_rows_are_seeded_cover_every_frame_and_train(task, tmp_path):
    records, _ = load_records(TASKS[task], "train", str(FIXTURES))
    many = records * 20  # 120 records: every frame drawn
    rows = mc_framed(TASKS[task], many, n=None, seed=3)
    assert rows == mc_framed(TASKS[task], many, n=None, seed=3) and rows != mc_framed(TASKS[task], many, n=None, seed=4)
    assert {r["id"].rsplit(":", 1)[1] for r in rows} == set(FRAME_NAMES)
    assert len(mc_framed(TASKS[task], records, n=4, seed=0)) == 4
    path = tmp_path / "framed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:30]))
    examples, report = load_examples([str(path)])
    assert report.kept == {str(path): 30}
    by_id = {r.id: r for r in records}
    for row, example in zip(rows, examples):
        record_id, name = row["id"].rsplit(":", 1)
        record = by_id[record_id]
        assert (example.prompt, example.response) == framed_pair(TASKS[task], record, name)
        assert example.response == record.choices[record.label]
        if name == MODIFIED:  # the task's own template, as `setllm train --data TASK` renders it
            assert (example.prompt, example.response) == TASKS[task].training_pair(record)


def test_the_command_writes_rows_and_refuses_bad_requests(tmp_path, capsys):
    out = tmp_path / "piqa.jsonl"
    assert main(["data", "mc-framed", "--task", "piqa", "--data-dir", str(FIXTURES), "--n", "4", "--seed", "1", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and rows == mc_framed(TASKS["piqa"], load_records(TASKS["piqa"], "train", str(FIXTURES))[0], 4, 1)
    assert main(["data", "mc-framed", "--task", "judge", "--data-dir", str(FIXTURES), "--out", str(out)]) == 2
    assert "--task: one of the multiple-choice benchmarks (piqa, arc_challenge, commonsense_qa, social_iqa), got 'judge'" in capsys.readouterr().err
    assert main(["data", "mc-framed", "--task", "piqa", "--data-dir", str(FIXTURES)]) == 2
    assert "missing --out: e.g. --task piqa" in capsys.readouterr().err
    assert main(["data", "mc-framed", "--task", "piqa", "--out", str(out)]) == 2  # no --data-dir: the hub, offline here
    assert "could not load ybisk/piqa split 'train' from the hub" in capsys.readouterr().err
