"""UltraFeedback in set format (the paper's Ultra stage): which prompts become sets, on a
committed fixture (``tests/fixtures/train/ultra_sets.jsonl``, see its README)."""

import json
from pathlib import Path

import pytest

from setllm.core.text.prompt import Set
from setllm.tasks.ultrafeedback import instruction_pair

FIXTURE = Path(__file__).parents[1] / "fixtures" / "train" / "ultra_sets.jsonl"
ROWS = {r["id"]: r for r in map(json.loads, FIXTURE.read_text(encoding="utf-8").splitlines())}

EXPECTED_SETS = {  # id -> the sets of its prompt, in order
    "trl-lib-train-56994": [["- university\n", "- concert\n", "- home\n", "- terminal\n", "- airport\n"]],
    "trl-lib-train-4984": [[" A). negative\n", " B). positive\n"]],
    "hand-numbered-steps": [],  # numbers without an options cue: steps, ordered
    "hand-numbered-options": [["1) Mars\n", "2) Jupiter\n", "3) Venus\n"]],  # after "Choices:": labels
    "hand-by-place": [],  # the response says "the second sentence"
    "hand-dialogue": [],  # "A:" / "B:" turns are ordered
    "hand-one-bullet": [],  # one item is not a list
    "hand-blank-line": [],  # a blank line before it: alone, "\n\n" would tokenize otherwise than joined
}


@pytest.mark.parametrize("row_id", list(EXPECTED_SETS))
def test_which_prompts_become_sets(row_id):
    row = ROWS[row_id]
    prompt, response = instruction_pair(row, row_id)
    assert [list(s.elements) for s in prompt.sets] == EXPECTED_SETS[row_id]
    # Read in the given order, the prompt is the instruction as before: the causal baseline's text.
    assert prompt.text() == f"Question: {row['instruction'].strip()}\nAnswer:"
    assert response == row["response"].strip()


def test_a_list_ending_the_instruction_ends_every_element_alike():
    prompt, _ = instruction_pair({"instruction": "Pick one:\n- red\n- blue\n", "response": "red"}, "x")
    assert prompt.sets == [Set(["- red\n", "- blue\n"])]
    assert prompt.segments[-1] == "Answer:"


def test_a_list_opening_the_instruction_stays_text():
    # The set would follow "Question: ", text ending in a space (tokenized otherwise alone).
    prompt, _ = instruction_pair({"instruction": "- red\n- blue\nPick one.", "response": "red"}, "x")
    assert prompt.sets == [] and prompt.text() == "Question: - red\n- blue\nPick one.\nAnswer:"


def test_every_fixture_row_is_covered():
    assert set(ROWS) == set(EXPECTED_SETS)
