"""The one scoring driver, :func:`setllm.core.forward.scoring.score_requests`: a request's scores do not
depend on what else is scored with it (fixed shapes), and equal the plain unpadded ladder
``prefill -> score_continuations`` (tests/reference.py) up to float rounding."""

from __future__ import annotations

import pytest
import reference
from tiny import tiny_model, tiny_tokenizer

from setllm import SetLLM, mc_prompt
from setllm.core.forward import scoring
from setllm.core.tokens.batch import collate

OPTIONS = ["apple", "dog", "fox", "water"]


@pytest.fixture(scope="module")
def lm():
    # 128 wide: wide enough that a naive batch changes low bits on a typical CPU BLAS.
    model = tiny_model("llama", hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32)
    return SetLLM(model, tiny_tokenizer(), "setmask-setpe")


def request(lm, words: int, options=OPTIONS) -> scoring.ScoreRequest:
    prompt = mc_prompt("Which of these is a fruit?" + " Answer with one word." * words, options)
    return scoring.ScoreRequest(lm.encode(prompt), [lm.response_ids(prompt, o) for o in options])


def run(lm, requests):
    return scoring.score_requests(lm.model, lm.variant, lm.pad_id, requests)


@pytest.mark.usefixtures("threads")
def test_a_request_scores_the_same_bits_whatever_its_companions(lm):
    # Prompt lengths on both sides of a bucket edge, option sets of several lengths, 1 to 9 requests.
    reqs = [request(lm, w) for w in range(6)] + [request(lm, 1, ["a banana split", "dog"]), request(lm, 2, OPTIONS[:2])]
    lengths = sorted({-(-len(r.prompt) // scoring.PROMPT_BUCKET) for r in reqs})
    assert len(lengths) >= 2  # the requests do straddle a prompt bucket edge
    alone = [run(lm, [r])[0] for r in reqs]
    for size in range(2, len(reqs) + 1):
        for start in (0, 3):
            group = [reqs[(start + i) % len(reqs)] for i in range(size)]
            assert run(lm, group) == [alone[(start + i) % len(reqs)] for i in range(size)], (size, start)


def test_equals_the_unpadded_ladder_up_to_rounding(lm):
    reqs = [request(lm, w) for w in (0, 3)]
    got = run(lm, reqs)
    batch = collate([r.prompt for r in reqs], lm.variant.positions, lm.pad_id)
    cache, next_logprobs = scoring.prefill(lm.model, lm.variant, batch)
    want = reference.score_continuations(lm.model, lm.variant, batch, cache, next_logprobs, [r.options for r in reqs])
    # Other shapes, other kernels: equal up to float rounding, not bit for bit.
    assert [s.logprob for row in got for s in row] == pytest.approx([lp for row in want for lp, _ in row], abs=1e-5)
    assert [[s.n_tokens for s in row] for row in got] == [[n for _, n in row] for row in want]


def test_equal_requests_share_work_and_options_come_back_in_the_callers_order(lm, monkeypatch):
    calls = []
    real = scoring._packed_prefill
    monkeypatch.setattr(scoring, "_packed_prefill", lambda model, packed, rows: calls.append(len(packed.encs)) or real(model, packed, rows))
    a, b = request(lm, 1), request(lm, 1, OPTIONS[::-1])
    got = run(lm, [a, b, a])
    assert calls == [1]  # one prefill, of the one distinct prompt
    assert got[1] == got[0][::-1] and got[2] == got[0]


def test_many_prompts_share_one_packed_forward(lm, monkeypatch):
    calls = []
    real = scoring.packed_forward
    monkeypatch.setattr(scoring, "packed_forward", lambda model, plan, ids, *a: calls.append(len(ids)) or real(model, plan, ids, *a))
    reqs = [request(lm, w) for w in range(4)]  # four prompt lengths, two prompt buckets
    run(lm, reqs)
    assert len(calls) == 1  # one forward: the four prompts and, after them, all their option rows
    # Real tokens only (the forward pads them once, to whole row blocks): the prompts, then tokens 0..n-1 of each option.
    assert calls[0] == sum(len(r.prompt) + sum(map(len, r.options)) for r in reqs)


def test_rows_on_the_cache_score_the_bits_of_rows_in_the_prompts_forward(lm, monkeypatch):
    """Rows past the first OPTION_TOKENS run on the prompts' cache: the same keys and values,
    the same blocks, so the same bits as rows read in the prompts' own forward."""
    reqs = [request(lm, w) for w in range(4)]
    together = run(lm, reqs)
    calls = []
    real = scoring.packed_forward
    monkeypatch.setattr(scoring, "packed_forward", lambda model, plan, ids, *a: calls.append(len(ids)) or real(model, plan, ids, *a))
    monkeypatch.setattr(scoring, "OPTION_TOKENS", 5)
    assert run(lm, reqs) == together and len(calls) > 2


def test_greedy_flag_and_one_token_options(lm):
    prompt = mc_prompt("Pick one.", OPTIONS)
    enc = lm.encode(prompt)
    first = scoring.prefill(lm.model, lm.variant, collate([enc], lm.variant.positions, lm.pad_id))[1][0]
    top = int(first.argmax())
    other = (top + 1) % first.shape[0]
    got = run(lm, [scoring.ScoreRequest(enc, [[top], [other]])])[0]
    assert [s.greedy for s in got] == [True, False] and [s.n_tokens for s in got] == [1, 1]
    assert got[0].logprob == pytest.approx(float(first[top]), abs=1e-5)


@pytest.mark.usefixtures("threads")
@pytest.mark.parametrize("arch", ["gpt2", "qwen3"])
def test_other_architectures_score_the_same_bits_with_companions(arch):
    """gpt2's linear layers are Conv1D, not nn.Linear: they get the fixed row blocks too."""
    lm = SetLLM(tiny_model(arch, hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32)
                if arch != "gpt2" else tiny_model(arch, n_embd=128, n_head=4), tiny_tokenizer(), "setmask-setpe")
    reqs = [request(lm, w) for w in range(5)]
    alone = [run(lm, [r])[0] for r in reqs]
    assert run(lm, reqs) == alone and run(lm, reqs[::-1]) == alone[::-1]


def test_an_empty_option_is_refused(lm):
    from setllm.errors import InputError

    with pytest.raises(InputError, match="tokenizes to nothing"):
        run(lm, [scoring.ScoreRequest(request(lm, 0).prompt, [[]])])


@pytest.mark.usefixtures("threads")
def test_a_wide_vocabulary_reads_option_logits_in_wide_blocks_with_the_same_bits_alone(monkeypatch):
    """Past WIDE_VOCAB words (Gemma 3: 262k) the forwards that read option logits take the
    head in blocks of WIDE_HEAD_ROWS; a request still scores the same bits alone or with companions."""
    lm = SetLLM(tiny_model("gemma3_text", vocab_size=scoring.WIDE_VOCAB + 100, hidden_size=64), tiny_tokenizer(), "setmask-setpe")
    head_rows = []
    real = scoring.fixed_row_linears
    monkeypatch.setattr(scoring, "fixed_row_linears", lambda model, rows, head: head_rows.append(head) or real(model, rows, head))
    reqs = [request(lm, w, ["a banana split", "dog", "a fox"]) for w in range(4)]
    alone = [run(lm, [r])[0] for r in reqs]
    assert head_rows[0] == scoring.WIDE_HEAD_ROWS  # the prompts' forward reads the option rows too
    assert run(lm, reqs) == alone and run(lm, reqs[::-1]) == alone[::-1]
