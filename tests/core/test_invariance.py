"""Invariance over random set prompts, every architecture x every variant.

Invariant variants: logits of every token outside sets (and option scores) agree within
1e-4 under random permutations, and bit for bit in exact mode. Order-sensitive variants are
shown to change, so the check can fail.
"""

import random

import pytest
import torch
from tiny import ARCHS, tiny_model, tiny_tokenizer

from setllm import VARIANTS, Set, SetLLM, as_prompt

WORDS = "apple banana cherry date fig grape one two three four five six seven quick brown fox lazy dog water".split()
INVARIANT = [v for v in VARIANTS.values() if v.invariant]
SENSITIVE = [v for v in VARIANTS.values() if not v.invariant]


def random_prompt(rng: random.Random):
    """Text and 1-2 sets of 2-4 elements, each 1-3 words; elements distinct."""
    segments = [" ".join(rng.sample(WORDS, 2)) + ":\n"]
    for _ in range(rng.randint(1, 2)):
        elements = [" ".join(rng.sample(WORDS, rng.randint(1, 3))) + "\n" for _ in range(rng.randint(2, 4))]
        segments += [Set(dict.fromkeys(elements)) if len(set(elements)) > 1 else elements[0], rng.choice(WORDS) + ":"]
    return as_prompt(segments)


def random_permutation(prompt, rng):
    return prompt.permuted([rng.sample(range(len(s)), len(s)) for s in prompt.sets])


def outside_set_logits(lm, prompt):
    """Logits of tokens outside sets, plus a response, whose positions do not move."""
    enc = lm.encode(prompt)
    logits = lm.logits(prompt, response="fox")
    keep = [i for i, s in enumerate(enc.set_ids) if s < 0] + list(range(len(enc), logits.shape[0]))
    return logits[keep]


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("variant", [v.name for v in INVARIANT])
def test_invariant_variants_do_not_see_order(arch, variant, tokenizer):
    rng = random.Random(hash((arch, variant)) % 1000)
    lm = SetLLM(tiny_model(arch), tokenizer, variant, exact=False)
    exact = SetLLM(lm.model, tokenizer, variant, exact=True)
    for _ in range(3):
        prompt = random_prompt(rng)
        ref, ref_exact = outside_set_logits(lm, prompt), outside_set_logits(exact, prompt)
        options = [["fox", "seven dog", "apple"]]
        ref_scores = {s.text: s.logprob for s in lm.score_many([prompt], options)[0]}
        for _ in range(2):
            perm = random_permutation(prompt, rng)
            torch.testing.assert_close(outside_set_logits(lm, perm), ref, atol=1e-4, rtol=0)
            assert torch.equal(outside_set_logits(exact, perm), ref_exact)
            scores = {s.text: s.logprob for s in lm.score_many([perm], options)[0]}
            assert scores == pytest.approx(ref_scores, abs=1e-4)


@pytest.mark.parametrize("arch", ["llama", "gpt2", "gemma2"])
@pytest.mark.parametrize("variant", [v.name for v in SENSITIVE])
def test_order_sensitive_variants_change(arch, variant, tokenizer):
    lm = SetLLM(tiny_model(arch), tokenizer, variant)
    assert lm.exact is False  # exact mode is never applied to order-sensitive variants
    prompt = as_prompt(["fruit:\n", Set(["apple banana\n", "cherry\n", "seven dog\n"]), "one:"])
    ref = outside_set_logits(lm, prompt)
    diffs = [(outside_set_logits(lm, prompt.permuted([p])) - ref).abs().max().item() for p in ([1, 2, 0], [2, 1, 0])]
    assert max(diffs) > 1e-3


def test_exact_mode_is_refused_for_order_sensitive_variants(tokenizer):
    with pytest.raises(ValueError, match="only to invariant variants"):
        SetLLM(tiny_model("llama"), tokenizer, "causal-pe", exact=True)
