"""A long prompt's attention split by set element (:mod:`setllm.core.attention.element_blocks`): every
query row sees exactly the keys the dense mask gives it, scores equal the one dense block's
up to rounding, and a request keeps its bits alone, in a batch and in any order of its set."""

from __future__ import annotations

import itertools

import pytest
import torch
from tiny import tiny_model, tiny_tokenizer

from setllm import Set, SetLLM, mc_prompt
from setllm.core.attention import element_blocks, packed_attention
from setllm.core.attention.packed_attention import PAD
from setllm.core.forward import scoring
from setllm.core.layout.masks import TokenLayout, render_bool, variant_mask
from setllm.core.tokens.batch import padded_layout

OPTIONS = ["apple", "dog", "fox"]
DOCS = [f"doc {i}: the {w} sits by the river at dawn\n" for i, w in enumerate(["cat", "owl", "fox", "elk", "yak", "emu"])]


@pytest.fixture(scope="module")
def lm():
    model = tiny_model("llama", hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    return SetLLM(model, tiny_tokenizer(), "setmask-setpe")


@pytest.fixture
def short_prompts_split(monkeypatch):
    """The tiny model's context is 256 tokens: split from 64 on, wherever the blocks are smaller
    than the dense one (its six short documents pad to 16-token buckets)."""
    monkeypatch.setattr(element_blocks, "MIN_TOKENS", 64)
    monkeypatch.setattr(element_blocks, "MAX_AREA", 0.9)


def prompt(docs, question="Which animal is by the river?"):
    return ["Documents:\n", Set(docs), *mc_prompt(question, OPTIONS).segments]


def request(lm, docs, question="Which animal is by the river?"):
    p = prompt(docs, question)
    return scoring.ScoreRequest(lm.encode(p), [lm.response_ids(p, o) for o in OPTIONS])


def run(lm, reqs):
    return scoring.score_requests(lm.model, lm.variant, lm.pad_id, reqs)


def dense(lm, enc):
    layout, _ = padded_layout(enc, lm.variant.positions, scoring.round_up(len(enc), scoring.PROMPT_BUCKET))
    keys = [PAD] * (len(layout[0]) - len(enc)) + list(range(len(enc)))
    tensors = TokenLayout(*(torch.tensor([f]) for f in layout))
    mask = render_bool(variant_mask("setmask", tensors), 1, len(keys), len(keys))[0, 0]
    return layout, keys, mask


def test_every_row_sees_the_keys_the_dense_mask_gives_it(lm, short_prompts_split):
    layout, keys, mask = dense(lm, lm.encode(prompt(DOCS)))
    blocks = element_blocks.split("setmask", layout, keys, scoring.PROMPT_BUCKET, None, "cpu", rest=(4, len(keys) + 4))
    assert blocks is not None
    shapes = [(len(q), len(k)) for q, k, _ in blocks]
    assert len(set(shapes[: len(DOCS)])) == 1  # one block per document, all of one shape: they stack
    assert set(shapes[len(DOCS) :]) == {(4, len(keys) + 4)}  # the rest in blocks of an option row's shape
    seen_rows = []
    for queries, block_keys, fields in blocks:
        n, q = len(block_keys), len(queries)
        block_mask = render_bool(variant_mask("setmask", TokenLayout(*(torch.tensor([f]) for f in fields))), 1, q, n, q_offset=n - q)[0, 0]
        for r, row in enumerate(queries):
            if row == PAD:
                continue
            seen_rows.append(row)
            want = {keys[j] for j in mask[keys.index(row)].nonzero().flatten().tolist()}
            got = {block_keys[j] for j in block_mask[r].nonzero().flatten().tolist()}
            assert got == want, row
    assert sorted(seen_rows) == [k for k in keys if k != PAD]  # every real row is read once


def test_documents_blocks_are_smaller_than_the_dense_block(lm, short_prompts_split):
    layout, keys, _ = dense(lm, lm.encode(prompt(DOCS)))
    blocks = element_blocks.split("setmask", layout, keys, scoring.PROMPT_BUCKET, None, "cpu")
    area = sum(len(q) * len(k) for q, k, _ in blocks)
    assert area < 0.6 * len(keys) ** 2


@pytest.mark.parametrize("why", ["sbp", "short", "window", "cuda"])
def test_one_dense_block_where_a_split_does_not_apply(lm, why, monkeypatch):
    layout, keys, _ = dense(lm, lm.encode(prompt(DOCS)))
    monkeypatch.setattr(element_blocks, "MAX_AREA", 0.9)
    if why != "short":  # the prompt is 193 tokens
        monkeypatch.setattr(element_blocks, "MIN_TOKENS", 64)
    assert (element_blocks.split("setmask", layout, keys, scoring.PROMPT_BUCKET, None, "cpu") is None) == (why == "short")
    kind, window, device = ("sbp" if why == "sbp" else "setmask"), (8 if why == "window" else None), ("cuda" if why == "cuda" else "cpu")
    assert element_blocks.split(kind, layout, keys, scoring.PROMPT_BUCKET, window, device) is None


def test_scores_equal_the_dense_block_up_to_rounding(lm, short_prompts_split, monkeypatch):
    reqs = [request(lm, DOCS), request(lm, DOCS[:4], "Which animal sits at dawn?")]
    split = run(lm, reqs)
    monkeypatch.setattr(element_blocks, "SPLIT_DEVICES", set())
    whole = run(lm, reqs)
    assert [s.logprob for row in split for s in row] == pytest.approx([s.logprob for row in whole for s in row], abs=1e-5)
    assert split != whole  # another composition: the split did run


@pytest.mark.usefixtures("threads")
def test_a_split_request_keeps_its_bits_alone_in_a_batch_and_in_any_order(lm, short_prompts_split):
    reqs = [request(lm, DOCS), request(lm, DOCS[:4], "Which animal sits at dawn?"), request(lm, DOCS[1:3])]
    alone = [run(lm, [r])[0] for r in reqs]
    assert run(lm, reqs) == alone
    assert run(lm, reqs[::-1]) == alone[::-1]
    first = [s.logprob for s in alone[0]]
    for order in itertools.islice(itertools.permutations(DOCS), 1, 24, 5):
        got = [s.logprob for s in run(lm, [request(lm, list(order))])[0]]
        assert got == pytest.approx(first, abs=1e-5)  # the rest's keys come in the set's order: rounding only


def test_the_rest_of_the_prompt_shares_the_options_attention_call(lm, short_prompts_split, monkeypatch):
    """Options of up to OPTION_BUCKET tokens: the prompt's text rows ride in their call, so a
    split prompt has the calls per layer of an unsplit one (two: its blocks, the options)."""
    options = ["dog", "fox", "cow"]
    assert {scoring.round_up(len(lm.response_ids(prompt(DOCS), o)), scoring.OPTION_BUCKET) for o in options} == {scoring.OPTION_BUCKET}
    plans = []
    real = packed_attention.plan
    monkeypatch.setattr(packed_attention, "plan", lambda *a: plans.append(real(*a)) or plans[-1])
    p = prompt(DOCS)
    run(lm, [scoring.ScoreRequest(lm.encode(p), [lm.response_ids(p, o) for o in options])])
    assert len(plans[0].groups) == 2
    assert plans[0].groups[0].queries.shape[0] == len(DOCS)  # every document's block in one call
