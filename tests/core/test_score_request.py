"""One score request for every door: `SetLLM.score_request` (text) and
`SetLLM.encoded_request` (token ids) build what the scoring driver reads, and `score` /
`score_many` say whether they take one prompt or many."""

from __future__ import annotations

import warnings

import pytest
from tiny import tiny_model, tiny_tokenizer

from setllm import Set, SetLLM
from setllm.core.text.prompt import PromptTooLong, parse_markup
from setllm.errors import InputError

MARKUP = "Pick one:\n{{apple\n||dog\n||fox\n}}Answer:"
OPTIONS = ["apple", "dog", "fox"]


@pytest.fixture(scope="module")
def lm():
    return SetLLM(tiny_model("llama", max_position_embeddings=48), tiny_tokenizer(), "setmask-setpe")


def test_a_request_holds_the_prompt_and_each_option_as_encode_and_response_ids_make_them(lm):
    request = lm.score_request(MARKUP, OPTIONS)
    assert request.prompt == lm.encode(MARKUP)
    assert [list(o) for o in request.options] == [lm.response_ids(MARKUP, o) for o in OPTIONS]
    assert lm.score_request(MARKUP, OPTIONS, eos=False).options == [lm.response_ids(MARKUP, o, eos=False) for o in OPTIONS]


def test_the_prompt_is_prepared_once_per_request(lm, monkeypatch):
    calls = []
    prepare = type(lm.codec).prepare
    monkeypatch.setattr(type(lm.codec), "prepare", lambda self, p: calls.append(1) or prepare(self, p))
    lm.score_request(MARKUP, OPTIONS)
    assert len(calls) == 1


def test_a_request_is_refused_in_the_words_of_its_rule(lm):
    with pytest.raises(InputError, match=r"options\[1\] tokenizes to nothing"):
        lm.encoded_request(lm.encode(MARKUP), [[5], []])
    with pytest.raises(InputError, match=r"options\[0\] must be text"):
        lm.score_request(MARKUP, [3])
    long_option = "apple banana cherry " * 6
    with pytest.raises(PromptTooLong, match=r"\+ longest option \(\d+\) is longer than the model's context \(48 tokens\)"):
        lm.score_request(MARKUP, ["dog", long_option])
    with pytest.raises(PromptTooLong, match=r"\+ longest option"):  # token ids: the same rule
        lm.encoded_request(lm.encode(MARKUP), [[5], [5] * 60])


def test_score_takes_one_prompt_and_score_many_a_list(lm):
    one = lm.score(MARKUP, OPTIONS)
    many = lm.score_many([MARKUP, parse_markup(MARKUP)], [OPTIONS, OPTIONS[:2]])
    assert [s.text for s in one] == OPTIONS and len(many) == 2 and [len(m) for m in many] == [3, 2]
    # The same driver and shapes alone or among others: the same bits.
    assert [s.logprob for s in many[0]] == [s.logprob for s in one] and many[1] == one[:2]
    assert lm.score_many([MARKUP]) == [one]  # options default to the set's elements
    with pytest.raises(InputError, match="score_many takes a list of prompts"):
        lm.score_many(MARKUP, [OPTIONS])


def test_the_old_many_form_of_score_still_answers_with_a_future_warning(lm):
    prompt = ["Pick one:\n", Set(["apple\n", "dog\n"]), "Answer:"]
    with pytest.warns(FutureWarning, match="score_many"):
        assert lm.score([prompt, MARKUP], [["apple"], OPTIONS]) == lm.score_many([prompt, MARKUP], [["apple"], OPTIONS])
    with pytest.warns(FutureWarning, match="score_many"):
        assert lm.score(MARKUP, [OPTIONS]) == [lm.score(MARKUP, OPTIONS)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lm.score(prompt, ["apple", "dog"])  # one prompt, flat options: no warning
