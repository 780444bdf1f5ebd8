"""The echo reading, `SetLLM.echo_details`: which prompt tokens get a log-prob, as the
server's `echo` and lm-eval's `local-completions` read them, reachable from the library."""

from __future__ import annotations

import pytest
from tiny import tiny_model, tiny_tokenizer

from setllm import SetLLM

MARKUP = "Pick one:\n{{apple\n||dog\n}}Answer: apple"


@pytest.fixture(scope="module")
def lm():
    return SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")


def test_under_an_invariant_reading_the_prompt_through_one_token_after_its_last_set_has_no_logprob(lm):
    enc = lm.encode(MARKUP)
    details = lm.echo_details(enc, top=2)
    cut = max(i for i, s in enumerate(enc.set_ids) if s >= 0) + 2
    assert [d.token for d in details] == enc.input_ids
    assert all(d.logprob is None for d in details[:cut]) and all(d.logprob is not None for d in details[cut:])
    assert all(len(d.top) == 2 for d in details[cut:])
    # The rest is the response to the head, read as an option is: the very computation of token_details.
    head = type(enc)(enc.input_ids[:cut], enc.set_ids[:cut], enc.element_ids[:cut])
    assert details[cut:] == lm.token_details(head, enc.input_ids[cut:], 2)


def test_under_a_causal_reading_every_token_but_the_first_has_its_next_token_logprob(lm):
    causal = lm.with_variant("causal-pe")
    details = causal.echo_details(causal.encode(MARKUP))
    assert details[0].logprob is None and all(d.logprob is not None for d in details[1:])
