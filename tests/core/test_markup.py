"""Inline markup (:mod:`setllm.core.text.prompt`): the grammar, its errors by offset, and one rule on
every surface: a prompt given as one string is markup; list text that looks like markup is
read as text, with a warning."""

import json
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from setllm import (
    PromptError,
    Set,
    SetPrompt,
    as_prompt,
    from_json,
    parse_markup,
    to_markup,
)
from setllm.errors import SetLLMWarning


@pytest.mark.parametrize(
    "text, message",
    [
        ("a {{x||y", "markup offset 2: set opened with '{{' is never closed"),
        ("a x}}", "markup offset 3: '}}' closes no set"),
        ("a {{x||{{y}}}}", r"markup offset 7: nested sets are not supported"),
        ("a || b", r"markup offset 2: '\|\|' outside a set"),
        ("{{x||||y}}", "markup offset 5: empty set element"),
        ("{{}}", "markup offset 2: empty set element"),
        (r"a \q", r"markup offset 2: unknown escape '\\q'"),
        ("a \\", "markup offset 2: trailing backslash"),
    ],
)
def test_markup_errors_name_the_offset(text, message):
    with pytest.raises(PromptError, match=message):
        parse_markup(text)


def test_markup_escapes_and_round_trip():
    p = parse_markup(r"use \{ and \| and \\ {{a\}b||c d}}")
    assert p.segments == ("use { and | and \\ ", Set(["a}b", "c d"]))
    q = as_prompt(["x{y}|z\n", Set(["a|b", "c\\d", "{e}"]), "\tend"])
    assert parse_markup(to_markup(q)) == q
    assert isinstance(q, SetPrompt)


_text = st.text(alphabet=st.sampled_from(list("ab {}|\\\n\t:é")), min_size=1, max_size=8)
_segment = st.one_of(_text, st.lists(_text, min_size=2, max_size=4).map(Set))


@settings(max_examples=200, deadline=None)
@given(st.lists(_segment, min_size=1, max_size=5))
def test_markup_round_trips_any_prompt(segments):
    prompt = as_prompt(segments)
    assert parse_markup(to_markup(prompt)) == prompt
    assert from_json(json.dumps(prompt.to_json())) == prompt


def test_a_string_is_markup_and_list_text_that_looks_like_markup_warns():
    from tiny import tiny_model, tiny_tokenizer

    from setllm import SetLLM

    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a string alone: no warning
        as_string = lm.encode("Pick:\n{{apple\n||dog\n}}Answer:")
    assert as_string == lm.encode(["Pick:\n", Set(["apple\n", "dog\n"]), "Answer:"])
    with pytest.warns(SetLLMWarning, match="looks like set markup"):
        as_text = lm.encode(["Pick:\n{{apple\n||dog\n}}Answer:"])
    assert as_text != as_string and set(as_text.set_ids) == {-1}


def test_templates_read_braces_in_user_text_as_text_without_a_warning():
    from setllm import mc_prompt
    from setllm.tasks.judge import judge_prompt

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = judge_prompt("Fix this: `d = {{'a': 1}}`", ["x = {{1}}", "no"])
        q = mc_prompt("What does {{x}} print?", ["1", "{{x}}"])
    assert "{{'a': 1}}" in p.text() and "What does {{x}} print?" in q.text()
    assert [sorted(s) for s in p.sets] == [["Response: no\n", "Response: x = {{1}}\n"]]
    assert [sorted(s) for s in q.sets] == [["1\n", "{{x}}\n"]]
