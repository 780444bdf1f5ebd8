"""The training-free invariant readings of the base model: Set-Based Prompting (``sbp``) against a
reading built from scratch, and canonical order (``canonical``) against ``causal-pe`` on the
sorted prompt. Their invariance over orderings is tested with the others in test_invariance.py."""

import itertools

import pytest
import torch
from tiny import ARCHS, tiny_model, tiny_tokenizer

from setllm import Set, SetLLM, as_prompt, get_variant

# Elements of different lengths, so SBP's "resume after the longest element" differs from SetPE's total.
PROMPT = as_prompt(["Question: which fruit is yellow?\n", Set(["apple banana cherry\n", "fig\n", "seven dog\n"]),
                    "Also:", Set(["one two\n", "water\n"]), "Answer:"])
OPTIONS = ["banana", "fig", "quick brown fox"]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def sbp_reading(ids, set_ids, element_ids, n_prompt):
    """SBP's positions and mask, token by token, as its paper states them (no setllm helper):
    each element of a set starts at the set's start; after the set, positions resume at the
    start + its longest element; attention is causal except between elements of one set."""
    positions, pos, i = [], 0, 0
    while i < len(ids):
        s = set_ids[i] if i < n_prompt else -1
        if s < 0:
            positions.append(pos)
            pos, i = pos + 1, i + 1
            continue
        start, longest, lengths = pos, 0, {}
        while i < n_prompt and set_ids[i] == s:
            e = element_ids[i]
            positions.append(start + lengths.get(e, 0))
            lengths[e] = lengths.get(e, 0) + 1
            longest = max(longest, lengths[e])
            i += 1
        pos = start + longest
    n = len(ids)
    mask = torch.full((1, 1, n, n), torch.finfo(torch.float32).min)
    for q in range(n):
        for k in range(q + 1):
            sq, sk = (set_ids[q] if q < n_prompt else -1), (set_ids[k] if k < n_prompt else -1)
            if sq >= 0 and sq == sk and element_ids[q] != element_ids[k]:
                continue  # another element of the same set
            mask[0, 0, q, k] = 0.0
    return positions, mask


@pytest.mark.parametrize("arch", ARCHS)
def test_sbp_scores_equal_a_from_scratch_reading(arch, tok):
    model = tiny_model(arch)
    lm = SetLLM(model, tok, "sbp", exact=False)
    enc = lm.encode(PROMPT)
    assert len(set(enc.set_ids)) == 3  # two sets and the text around them
    got = lm.score(PROMPT, OPTIONS)
    for option, score in zip(OPTIONS, got):
        resp = lm.response_ids(PROMPT, option)
        ids = enc.input_ids + resp
        positions, mask = sbp_reading(ids, enc.set_ids, enc.element_ids, len(enc))
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids]), position_ids=torch.tensor([positions]), attention_mask=mask).logits[0]
        logp = logits.float().log_softmax(-1)
        expected = sum(logp[len(enc) - 1 + j, t].item() for j, t in enumerate(resp))
        assert score.logprob == pytest.approx(expected, abs=1e-4), option
    # The test can fail: SBP is neither the causal reading nor Set-LLM's.
    for other in ("causal-pe", "setmask-setpe"):
        theirs = [s.logprob for s in lm.with_variant(other, exact=False).score(PROMPT, OPTIONS)]
        assert max(abs(a.logprob - b) for a, b in zip(got, theirs)) > 1e-4, other


def test_sbp_positions_and_mask_in_the_reading():
    """The reference above on a literal: "Q" {a1 a2, b1} "A" and a response R."""
    positions, mask = sbp_reading([0] * 6, [-1, 0, 0, 0, -1], [-1, 0, 0, 1, -1], 5)
    assert positions == [0, 1, 2, 1, 3, 4]
    assert (mask[0, 0] == 0).int().tolist() == [[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0],
                                                [1, 0, 0, 1, 0, 0], [1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]]


@pytest.mark.parametrize("arch", ["llama", "gemma3_text"])
def test_sbp_generates_the_same_text_in_any_order(arch, tok):
    from setllm import GenerationConfig

    lm = SetLLM(tiny_model(arch), tok, "sbp")
    assert lm.exact and lm.variant.training_free and lm.variant.invariant
    cfg = GenerationConfig(max_new_tokens=5)
    texts = {lm.generate(PROMPT.permuted([p, q]), cfg) for p in itertools.permutations(range(3)) for q in ([0, 1], [1, 0])}
    assert len(texts) == 1


@pytest.mark.parametrize("arch", ["llama", "gpt2", "gemma2", "qwen3"])
def test_canonical_is_causal_pe_on_the_sorted_prompt(arch, tok):
    model = tiny_model(arch)
    canonical = SetLLM(model, tok, "canonical", exact=False)  # canonical order cannot be turned off
    assert canonical.exact and get_variant("canonical").canonical
    causal = SetLLM(model, tok, "causal-pe")
    ref_scores = [s.logprob for s in causal.score(PROMPT.canonical(), OPTIONS)]
    ref_logits = causal.logits(PROMPT.canonical(), response="fox")
    for p in itertools.permutations(range(3)):
        for q in ([0, 1], [1, 0]):
            perm = PROMPT.permuted([p, q])
            assert canonical.encode(perm).input_ids == causal.encode(PROMPT.canonical()).input_ids
            assert [s.logprob for s in canonical.score(perm, OPTIONS)] == ref_scores  # bit-identical
            assert torch.equal(canonical.logits(perm, response="fox"), ref_logits)
    # ... and the sorting is what makes it invariant: causal-pe itself sees the order.
    shuffled = PROMPT.permuted([[2, 0, 1], [1, 0]])
    assert [s.logprob for s in causal.score(shuffled, OPTIONS)] != ref_scores


def test_report_names_of_the_training_free_variants():
    assert get_variant("sbp").paper_name == "SBP"
    assert get_variant("canonical").paper_name == "Canonical Order"
    assert get_variant("setmask-setpe").paper_name == "SetMask+SetPE"
