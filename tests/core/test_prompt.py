"""Set prompts from the Python API, JSON and markup; strict validation with positions."""

import pytest

from setllm import (
    PromptError,
    Set,
    as_prompt,
    from_json,
    parse_markup,
)


def test_three_ways_in_give_one_form():
    api = as_prompt(["Question: capital?\nChoices:\n", Set(["Paris\n", "Rome\n"]), "Answer:"])
    js = from_json('{"prompt": ["Question: capital?\\nChoices:\\n", {"set": ["Paris\\n", "Rome\\n"]}, "Answer:"]}')
    mk = parse_markup(r"Question: capital?\nChoices:\n{{Paris\n||Rome\n}}Answer:")
    assert api == js == mk
    assert api.segments == ("Question: capital?\nChoices:\n", Set(["Paris\n", "Rome\n"]), "Answer:")


def test_several_sets_duplicates_and_python_sets():
    p = as_prompt(["A ", Set(["x", "x"]), " B ", {"set": ["y", "z", "w"]}, frozenset({"b", "a"})])
    assert [s.elements for s in p.sets] == [("x", "x"), ("y", "z", "w"), ("a", "b")]


def test_one_element_set_is_plain_text():
    assert as_prompt(["Q: ", Set(["only"]), "!"]).segments == ("Q: only!",)
    assert parse_markup("a{{b}}c").segments == ("abc",)
    assert as_prompt(["a", "", "b", Set(["x", "y"]), "c"]).segments == ("ab", Set(["x", "y"]), "c")


def test_canonical_and_permuted():
    p = as_prompt(["Q", Set(["b", "c", "a"]), "A"])
    assert p.canonical().sets[0].elements == ("a", "b", "c")
    assert p.permuted([[2, 0, 1]]).sets[0].elements == ("a", "b", "c")
    with pytest.raises(ValueError, match="not a permutation"):
        p.permuted([[0, 0, 1]])


@pytest.mark.parametrize(
    "prompt, message",
    [
        (["Q", Set([])], r"prompt\[1\]: empty set"),
        (["Q", Set(["a", ""])], r"prompt\[1\]\.set\[1\]: empty element"),
        (["Q", {"set": ["a", {"set": ["b"]}]}], r"prompt\[1\]\.set\[1\]: nested sets are not supported"),
        (["Q", {"set": ["a", ["b"]]}], r"prompt\[1\]\.set\[1\]: nested sets"),
        (["Q", 3], r"prompt\[1\]: expected text or a set, got int"),
        (["Q", {"sets": ["a", "b"]}], r"prompt\[1\]: a set is written"),
        ([], "the prompt is empty"),
        ({"text": "x"}, "needs a 'prompt' key"),
    ],
)
def test_api_and_json_errors_name_the_place(prompt, message):
    with pytest.raises(PromptError, match=message):
        as_prompt(prompt)


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"prompt": ["a", {"set": ["x", "y"]}', r"malformed JSON at line 1, column \d+"),
        ('{\n "prompt": [\n  "a",\n  {"set": []}\n ]\n}', r"prompt\[1\]: empty set"),
        ('"just text"', "a JSON prompt is an object"),
    ],
)
def test_json_errors(text, message):
    with pytest.raises(PromptError, match=message):
        from_json(text)


from hypothesis import given, settings
from hypothesis import strategies as st

_text = st.text(alphabet=st.sampled_from(list("ab {}|\\\n\t:é")), min_size=1, max_size=8)
_segment = st.one_of(_text, st.lists(_text, min_size=2, max_size=4).map(Set))


@settings(max_examples=100, deadline=None)
@given(st.lists(_segment, min_size=1, max_size=5), st.randoms(use_true_random=False))
def test_canonical_order_ignores_any_permutation(segments, rnd):
    prompt = as_prompt(segments)
    perm = prompt.permuted([rnd.sample(range(len(s)), len(s)) for s in prompt.sets])
    assert perm.canonical() == prompt.canonical()
