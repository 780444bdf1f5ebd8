"""Validation at the door of the library: a wrong argument is one InputError line naming it,
before any model work; transformers' generation names map or are refused by name."""

from __future__ import annotations

import pytest
from tiny import tiny_model, tiny_tokenizer

from setllm import Set, SetLLM
from setllm.errors import InputError


@pytest.fixture(scope="module")
def lm():
    return SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")


@pytest.mark.parametrize("question", [None, 5, "", "  "])
def test_choose_refuses_a_question_that_is_not_text(lm, question):
    with pytest.raises(InputError, match=r"^question must be non-empty text, got "):
        lm.choose(question, ["a", "b"])


@pytest.mark.parametrize("instruction", [None, 3, ""])
def test_judge_refuses_an_instruction_that_is_not_text(lm, instruction):
    with pytest.raises(InputError, match=r"^instruction must be non-empty text, got "):
        lm.judge(instruction, ["Red.", "A dog."])
    with pytest.raises(InputError, match=r"^input must be text or None, got int"):
        lm.judge("Name a colour.", ["Red.", "A dog."], input=4)


def test_a_list_of_strings_with_flat_options_says_how_it_was_read(lm):
    with pytest.raises(InputError) as e:
        lm.score(["Pick one:\n", "apple\n", "Answer:"], ["apple", "dog"])
    message = str(e.value)
    assert "\n" not in message and "a list of 3 strings is read as 3 prompts" in message and "Set(" in message
    one = lm.score(["Pick one:\n", Set(["apple\n", "dog\n"]), "Answer:"], ["apple", "dog"])  # the fix it names
    assert len(one) == 2


def test_generate_takes_transformers_names_that_map(lm):
    greedy = lm.generate("Pick one:\n{{apple\n||dog\n}}Answer:", max_new_tokens=4)
    assert lm.generate("Pick one:\n{{apple\n||dog\n}}Answer:", max_new_tokens=4, do_sample=False) == greedy
    sampled = lm.generate("Pick one:\n{{apple\n||dog\n}}Answer:", max_new_tokens=4, do_sample=True, seed=3)
    assert sampled == lm.generate("Pick one:\n{{apple\n||dog\n}}Answer:", max_new_tokens=4, temperature=1.0, seed=3)
    assert lm.generate("Say:", max_new_tokens=4, stop_strings=["e"]) == lm.generate("Say:", max_new_tokens=4, stop=["e"])


@pytest.mark.parametrize("kwargs, message", [
    ({"num_beams": 2}, "'num_beams' is a transformers option setllm's decoding does not support"),
    ({"top_k": 5}, "'top_k' is a transformers option"),
    ({"beams": 2}, "'beams' is an unknown option"),
    ({"do_sample": False, "temperature": 0.7}, "do_sample=False decodes greedily; it contradicts temperature=0.7"),
    ({"do_sample": "yes"}, "do_sample must be True or False"),
])
def test_generate_refuses_other_names_in_one_line(lm, kwargs, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(")) as e:
        lm.generate("Say:", max_new_tokens=2, **kwargs)
    assert "\n" not in str(e.value)
