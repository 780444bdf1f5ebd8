"""Encoding: each segment and element tokenized alone equals its tokens in joined text."""

import pytest
from tiny import tiny_tokenizer

from setllm import PromptEncoder, Set, as_prompt, mc_prompt
from setllm.core.text.templates import response_text

QUESTION = "Which city is the capital of France?"
CHOICES = ["Budapest", "Paris", "Zurich"]


@pytest.mark.parametrize("kind", ["bpe", "sp", "sp_legacy"])
@pytest.mark.parametrize("context", [None, "Remy went to the store."])
def test_separate_tokenization_equals_joined_text(kind, context):
    tok = tiny_tokenizer(kind)
    enc = PromptEncoder(tok)
    prompt = mc_prompt(QUESTION, CHOICES, context)
    joined = tok(prompt.text(), add_special_tokens=False).input_ids
    assert enc.encode(prompt).input_ids == joined
    # The response joins "Answer:" the same way too.
    full = tok(prompt.text() + response_text("Paris"), add_special_tokens=False).input_ids
    assert enc.encode(prompt).input_ids + enc.tokenize(response_text("Paris")) == full


@pytest.mark.parametrize("kind", ["sp", "sp_legacy"])
def test_an_element_tokenizes_the_same_wherever_it_sits(kind):
    tok = tiny_tokenizer(kind)
    enc = PromptEncoder(tok)
    first = enc.encode(["Choices:\n", Set(["Paris\n", "Rome\n"])])
    last = enc.encode(["Choices:\n", Set(["Rome\n", "Paris\n"])])
    paris = lambda e: [t for t, el in zip(e.input_ids, e.element_ids) if el == e.prompt.sets[0].elements.index("Paris\n")]  # noqa: E731
    assert paris(first) == paris(last)
    assert "▁" not in tok.convert_ids_to_tokens(paris(first))[0]  # no spurious prefix space


def test_bos_added_once_and_ids_per_token():
    tok = tiny_tokenizer("bpe", bos=True)
    enc = PromptEncoder(tok).encode(["Q:\n", Set(["a\n", "bb\n"]), "A:", Set(["x", "y"])])
    assert enc.input_ids[0] == tok.bos_token_id and enc.input_ids.count(tok.bos_token_id) == 1
    n_a, n_b = len(tok("a\n", add_special_tokens=False).input_ids), len(tok("bb\n", add_special_tokens=False).input_ids)
    n_q = len(tok("Q:\n", add_special_tokens=False).input_ids)
    assert enc.set_ids[: 1 + n_q] == [-1] * (1 + n_q)
    assert enc.set_ids[1 + n_q : 1 + n_q + n_a + n_b] == [0] * (n_a + n_b)
    assert enc.element_ids[1 + n_q : 1 + n_q + n_a + n_b] == [0] * n_a + [1] * n_b
    assert set(enc.set_ids[-2:]) == {1} and enc.element_ids[-2:] == [0, 1]


def test_no_bos_when_the_tokenizer_adds_none():
    tok = tiny_tokenizer("bpe")
    assert PromptEncoder(tok).encode(["Q:"]).input_ids == tok("Q:").input_ids


def test_chat_mode_keeps_sets_inside_the_template():
    tok = tiny_tokenizer("bpe")
    enc = PromptEncoder(tok, chat=True)
    prompt = as_prompt(["Pick:\n", Set(["a\n", "b\n"])])
    got = enc.encode(prompt)
    rendered = tok.apply_chat_template([{"role": "user", "content": prompt.text()}], tokenize=False, add_generation_prompt=True)
    assert tok.decode(got.input_ids) == rendered
    assert got.input_ids.count(tok.bos_token_id) == 1  # the template writes BOS; not added twice
    assert sorted(set(got.set_ids)) == [-1, 0]


def test_chat_mode_needs_a_template():
    tok = tiny_tokenizer("bpe")
    tok.chat_template = None
    with pytest.raises(ValueError, match="chat template"):
        PromptEncoder(tok, chat=True)


def test_trailing_space_warns():
    with pytest.warns(UserWarning, match="start of the next segment"):
        PromptEncoder(tiny_tokenizer()).encode(["Answer: ", Set(["a", "b"])])
