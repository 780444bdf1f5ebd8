"""Packed attention (:mod:`setllm.core.attention.packed_attention`) against an independent construction: each request's
block gathered by hand, padded, and put through the attention formula written out."""

from __future__ import annotations

import pytest
import reference
import torch
from tiny import tiny_model, tiny_tokenizer

from setllm import SetLLM, mc_prompt
from setllm.core.attention import packed_attention
from setllm.core.forward import scoring

PAD = packed_attention.PAD


def by_hand(q, k, v, segs, scale, softcap=None):
    """Every segment alone: its rows and keys gathered (padding = zero vectors), the dense
    formula, real rows written back."""
    heads, n_rep = q.shape[1], q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1)
    out = torch.zeros(q.shape[2], heads, v.shape[-1])
    for s in segs:
        rows = torch.stack([q[0, :, i] if i != PAD else torch.zeros(heads, q.shape[-1]) for i in s.queries], 1)
        keys = torch.stack([k[0, :, i] if i != PAD else torch.zeros(heads, k.shape[-1]) for i in s.keys], 1)
        vals = torch.stack([v[0, :, i] if i != PAD else torch.zeros(heads, v.shape[-1]) for i in s.keys], 1)
        logits = rows @ keys.transpose(-1, -2) * scale
        if softcap is not None:
            logits = torch.tanh(logits / softcap) * softcap
        weights = logits.masked_fill(~s.mask, float("-inf")).softmax(-1).nan_to_num(0.0)
        got = weights @ vals  # [H, Q, d]
        for j, i in enumerate(s.queries):
            if i != PAD:
                out[i] = got[:, j]
    return out[None]


def random_segments(gen):
    """Three requests in one packed row of 11 tokens: two of one shape (stacked), one other."""
    spans = [(0, 3), (3, 3), (6, 5)]  # (start, length)
    segs = []
    for start, n in spans:
        size = 4 if n <= 4 else 8
        idx = [PAD] * (size - n) + list(range(start, start + n))
        mask = torch.rand(size, size, generator=gen) < 0.7
        mask[:, : size - n] = False  # padding is never attended
        mask[torch.arange(size), torch.arange(size)] |= torch.tensor(idx) != PAD  # every real row sees itself
        segs.append(packed_attention.AttentionBlock(idx, idx, mask))
    return segs


@pytest.mark.parametrize("softcap", [None, 5.0])
def test_segment_attention_equals_each_request_by_hand(softcap):
    gen = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(1, 4, 11, 8, generator=gen), torch.randn(1, 2, 11, 8, generator=gen), torch.randn(1, 2, 11, 8, generator=gen)
    segs = random_segments(gen)
    plan = packed_attention.plan(segs, 11, 11)
    assert [g.queries.shape for g in plan.groups] == [(2, 4), (1, 8)]  # same shapes stacked
    token = packed_attention._PLAN.set(plan)
    try:
        got, _ = packed_attention.block_attention(None, q, k, v, None, scaling=0.3, softcap=softcap)
    finally:
        packed_attention._PLAN.reset(token)
    assert got.shape == (1, 11, 4, 8)
    torch.testing.assert_close(got, by_hand(q, k, v, segs, 0.3, softcap), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arch", ["gemma2", "gemma3_text"])
def test_soft_capped_and_sliding_families_score_like_the_plain_ladder(arch):
    """gemma2's soft-capped logits take the eager formula; gemma3's sliding layers take the
    windowed masks (past the window: tests/core/test_windows.py)."""
    from setllm.core.tokens.batch import collate

    lm = SetLLM(tiny_model(arch), tiny_tokenizer(), "setmask-setpe")
    options = ["apple", "dog", "fox"]
    reqs = [scoring.ScoreRequest(lm.encode(mc_prompt(q, options)), [lm.response_ids(mc_prompt(q, options), o) for o in options])
            for q in ("Which is a fruit?", "Which of these animals is a fast one that jumps?")]
    got = scoring.score_requests(lm.model, lm.variant, lm.pad_id, reqs)
    batch = collate([r.prompt for r in reqs], lm.variant.positions, lm.pad_id)
    cache, first = scoring.prefill(lm.model, lm.variant, batch)
    want = reference.score_continuations(lm.model, lm.variant, batch, cache, first, [r.options for r in reqs])
    assert [s.logprob for row in got for s in row] == pytest.approx([lp for row in want for lp, _ in row], abs=1e-4)
    assert scoring.score_requests(lm.model, lm.variant, lm.pad_id, reqs[:1])[0] == got[0]  # alone: the same bits


def test_a_call_leaves_the_attention_implementation_as_installed():
    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")
    before = lm.model.config._attn_implementation
    prompt = mc_prompt("Which is a fruit?", ["apple", "dog"])
    lm.score(prompt, ["apple", "dog"])
    assert lm.model.config._attn_implementation == before == "setllm:sdpa"  # the model's own sdpa outside a call
