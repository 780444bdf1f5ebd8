"""Documents read once (:mod:`setllm.core.doccache`): under ``sbp`` a reading with the cache on
gives the bits of one with it off (one computation), in any order, alone or batched; it
computes only what it has not seen, the missing documents together; the cache is on by
default and holds what its accounting says."""

from __future__ import annotations

import random
import warnings

import pytest
import torch
from tiny import tiny_model, tiny_tokenizer

from setllm import GenerationConfig, Set, SetLLM
from setllm.core import doccache
from setllm.core.doccache import attention, driver
from setllm.core.forward import scoring
from setllm.core.tokens.batch import collate

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
    key = doccache.reading_key(lm.model, lm.tokenizer, lm.variant)
    cache, got = doccache.prefill(lm.model, lm.variant, enc, store, key)
    fresh_cache, want = scoring.prefill(lm.model, lm.variant, collate([enc], lm.variant.positions, lm.pad_id))
    # Separate forwards for the prefix, each element and the suffix: other shapes, not the same bits.
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    for mine, theirs in zip(cache.layers, fresh_cache.layers):
        torch.testing.assert_close(mine.keys, theirs.keys, rtol=0, atol=1e-5)
    assert store.stats().misses == 5 and store.stats().entries == 5  # the prefix and four elements


def _off(lm):
    """``lm``'s cache switched off; returns a function that forgets the switch."""
    assert lm.cache_documents(0) is None and lm.document_cache is None
    return lambda: doccache.forget(lm.model)


def test_scores_and_text_through_the_cache_are_the_bits_of_the_reading_without_it(lm):
    """The cache off, a scratch cache computes the same pieces the same way: the same bits,
    whether the documents were computed now, together with others, or earlier."""
    request = lm.score_request(prompt(DOCS[:4]), OPTIONS)
    forget = _off(lm)
    try:
        [fresh] = lm.score_encoded([request])
        text = lm.generate(prompt(DOCS[:4]), max_new_tokens=6)
        answer = lm.answer(DOCS[:4], "Which one jumps?", max_new_tokens=5)
    finally:
        forget()
    store = lm.cache_documents(max_mb=64)
    try:
        lm.score(prompt(DOCS[::-1]), OPTIONS)  # all six computed together, in a group of six
        assert store.stats().misses == 7
        [cached] = lm.score_encoded([request])
        assert cached == fresh  # exactly: TokenScore compares log-probs as floats
        assert lm.generate(prompt(DOCS[:4]), max_new_tokens=6) == text
        assert lm.answer(DOCS[3::-1], "Which one jumps?", max_new_tokens=5) == answer
    finally:
        store.clear()


def test_the_logprobs_of_a_cached_prefill_are_the_bits_of_a_scratch_one(lm):
    enc = lm.encode(prompt(DOCS[:4]))
    key = doccache.reading_key(lm.model, lm.tokenizer, lm.variant)
    warm = doccache.DocumentCache(64)
    doccache.prefill(lm.model, lm.variant, lm.encode(prompt(DOCS[3:])), warm, key)  # docs 3..5 read in another group
    cache_a, a = doccache.prefill(lm.model, lm.variant, enc, doccache.DocumentCache.scratch(), key)
    cache_b, b = doccache.prefill(lm.model, lm.variant, enc, warm, key)
    assert torch.equal(a, b)
    assert all(torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values) for x, y in zip(cache_a.layers, cache_b.layers))


def test_missing_documents_are_computed_in_one_forward_each_with_the_bits_of_it_alone(lm):
    enc = lm.encode(prompt(DOCS[:5]))
    batch = collate([enc], lm.variant.positions, lm.pad_id)
    key = doccache.reading_key(lm.model, lm.tokenizer, lm.variant)
    calls = []
    hook = lm.model.register_forward_hook(lambda *a: calls.append(1))
    try:
        [(parts, _)] = driver._pieces(lm.model, lm.variant, [(enc, batch)], doccache.DocumentCache(64), key)
    finally:
        hook.remove()
    assert len(calls) == 2  # the prefix, then the five documents together
    pieces = driver._Pieces.of(enc)
    prefix = driver._compute(lm.model, lm.variant, batch.input_ids, batch.position_ids, batch.layout, [], pieces.prefix)
    at = len(pieces.prefix)
    for element in pieces.elements:
        [alone] = driver._compute_elements(lm.model, lm.variant, [driver._Missing(prefix, batch, pieces.prefix, element)])
        for (k, v), (k_all, v_all) in zip(alone, parts):
            assert torch.equal(k, k_all[:, :, at : at + len(element)]) and torch.equal(v, v_all[:, :, at : at + len(element)])
        at += len(element)


def test_the_cache_is_on_by_default_under_sbp_and_zero_switches_it_off():
    """Made when the model is wrapped (or viewed) under sbp, not by a read."""
    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), "sbp")
    assert lm.document_cache is not None and lm.document_cache.stats().entries == 0
    lm.score(prompt(DOCS[:2]), OPTIONS)
    store = lm.document_cache
    assert store is not None and store.max_bytes == doccache.DEFAULT_MB * 1e6 and store.stats().entries == 3
    assert lm.cache_documents(0) is None and lm.document_cache is None
    lm.score(prompt(DOCS[:3]), OPTIONS)
    assert lm.document_cache is None  # off stays off
    other = SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")
    other.score(prompt(DOCS[:2]), OPTIONS)
    assert other.document_cache is None  # a reading that cannot use one gets none
    assert other.with_variant("sbp").document_cache is not None  # a view that can: made with the view


def test_a_shared_reader_reads_through_its_owners_cache_whatever_it_becomes(tmp_path):
    """The documents reader loaded beside a model (SetLLM.answer) reads through the cache its
    owner was given, attached before or after, memory or disk, or switched off."""
    owner = SetLLM(tiny_model("llama"), tiny_tokenizer(), "sbp")
    reader = SetLLM(tiny_model("llama", seed=1), tiny_tokenizer(), "sbp")
    doccache.share(reader.model, owner.model)
    reader.score(prompt(DOCS[:2]), OPTIONS)
    assert owner.document_cache is reader.document_cache and owner.document_cache.stats().entries == 3
    owner.cache_documents(64, directory=tmp_path)
    reader.score(prompt(DOCS[:2]), OPTIONS)
    assert reader.document_cache is owner.document_cache and reader.document_cache.disk is not None
    assert len(list(tmp_path.glob("*.safetensors"))) == 3  # the reader's pieces went to the owner's folder
    owner.cache_documents(0)
    assert reader.document_cache is None


def test_an_owner_read_otherwise_gets_the_default_cache_its_sbp_reader_reads_through():
    """from_pretrained() loads the choose adapter under setmask-setpe (no cache of its own); the
    sbp documents reader answer() loads beside it reads through it: the owner's cache is on by
    default for it, not a scratch one that keeps nothing."""
    owner = SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")
    reader = SetLLM(tiny_model("llama", seed=1), tiny_tokenizer(), "sbp")
    assert owner.document_cache is None
    doccache.share(reader.model, owner.model)
    reader.score(prompt(DOCS[:2]), OPTIONS)
    assert owner.document_cache is not None and owner.document_cache.stats().entries == 3
    off = SetLLM(tiny_model("llama", seed=2), tiny_tokenizer(), "setmask-setpe")
    off.cache_documents(0)
    doccache.share(reader.model, off.model)
    assert reader.document_cache is None  # switched off stays off


@pytest.mark.parametrize("value, message", [
    ("512", "max_mb must be a number of megabytes >= 0 (0: off), got '512'"),
    (-5, "max_mb must be a number of megabytes >= 0 (0: off), got -5"),
    (True, "max_mb must be a number of megabytes >= 0 (0: off), got True"),
    (float("nan"), "max_mb must be a number of megabytes >= 0 (0: off), got nan"),
])
def test_a_bad_size_is_refused_in_words(value, message):
    from setllm.errors import InputError

    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), "sbp")
    with pytest.raises(InputError) as caught:
        lm.cache_documents(max_mb=value)
    assert str(caught.value) == message


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
            "documents are read afresh: variant 'setmask-setpe' lets a document see text it cannot be cached without "
            "(only 'sbp' reads documents apart)"]
    finally:
        store.clear()


def test_a_reading_whose_positions_follow_the_order_is_not_cached():
    """The sbp mask reads documents apart, but consecutive positions number each document after
    the ones before it: a piece cached in one order would carry that order's positions into
    another. Such a reading is read afresh, with the bits of reading it without a cache."""
    from setllm.core.layout.variants import Variant

    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), Variant("sbp-mask-pe", "sbp", "pe", invariant=False))
    assert "numbers a document's tokens after the documents before it" in doccache.variant_problem(lm.variant)
    forget = _off(lm)
    want = [s.logprob for s in lm.score(prompt(DOCS[2::-1]), OPTIONS)]
    forget()
    store = lm.cache_documents(max_mb=64)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lm.score(prompt(DOCS[:3]), OPTIONS)
            got = [s.logprob for s in lm.score(prompt(DOCS[2::-1]), OPTIONS)]
        assert got == want and store.stats().entries == 0
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
        doccache.forget(lm.model)


def test_generation_config_through_the_cache(lm):
    store = lm.cache_documents(max_mb=64)
    try:
        sampled = GenerationConfig(max_new_tokens=5, temperature=1.0, seed=3)
        assert lm.generate(prompt(DOCS[:2]), sampled) == lm.generate(prompt(DOCS[1::-1]), sampled)
    finally:
        store.clear()


def test_a_request_is_read_the_same_way_whatever_batch_it_comes_in(lm):
    """A prompt with one set reuses documents, one with none cannot: in one batch each is read
    as it is alone (the batch never sends the first through the full-prompt forward)."""
    requests = [lm.score_request(prompt(DOCS[:3]), OPTIONS), lm.score_request("Question: which one jumps?\nAnswer:", OPTIONS)]
    alone = [lm.score_encoded([r])[0] for r in requests]
    assert lm.score_encoded(requests) == alone
    prompts = [lm.encode(prompt(DOCS[:3])), lm.encode("Question: which one jumps?\nAnswer:")]
    config = GenerationConfig(max_new_tokens=4)
    assert lm.generate_encoded(prompts, config)[0] == lm.generate_encoded(prompts[:1], config)[0]


# A question over cached documents reads the pieces where they lie (doccache/attention.py).

LONG = [f"Record {i}: the {w} code is {100 + i}, kept in the {w} box by the door.\n" for i, w in enumerate(["red", "blue", "old", "new", "tall"])]


@pytest.fixture(params=["llama", "gemma3_text-window-12", "gemma2"])
def windowed(request):
    """Llama; Gemma 3 with a window of 12 positions, so that a question sees some documents in
    part and others not at all in its sliding layers; Gemma 2's soft-capped logits (the formula, not the CPU kernel)."""
    arch, _, window = request.param.partition("-window-")
    return SetLLM(tiny_model(arch, **({"sliding_window": int(window)} if window else {})), tiny_tokenizer(), "sbp")


def test_a_question_over_cached_pieces_scores_as_the_whole_prompt_does_up_to_rounding(windowed):
    lm = windowed
    request = lm.score_request(prompt(LONG), OPTIONS)
    [whole] = scoring.score_requests(lm.model, lm.variant, lm.pad_id, [request])  # one forward over the whole prompt
    [cached] = lm.score_encoded([request])
    # The pieces' attention is the whole prompt's, regrouped: other shapes, other rounding.
    torch.testing.assert_close([s.logprob for s in cached], [s.logprob for s in whole], rtol=0, atol=1e-5)
    enc = lm.encode(prompt(LONG))
    _, got = doccache.prefill(lm.model, lm.variant, enc, doccache.DocumentCache.scratch(), doccache.reading_key(lm.model, lm.tokenizer, lm.variant))
    _, want = scoring.prefill(lm.model, lm.variant, collate([enc], lm.variant.positions, lm.pad_id))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_one_call_per_piece_is_one_call_over_the_joined_keys_up_to_rounding(windowed, monkeypatch):
    """The CPU's way (a call per piece, log-sum-exps combined) and a GPU's (one call over the
    joined keys), each the same bits alone and among others."""
    lm = windowed
    requests = [lm.score_request(prompt(d), OPTIONS) for d in (LONG, LONG[:2], LONG[3:])]
    per_piece = [lm.score_encoded([r])[0] for r in requests]
    assert lm.score_encoded(requests) == per_piece
    monkeypatch.setattr(attention, "PER_PIECE", set())
    joined = [lm.score_encoded([r])[0] for r in requests]
    assert lm.score_encoded(requests) == joined
    for a, b in zip(per_piece, joined):
        torch.testing.assert_close([s.logprob for s in a], [s.logprob for s in b], rtol=0, atol=1e-5)


def test_questions_get_the_same_bits_alone_together_and_from_pieces_anywhere_in_memory(lm):
    """Requests over other sets batched, and the pieces copied to storage 4 bytes off (as a
    file read back from disk may lie): the same bits."""
    requests = [lm.score_request(prompt(d), OPTIONS) for d in (LONG, LONG[::-2], LONG[1:3])]
    store = lm.cache_documents(max_mb=64)
    try:
        alone = [lm.score_encoded([r])[0] for r in requests]
        assert lm.score_encoded(requests[::-1]) == alone[::-1]
        for key, (layers, _) in list(store._pieces.items()):
            store._pieces.pop(key)
            store.bytes = 0
            store.put(key, [(_off_by_one_float(k), _off_by_one_float(v)) for k, v in layers])
        assert [lm.score_encoded([r])[0] for r in requests] == alone
    finally:
        store.clear()


def _off_by_one_float(t: torch.Tensor) -> torch.Tensor:
    buffer = torch.empty(t.numel() + 1, dtype=t.dtype)
    out = buffer[1:].view(t.shape)
    out.copy_(t)
    assert out.data_ptr() % 64 != 0
    return out


def test_a_question_over_cached_documents_copies_no_piece(lm):
    """No op of a question's forward makes a tensor of the prompt's length: the pieces are
    read where the store keeps them, never joined (nor gathered, nor put in a KV cache)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    request = lm.score_request(prompt(LONG), OPTIONS)
    store = lm.cache_documents(max_mb=64)
    try:
        lm.score_encoded([request])  # every piece computed and kept
        n_cached = len(request.prompt) - len(driver._Pieces.of(request.prompt).suffix)
        head_dim = lm.model.config.head_dim

        class Lengths(TorchDispatchMode):
            longest = 0

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in out if isinstance(out, (tuple, list)) else (out,):
                    if isinstance(t, torch.Tensor) and t.dim() == 4 and t.shape[-1] == head_dim:
                        Lengths.longest = max(Lengths.longest, t.shape[-2])
                return out

        with Lengths():
            lm.score_encoded([request])
        assert store.stats().misses == 6  # the prefix and five documents, computed once, before
        assert 0 < Lengths.longest < n_cached / 3  # the longest keys made: a question's own or a (query) block, never the prompt's
    finally:
        store.clear()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("inputs,outputs", [(1536, 576), (576, 1536), (576, 576), (576, 192)])  # the embedded model's widths
def test_a_question_row_block_gets_the_bits_it_gets_among_blocks(threads, inputs, outputs):
    """A question's forward multiplies its own row blocks (driver.QUESTION_ROWS): a lone
    block (one short question) must get the bits it gets among others, at 1 and 2 threads."""
    from setllm.core.model import install

    rows = driver.QUESTION_ROWS["cpu"]
    torch.manual_seed(0)
    layer = torch.nn.Linear(inputs, outputs, bias=False)
    x = torch.randn(4 * rows, inputs)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            alone = install.blocked_linear(layer, rows, x[:rows])
            among = install.blocked_linear(layer, rows, x)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(alone, among[:rows])
