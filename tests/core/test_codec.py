"""The codec closes every hole in the guarantee.

A property over random prompt shapes: sets first, last, adjacent, alone; elements with and
without trailing whitespace. Under an invariant variant every accepted prompt scores the same
under every permutation of every set (bit for bit in exact mode, 1e-5 without), and a prompt
whose response would be read from inside a set is refused with a message naming the fix.
"""

import itertools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny import tiny_model, tiny_tokenizer

from setllm import PromptError, Set, SetLLM, as_prompt
from setllm.core.layout.variants import get_variant
from setllm.core.tokens.codec import Codec

WORDS = ["apple", "banana", "cherry", "seven", "dog", "fox", "water", "one two"]
ENDINGS = ["", "\n", " ", "\n\n", "\t"]
OPTIONS = ["fox", "seven dog", "apple"]

element = st.tuples(st.sampled_from(WORDS), st.sampled_from(ENDINGS)).map("".join)
a_set = st.lists(element, min_size=2, max_size=3, unique=True).map(Set)
text = st.tuples(st.sampled_from(["Q:", "Pick one", "Answer:", "and"]), st.sampled_from(ENDINGS)).map("".join)
shapes = st.lists(st.one_of(text, a_set), min_size=1, max_size=4).filter(lambda s: any(isinstance(x, Set) for x in s))


@pytest.fixture(scope="module")
def lms():
    model, tok = tiny_model("llama"), tiny_tokenizer()
    return {exact: SetLLM(model, tok, "setmask-setpe", exact=exact) for exact in (False, True)}


def every_permutation(prompt):
    per_set = [list(itertools.permutations(range(len(s)))) for s in prompt.sets]
    return [prompt.permuted(orders) for orders in itertools.product(*per_set)]


def scores(lm, prompt) -> torch.Tensor:
    return torch.tensor([s.logprob for s in lm.score(prompt, OPTIONS)], dtype=torch.float64)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segments=shapes)
def test_every_accepted_prompt_is_order_invariant(lms, segments):
    prompt = as_prompt(segments)
    if isinstance(prompt.segments[-1], Set):
        with pytest.raises(PromptError, match='ends with a set.*"Answer:"'):
            lms[True].score(prompt, OPTIONS)
        return
    for exact, lm in lms.items():
        ref = scores(lm, prompt)
        for perm in every_permutation(prompt):
            got = scores(lm, perm)
            if exact:
                assert torch.equal(got, ref), (perm, got, ref)
            else:
                torch.testing.assert_close(got, ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("segments", [
    [Set(["apple\n", "banana"])],  # a set alone
    ["Q:\n", Set(["apple\n", "banana"])],  # a set last
    ["Q:\n", Set(["a\n", "b\n"]), Set(["c\n", "d"])],  # adjacent sets, last
])
def test_prompt_ending_with_a_set_is_refused_for_invariant_variants(lms, segments):
    for lm in lms.values():
        with pytest.raises(PromptError, match="ends with a set"):
            lm.score(segments, OPTIONS)
        with pytest.raises(PromptError, match="ends with a set"):
            lm.generate(segments, max_new_tokens=2)


def test_order_sensitive_variants_and_chat_mode_accept_a_final_set(lms):
    """Causal variants read the order anyway; in chat mode the template's text follows the set."""
    prompt = ["Q:\n", Set(["apple\n", "banana"])]
    lm = lms[True]
    assert len(lm.with_variant("causal-pe").score(prompt, OPTIONS)) == 3
    chat = lm.with_options(chat=True)
    ref = scores(chat, prompt)
    assert all(torch.equal(scores(chat, p), ref) for p in every_permutation(as_prompt(prompt)))


def test_response_ids_come_from_the_canonical_prompt():
    """In exact mode the prompt is read sorted: what the response joins onto cannot move."""
    codec = Codec(tiny_tokenizer(), get_variant("setmask-setpe"), exact=True)
    a = as_prompt(["Q:\n", Set(["b\n", "a:"]), "\n"])
    b = as_prompt(["Q:\n", Set(["a:", "b\n"]), "\n"])
    assert codec.prepare(a) == codec.prepare(b)
    assert codec.response_ids(a, "fox") == codec.response_ids(b, "fox")
    for final_set in (["Q:\n", Set(["b\n", "a:"])], ["Q:\n", Set(["a:", "b\n"])]):  # last char: whichever element is last
        with pytest.raises(PromptError, match="ends with a set"):
            codec.response_ids(final_set, "fox")


def test_options_are_scored_with_eos_by_default(lms):
    lm = lms[True]
    eos = lm.tokenizer.eos_token_id
    prompt = ["Q:\n", Set(["apple\n", "fox\n"]), "Answer:"]
    assert lm.response_ids(prompt, "fox") == lm.response_ids(prompt, "fox", eos=False) + [eos]
    with_eos, without = lm.score(prompt, ["fox"])[0], lm.score(prompt, ["fox"], eos=False)[0]
    assert with_eos.n_tokens == without.n_tokens + 1 and with_eos.logprob < without.logprob
    assert lm.with_options(eos=False).score(prompt, ["fox"])[0] == without


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_exact_mode_is_bit_identical_in_half_precision(dtype):
    model = tiny_model("qwen2").to(dtype)
    lm = SetLLM(model, tiny_tokenizer(), "setmask-setpe")
    prompt = as_prompt(["Pick one:\n", Set(["apple\n", "seven dog\n", "cherry banana\n"]), "Answer:"])
    ref = scores(lm, prompt)
    for perm in every_permutation(prompt):
        assert torch.equal(scores(lm, perm), ref)
    plain = lm.with_options(exact=False)  # without sorting, half precision does move low bits
    diffs = [(scores(plain, p) - ref).abs().max().item() for p in every_permutation(prompt)]
    assert max(diffs) < 0.1
