"""Documents read once (:mod:`setllm.core.doccache`): a cached reading equals a fresh one up to
rounding, gives the same bits in any order, computes only what it has not seen, and the
cache holds what its accounting says."""

from __future__ import annotations

import random
import warnings

import pytest
import torch
from tiny import tiny_model, tiny_tokenizer

from setllm import GenerationConfig, Set, SetLLM
from setllm.core import doccache, scoring
from setllm.core.batch import collate

DOCS = [f"Note {i}: the {w} fox jumps over the lazy dog.\n" for i, w in enumerate(["quick", "brown", "red", "old", "small", "lazy"])]
OPTIONS = ["fox", "dog", "water boils"]


def prompt(docs):
    return ["Documents:\n", Set(list(docs)), "Question: which one jumps?\nAnswer:"]


@pytest.fixture(params=["llama", "gemma3_text"])
def lm(request):
    """Gemma 3 slides a window over positions: its cached pieces must take it as a full forward does."""
    return SetLLM(tiny_model(request.param), tiny_tokenizer(), "sbp")


def test_a_cached_reading_equals_a_fresh_one_up_to_rounding(lm):
    enc = lm.encode(prompt(DOCS[:4]))
    store = doccache.DocumentCache(64)
    key = doccache.identity(lm.model, None, lm.variant)
    cache, got = doccache.prefill(lm.model, lm.variant, enc, store, key)
    fresh_cache, want = scoring.prefill(lm.model, lm.variant, collate([enc], lm.variant.positions, lm.pad_id))
    # Separate forwards for the prefix, each element and the suffix: other shapes, not the same bits.
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    for mine, theirs in zip(cache.layers, fresh_cache.layers):
        torch.testing.assert_close(mine.keys, theirs.keys, rtol=0, atol=1e-5)
    assert store.stats().misses == 5 and store.stats().entries == 5  # the prefix and four elements


def test_scores_and_text_through_the_cache_equal_the_fresh_reading(lm):
    """The suffix and the options run as one forward on the cached pieces (the options as one
    more set): each option's every token as the fresh reading scores it."""
    request = lm.score_request(prompt(DOCS[:4]), OPTIONS)
    [fresh] = lm.score_encoded([request])
    text = lm.generate(prompt(DOCS[:4]), max_new_tokens=6)
    store = lm.cache_documents(max_mb=64)
    try:
        [cached] = lm.score_encoded([request])
        assert [s.logprob for s in cached] == pytest.approx([s.logprob for s in fresh], abs=1e-4)
        assert [(s.n_tokens, s.greedy) for s in cached] == [(s.n_tokens, s.greedy) for s in fresh]
        assert store.stats().misses == 5  # the prefix and four elements: the scoring went through the cache
        assert lm.generate(prompt(DOCS[:4]), max_new_tokens=6) == text
        assert store.stats().hits >= 5  # the generation read every piece the scoring computed
    finally:
        store.clear()


@pytest.mark.parametrize("wide", [False, True])
def test_cached_requests_batched_give_each_the_bits_it_gets_alone(lm, wide):
    """Cached questions share one packed forward (fixed row blocks, a block of attention per
    request): each request's scores are the bits it gets alone, and the fresh reading's up to
    rounding; also 128 wide, as the server's batching tests read (tests/serve/conftest.py)."""
    if wide:
        lm = SetLLM(tiny_model(lm.model.config.model_type, hidden_size=128, intermediate_size=256, num_attention_heads=4,
                               num_key_value_heads=2, head_dim=32), tiny_tokenizer(), "sbp")
    asks = [(prompt(DOCS[:4]), OPTIONS), (prompt(DOCS[2:5]), ["dog"]),
            (["Other notes:\n", Set(DOCS[1:3]), "Which is red?\nAnswer:"], ["the red one", "none of them at all"])]
    requests = [lm.score_request(p, o) for p, o in asks]
    fresh = lm.score_encoded(requests)
    store = lm.cache_documents(max_mb=64)
    store.clear()
    try:
        together = lm.score_encoded(requests)
        alone = [lm.score_encoded([r])[0] for r in requests]
        assert together == alone
        assert lm.score_encoded(requests[::-1]) == together[::-1]
        for got, want in zip(together, fresh):
            assert [s.logprob for s in got] == pytest.approx([s.logprob for s in want], abs=1e-4)
            assert [s.n_tokens for s in got] == [s.n_tokens for s in want]
    finally:
        store.clear()


def test_any_order_and_combination_reuses_pieces_and_gives_the_same_bits(lm):
    store = lm.cache_documents(max_mb=64)
    store.clear()
    try:
        first = [s.logprob for s in lm.score(prompt(DOCS[:4]), OPTIONS)]
        misses = store.stats().misses
        for seed in range(3):
            shuffled = random.Random(seed).sample(DOCS[:4], 4)
            assert [s.logprob for s in lm.score(prompt(shuffled), OPTIONS)] == first
        assert store.stats().misses == misses  # nothing computed again
        lm.score(prompt([DOCS[1], DOCS[5], DOCS[3]]), OPTIONS)
        assert store.stats().misses == misses + 1  # only the one new document
    finally:
        store.clear()


def test_the_cache_is_bounded_by_bytes_it_counts_exactly_least_recently_used_out():
    k = torch.zeros(1, 2, 10, 4)
    layers = [(k, k.clone())]  # 2 * 80 floats * 4 bytes = 640 bytes a piece
    store = doccache.DocumentCache(max_mb=2000 / 1e6)
    for i in range(3):
        store.put(("piece", i), layers)
    assert store.stats().bytes == 3 * 640 == sum(t.numel() * t.element_size() for t in (k, k) * 3)
    assert store.get(("piece", 0)) is not None  # 0 is now the most recently used
    store.put(("piece", 3), layers)
    assert store.get(("piece", 1)) is None and store.get(("piece", 0)) is not None
    assert store.stats().evictions == 1 and store.stats().bytes == 3 * 640 <= store.max_bytes


def test_a_reading_that_cannot_reuse_says_so_once_and_reads_as_before():
    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")
    want = [s.logprob for s in lm.score(prompt(DOCS[:3]), OPTIONS)]
    store = lm.cache_documents(max_mb=64)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = [s.logprob for s in lm.score(prompt(DOCS[:3]), OPTIONS)]
            lm.score(prompt(DOCS[:2]), OPTIONS)
        assert got == want and store.stats().entries == 0
        assert [str(w.message) for w in caught if "read afresh" in str(w.message)] == [
            "setllm: documents are read afresh: variant 'setmask-setpe' lets a document see text it cannot be cached without "
            "(only 'sbp' reads documents apart)"]
    finally:
        store.clear()


def test_answer_reads_cached_documents():
    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), "sbp")
    fresh = lm.answer(DOCS[:4], "Which one jumps?", max_new_tokens=5)
    store = lm.cache_documents(max_mb=64)
    try:
        assert lm.answer(DOCS[:4], "Which one jumps?", max_new_tokens=5) == fresh
        assert lm.answer(DOCS[3::-1], "Which one jumps?", max_new_tokens=5) == fresh
        assert store.stats().hits >= 5
    finally:
        store.clear()
        doccache._attached.pop(doccache._weights(lm.model), None)


def test_generation_config_through_the_cache(lm):
    store = lm.cache_documents(max_mb=64)
    try:
        sampled = GenerationConfig(max_new_tokens=5, temperature=1.0, seed=3)
        assert lm.generate(prompt(DOCS[:2]), sampled) == lm.generate(prompt(DOCS[1::-1]), sampled)
    finally:
        store.clear()
