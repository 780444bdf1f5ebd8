"""Flex attention that compiles once per shape (:mod:`setllm.core.attention.flex`): the one predicate
equals every variant's mask, a stream of prompts of new lengths and layouts stays within a
bounded number of compilations and never falls back to the unfused kernel, and a long
prompt read on flex scores as the dense reading does (same answers; the same bits over
orderings in exact mode)."""

from __future__ import annotations

import random
import warnings

import pytest
import torch
from test_masks import EXPECTED, LAYOUT
from tiny import same_weights, tiny_model, tiny_tokenizer

from setllm import Set, SetLLM
from setllm.core.attention import flex
from setllm.core.layout.masks import TokenLayout, render_bool, variant_mask


def dense(fn, q_len: int, kv_len: int) -> torch.Tensor:
    """A mask predicate evaluated on every (q, kv) pair, as flex evaluates it (scalars)."""
    zero = torch.tensor(0)
    return torch.tensor([[bool(fn(zero, zero, torch.tensor(q), torch.tensor(k))) for k in range(kv_len)] for q in range(q_len)])


@pytest.mark.parametrize("kind", ["causal", "prefix", "setmask", "sbp"])
def test_the_one_predicate_draws_each_variants_mask(kind):
    got = dense(flex.mask_mod(flex.FlexLayout.of(kind, LAYOUT)), 6, 6)
    assert torch.equal(got, torch.tensor(EXPECTED[kind], dtype=torch.bool))


@pytest.mark.parametrize("kind", ["causal", "prefix", "setmask", "sbp"])
def test_windows_offsets_and_padding_as_the_composed_masks(kind):
    padded = TokenLayout(*(torch.cat([torch.full((1, 2), fill, dtype=t.dtype), t], 1)
                           for t, fill in zip(LAYOUT._fields(), (False, False, -1, -1, 0))))
    for window in (None, 2):
        for q_offset in (0, 5):
            want = render_bool(variant_mask(kind, padded, window), 1, 8 - q_offset, 8, q_offset=q_offset)[0, 0]
            got = dense(flex.mask_mod(flex.FlexLayout.of(kind, padded, window, q_offset)), 8 - q_offset, 8)
            assert torch.equal(got, want), (window, q_offset)


def test_buckets_are_block_multiples_with_little_padding_and_few_shapes():
    sizes = {flex.bucket(n) for n in range(1, 65537)}
    assert all(s % flex.BLOCK == 0 for s in sizes) and len(sizes) <= 40
    assert all(n <= flex.bucket(n) <= n * 1.25 + flex.BLOCK for n in range(1, 65537, 97))
    assert [flex.bucket(n) for n in (1, 128, 129, 1025, 1281)] == [128, 128, 256, 1280, 1536]


def documents_prompt(n_docs: int, seed: int) -> list:
    words = "the quick brown fox jumps over a lazy dog water boils at one hundred degrees".split()
    rng = random.Random(seed)
    docs = [" ".join(rng.choices(words, k=rng.randint(3, 12))) + f" {i}.\n" for i in range(n_docs)]
    return ["Documents:\n", Set(docs), "Question: which one is first?\nAnswer:"]


@pytest.fixture(scope="module")
def models():
    base = tiny_model("llama", max_position_embeddings=4096)
    return base, same_weights(base, "flex_attention")


def test_a_stream_of_new_lengths_and_layouts_compiles_a_bounded_number_of_times(models):
    from torch._dynamo.utils import counters

    _, on_flex = models
    lm = SetLLM(on_flex, tiny_tokenizer())
    prompts = [documents_prompt(n, seed) for seed, n in enumerate(random.Random(0).choices(range(3, 30), k=20))]
    lengths = [len(lm.encode(p)) for p in prompts]
    assert len(set(lengths)) >= 12  # new lengths and layouts, not one shape again and again
    before = counters["stats"]["unique_graphs"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for p in prompts:
            lm.score(p, ["fox", "dog"])
    compiled = counters["stats"]["unique_graphs"] - before
    # At most a block mask and a kernel per bucket (fewer where an earlier test compiled one).
    assert compiled <= 2 * len({flex.bucket(n) for n in lengths}), compiled
    assert not [w for w in caught if "unfused" in str(w.message) or "recompile" in str(w.message).lower()]


def test_a_long_set_on_flex_scores_as_the_dense_reading_and_the_same_bits_in_any_order(models):
    base, on_flex = models
    tok = tiny_tokenizer()
    prompt = documents_prompt(40, 1)
    options = ["fox", "dog", "water boils"]
    dense_scores = [s.logprob for s in SetLLM(base, tok).score(prompt, options)]
    lm = SetLLM(on_flex, tok)
    assert len(lm.encode(prompt)) > 300
    flex_scores = [s.logprob for s in lm.score(prompt, options)]
    torch.testing.assert_close(torch.tensor(flex_scores), torch.tensor(dense_scores), rtol=1e-5, atol=1e-4)
    docs = list(prompt[1])
    random.Random(2).shuffle(docs)
    shuffled = [s.logprob for s in lm.score([prompt[0], Set(docs), prompt[2]], options)]
    assert shuffled == flex_scores  # exact mode: the same encoded prompt, the same computation
