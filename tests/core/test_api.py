"""The Python API takes what a transformers user would pass, and refuses what it cannot mean."""

import pytest
from tiny import tiny_model, tiny_tokenizer

from setllm import GenerationConfig, PromptError, Set, SetLLM
from setllm.errors import InputError


@pytest.fixture(scope="module")
def lm():
    return SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")


PROMPT = ["Pick one:\n", Set(["apple\n", "dog\n"]), "Answer:"]


def test_generate_takes_one_prompt_and_generate_many_a_list_and_keyword_options(lm):
    one = lm.generate("Say something:", max_new_tokens=3)  # a bare string is one prompt, not one per character
    assert isinstance(one, str)
    assert lm.generate_many(["Say something:"], GenerationConfig(max_new_tokens=3)) == [one]
    assert lm.generate(PROMPT, max_new_tokens=3) == lm.generate_many([PROMPT], max_new_tokens=3)[0]
    with pytest.raises(ValueError, match="either a GenerationConfig or keyword arguments"):
        lm.generate("x", GenerationConfig(), max_new_tokens=3)
    with pytest.raises(ValueError, match="'max_new_tokenz' is an unknown option"):
        lm.generate("x", max_new_tokenz=3)  # a misspelt option is refused by name, not silently ignored
    with pytest.raises(InputError, match="generate_many takes a list of prompts"):
        lm.generate_many("Say something:", max_new_tokens=3)
    with pytest.raises(InputError, match="takes a list of prompts, got int"):
        lm.generate(3, max_new_tokens=3)


def test_the_old_many_form_of_generate_still_answers_with_a_future_warning(lm):
    with pytest.warns(FutureWarning, match="generate_many"):
        old = lm.generate(["Say something:", PROMPT], max_new_tokens=3)
    assert old == lm.generate_many(["Say something:", PROMPT], max_new_tokens=3)


def test_options_must_be_a_list_not_a_string(lm):
    with pytest.raises(ValueError, match="options must be a list of strings, got str"):
        lm.choose("Q?", "ab")
    with pytest.raises(ValueError, match="options\\[1\\] must be non-empty text"):
        lm.choose("Q?", ["a", " "])
    with pytest.raises(ValueError, match="duplicate option 'a'"):
        lm.choose("Q?", ["a", "b", "a"])
    with pytest.raises(ValueError, match="stop must be a list of strings"):
        GenerationConfig(stop="\n")


def test_a_setllm_is_immutable_and_views_share_weights(lm):
    with pytest.raises(AttributeError, match="immutable.*with_options"):
        lm.variant = "causal-pe"
    causal = lm.with_variant("causal-pe")
    assert causal.model is lm.model and causal.variant.name == "causal-pe" and not causal.exact
    assert lm.variant.name == "setmask-setpe" and lm.exact  # the original view is unchanged
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        lm.with_options(batch_size=0)
    with pytest.raises(PromptError, match="ends with a set"):
        lm.score(["Q:\n", Set(["a\n", "b\n"])], ["a", "b"])


def test_outer_whitespace_of_options_is_stripped_with_a_warning(lm):
    """"Paris " was scored as written: a trailing space tokenizes differently in the response."""
    from setllm.errors import SetLLMWarning

    with pytest.warns(SetLLMWarning, match="whitespace stripped from 1 option") as said:
        spaced = lm.choose("Capital?", ["Paris ", "Rome"])
    assert said[0].filename == __file__  # said where the caller asked
    assert [s.text for s in spaced.scores] == ["Paris", "Rome"]
    assert spaced.scores == lm.choose("Capital?", ["Paris", "Rome"]).scores
