"""Padding encoded prompts into tensors (:mod:`setllm.core.tokens.batch`)."""

from __future__ import annotations

import torch

from setllm.core.layout.positions import NOT_IN_SET
from setllm.core.tokens.batch import collate, continuation_layout
from setllm.core.tokens.encoding import EncodedPrompt

# "Q" {"a b", "c"} "A": set 0 with elements 0 (two tokens) and 1 (one token).
PROMPT = EncodedPrompt([5, 6, 7, 8, 9], [-1, 0, 0, 0, -1], [-1, 0, 0, 1, -1])
SHORT = EncodedPrompt.plain([3, 4])


def test_left_padding_puts_every_next_token_at_the_last_column():
    b = collate([PROMPT, SHORT], "setpe", pad_id=0)
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9], [0, 0, 0, 3, 4]]
    assert b.position_ids.tolist() == [[0, 1, 2, 1, 4], [0, 0, 0, 0, 1]]  # SetPE: both elements start at 1
    assert b.next_positions.tolist() == [5, 2]
    assert b.layout.valid.tolist()[1] == [False, False, False, True, True]
    assert b.layout.set_ids.tolist()[1] == [NOT_IN_SET] * 5


def test_a_fixed_length_and_right_padding():
    b = collate([SHORT], "pe", pad_id=0, length=4, padding_side="right")
    assert b.input_ids.tolist() == [[3, 4, 0, 0]] and b.layout.valid.tolist() == [[True, True, False, False]]
    assert collate([PROMPT], "pe", 0, length=3).input_ids.shape == (1, 5)  # never shorter than the longest row


def test_responses_continue_causally_after_the_prompt():
    b = collate([PROMPT], "setpe", pad_id=0, responses=[[11, 12]])
    assert b.position_ids.tolist() == [[0, 1, 2, 1, 4, 5, 6]]
    assert b.layout.is_prompt.tolist() == [[True] * 5 + [False] * 2]
    assert b.next_positions.tolist() == [7]
    nope = collate([PROMPT], "nope", pad_id=0, responses=[[11, 12]])
    assert nope.position_ids.tolist() == [[0] * 7] and nope.next_positions.tolist() == [0]


def test_continuation_layout_is_outside_every_set():
    layout = continuation_layout(torch.tensor([[True, True, False]]), torch.tensor([[7, 8, 9]]))
    assert layout.is_prompt.tolist() == [[False] * 3] and layout.set_ids.tolist() == [[NOT_IN_SET] * 3]
    assert layout.valid.tolist() == [[True, True, False]] and layout.positions.tolist() == [[7, 8, 9]]


def test_the_layout_carries_the_positions_the_model_reads():
    b = collate([PROMPT, PROMPT], "setpe", pad_id=0, responses=[[11], []])
    assert torch.equal(b.layout.positions, b.position_ids)
