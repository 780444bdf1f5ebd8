"""The shipped task YAMLs: they load, and render each benchmark exactly as setllm's own
modified template does (so ``--model setllm`` reads what ``setllm eval`` reads)."""

from __future__ import annotations

import pytest

pytest.importorskip("lm_eval")

from lm_eval.tasks import TaskManager  # noqa: E402
from lm_eval.tasks._yaml_loader import load_yaml  # noqa: E402

from setllm.core.text.prompt import Set, as_prompt, parse_markup
from setllm.io.records import parse_record  # noqa: E402
from setllm.lm_eval import TASKS_DIR, templates  # noqa: E402
from setllm.lm_eval.__main__ import include_shipped_tasks  # noqa: E402
from setllm.tasks import TASKS  # noqa: E402

# One row per benchmark, in the hub schema lm-eval's loaders give.
ROWS = {
    "arc_challenge": {"id": "x1", "question": "Which {is} a | gas?", "choices": {"label": ["A", "B", "C"], "text": ["ice", "steam\\", "rock"]},
                      "answerKey": "B"},
    "piqa": {"goal": "Open a jar", "sol1": "twist the lid", "sol2": "hit it with {a} hammer", "label": 0},
    "commonsense_qa": {"id": "c1", "question": "Where are books?", "choices": {"label": list("ABCDE"), "text": ["library", "sea", "sky", "oven", "moon"]},
                       "answerKey": "A"},
    "social_iqa": {"context": "Remy went to the store.", "question": "Why?", "answerA": "to buy milk", "answerB": "to sleep", "answerC": "to swim",
                   "label": "1"},
}
YAMLS = {"arc_challenge": "arc_challenge_set.yaml", "piqa": "piqa_set.yaml", "commonsense_qa": "commonsense_qa_set.yaml",
         "social_iqa": "social_iqa_set.yaml"}


@pytest.mark.parametrize("task", sorted(ROWS))
def test_yaml_renders_setllm_modified_template(task):
    config = load_yaml(TASKS_DIR / YAMLS[task], resolve_func=True)
    row = ROWS[task]
    normalised = {"id": "x", **TASKS[task].hub.normalise(row)}
    want = TASKS[task].modified.render(parse_record(normalised, "row"), tuple(range(len(normalised["choices"]))))
    assert parse_markup(config["doc_to_text"](row)) == want.prompt
    assert config["doc_to_choice"](row) == want.options
    target = config["doc_to_target"]
    assert (row[target] if isinstance(target, str) else target(row)) == normalised["label"]
    assert config["output_type"] == "multiple_choice" and config["target_delimiter"] == " "


def test_lettered_template_puts_the_choices_in_a_set():
    config = load_yaml(TASKS_DIR / "mmlu_set_high_school_geography.yaml", resolve_func=True)
    row = {"question": "Which is a continent? ", "choices": ["Asia", "Paris", "Nile", "Alps"], "answer": 0}
    prompt = parse_markup(config["doc_to_text"](row))
    assert prompt.sets == [Set(["Asia\n", "Paris\n", "Nile\n", "Alps\n"])] and config["doc_to_choice"](row) == row["choices"]
    assert "A." not in prompt.text() and config["doc_to_target"] == "answer"


def test_markup_escapes_what_the_parser_reads():
    prompt = as_prompt(["a\\b {x} |y| {{z}}\n", Set(["p || q\n", "\\n}\n"]), "Answer:"])
    assert parse_markup(templates.markup(prompt)) == prompt
    assert "\n" in templates.markup(prompt)  # newlines stay readable


def test_shipped_tasks_are_indexed():  # conftest undoes the patch
    include_shipped_tasks()
    names = TaskManager(include_defaults=False).all_tasks
    assert {"arc_challenge_set", "piqa_set", "commonsense_qa_set", "social_iqa_set", "mmlu_set_high_school_geography", "setllm_set"} <= set(names)
