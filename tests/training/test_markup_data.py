"""Training data follows the one markup rule of every surface: a prompt given as one string
is setllm markup (``{{a||b}}`` a set), as in the library, the CLI, the server and lm-eval."""

from __future__ import annotations

import json
import warnings

import pytest

from setllm.core.text.prompt import Set, parse_markup
from setllm.io.records import DataError
from setllm.training.examples import load_examples


def test_a_string_prompt_in_training_jsonl_is_markup(tmp_path):
    data = tmp_path / "tr.jsonl"
    text = "Pick the animal:\n{{rock\n||dog\n||cup\n}}Answer:"
    rows = [{"prompt": text, "response": " dog"}, {"prompt": "Water boils at", "response": " 100 degrees."}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "looks like set markup" warning: it is markup
        examples, _ = load_examples([str(data)])
    assert examples[0].prompt == parse_markup(text)
    assert [s.elements for s in examples[0].prompt.segments if isinstance(s, Set)] == [("rock\n", "dog\n", "cup\n")]
    assert examples[1].prompt == parse_markup("Water boils at")


def test_bad_markup_in_training_jsonl_names_the_line(tmp_path):
    data = tmp_path / "tr.jsonl"
    data.write_text(json.dumps({"prompt": "ok", "response": "x"}) + "\n" + json.dumps({"prompt": "Pick: {{a||b", "response": "a"}) + "\n")
    with pytest.raises(DataError, match=r"tr\.jsonl:2: markup offset 6: set opened with '\{\{' is never closed"):
        load_examples([str(data)])
