"""Sliding windows past the window: set prompts longer than a sliding layer's window.

The masks apply the window in positions (:func:`setllm.core.layout.masks.window_mask`), per layer type
where layers differ. Checked against transformers' own sliding-window masks (the model run
natively on plain text), between the dense ladder and the packed scoring driver, and for
order invariance when the window cuts into a set.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import reference
import torch
from tiny import tiny_model, tiny_tokenizer

from setllm import Set, SetLLM
from setllm.core.forward import runtime, scoring
from setllm.core.layout import variants
from setllm.core.model import fit
from setllm.core.tokens.batch import collate
from setllm.core.tokens.encoding import EncodedPrompt
from setllm.errors import InputError

WINDOW = 8
# Two layers: one sliding, one full (Gemma 3 has five sliding to one full; the tests need both kinds).
FAMILIES = {
    "gemma3_text": dict(sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"]),
    "gemma2": dict(sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"]),
    "qwen2": dict(sliding_window=WINDOW, use_sliding_window=True, max_window_layers=1, layer_types=["full_attention", "sliding_attention"]),
    "mistral": dict(sliding_window=WINDOW),  # every layer slides
}


def model_of(arch):
    return tiny_model(arch, **FAMILIES[arch])


@pytest.mark.parametrize("arch", list(FAMILIES))
def test_layer_windows_name_each_layer_type(arch):
    windows = fit.layer_windows(model_of(arch).config)
    assert windows == ({"sliding_attention": WINDOW} if arch == "mistral" else {"sliding_attention": WINDOW, "full_attention": None})


@pytest.mark.parametrize("arch", list(FAMILIES))
def test_causal_pe_past_the_window_is_the_model_itself(arch):
    """Under causal-pe, positions are token indices, so the set-aware window is transformers'
    own: the ladder gives the logits of the model run natively (its own sliding masks)."""
    model = model_of(arch)
    ids = torch.randint(4, 400, (1, 3 * WINDOW), generator=torch.Generator().manual_seed(0))
    enc = EncodedPrompt.plain(ids[0].tolist())
    batch = collate([enc], "pe", 3)
    ours = runtime.forward(model, variants.get_variant("causal-pe"), batch.input_ids, batch.position_ids, batch.layout).logits
    with torch.no_grad():
        native = model(input_ids=ids).logits
    torch.testing.assert_close(ours, native, rtol=1e-4, atol=1e-4)
    # And the window matters: without it the logits past the window differ.
    with torch.no_grad():
        full = runtime.forward(model, variants.get_variant("causal-pe"), batch.input_ids, batch.position_ids, _no_window(batch.layout)).logits
    assert not torch.allclose(full[0, WINDOW + 1 :], native[0, WINDOW + 1 :], atol=1e-4)


def _no_window(layout):
    """``layout`` with every position 0: a window in positions then cuts nothing."""
    return dataclasses.replace(layout, positions=torch.zeros_like(layout.positions))


LONG_OPTIONS = ["a red apple from the tree", "a dog that barks at night", "a fox", "the city of Paris in France"]


def long_request(lm, options):
    prompt = ["Which of these is a fruit that grows on trees and is eaten raw?\n", Set([o + "\n" for o in options]), "Answer:"]
    return prompt, [lm.response_ids(prompt, o) for o in options]


@pytest.mark.parametrize("arch", list(FAMILIES))
@pytest.mark.parametrize("variant", ["setmask-setpe", "prefix-setpe", "causal-pe"])
def test_scoring_driver_applies_the_window_as_the_ladder_does(arch, variant):
    """The packed driver (sliding layers get windowed segment masks) against the dense ladder
    (a mask per layer type), on a set prompt several windows long."""
    lm = SetLLM(model_of(arch), tiny_tokenizer(), variant)
    prompt, options = long_request(lm, LONG_OPTIONS)
    enc = lm.encode(prompt)
    assert len(enc) > 3 * WINDOW
    got = scoring.score_requests(lm.model, lm.variant, lm.pad_id, [scoring.ScoreRequest(enc, options)])[0]
    batch = collate([enc], lm.variant.positions, lm.pad_id)
    cache, first = scoring.prefill(lm.model, lm.variant, batch)
    want = reference.score_continuations(lm.model, lm.variant, batch, cache, first, [options])[0]
    assert [s.logprob for s in got] == pytest.approx([lp for lp, _ in want], abs=1e-4)


@pytest.mark.parametrize("arch", ["gemma3_text", "mistral"])
def test_a_window_that_cuts_a_set_keeps_the_order_invariance(arch):
    lm = SetLLM(model_of(arch), tiny_tokenizer(), "setmask-setpe", exact=False)  # elements in the order given
    seen = []
    for order in itertools.permutations(LONG_OPTIONS[:3]):
        prompt, _ = long_request(lm, order)
        assert len(lm.encode(prompt)) > 2 * WINDOW
        seen.append(sorted((s.text, s.logprob) for s in lm.score(prompt, LONG_OPTIONS[:3])))
    for other in seen[1:]:
        assert [t for t, _ in other] == [t for t, _ in seen[0]]
        assert [lp for _, lp in other] == pytest.approx([lp for _, lp in seen[0]], abs=1e-5)


def test_a_window_in_token_indices_would_not_be_invariant():
    """The reason the window counts positions: counted in token indices, it cuts a later
    element where it spares an earlier one, and the scores move with the order."""
    lm = SetLLM(model_of("gemma3_text"), tiny_tokenizer(), "setmask-setpe", exact=False)
    by_index, by_position = [], []
    for order in itertools.permutations(LONG_OPTIONS[:3]):
        prompt, _ = long_request(lm, order)
        enc = lm.encode(prompt)
        batch = collate([enc], "setpe", lm.pad_id)
        layout = batch.layout
        indices = dataclasses.replace(layout, positions=torch.arange(layout.shape[1])[None])
        by_index.append(runtime.forward(lm.model, lm.variant, batch.input_ids, batch.position_ids, indices).logits[0, -1])
        by_position.append(runtime.forward(lm.model, lm.variant, batch.input_ids, batch.position_ids, layout).logits[0, -1])
    assert any(not torch.allclose(by_index[0], other, atol=1e-3) for other in by_index[1:])
    for other in by_position[1:]:
        torch.testing.assert_close(other, by_position[0], rtol=1e-5, atol=1e-5)


def test_generation_past_the_window_matches_transformers_generate():
    """Greedy decoding under causal-pe past the window: our loop (a full cache, the window in
    the mask) and ``model.generate`` (its own sliding cache) pick the same tokens."""
    model = model_of("gemma3_text")
    lm = SetLLM(model, tiny_tokenizer(), "causal-pe")
    ids = torch.randint(4, 400, (1, 2 * WINDOW), generator=torch.Generator().manual_seed(1))
    batch = collate([EncodedPrompt.plain(ids[0].tolist())], "pe", lm.pad_id)
    from setllm.core.forward.generation import GenerationConfig, generate_tokens

    ours = generate_tokens(lm.model, lm.tokenizer, lm.variant, batch, GenerationConfig(max_new_tokens=12))[0][1]
    with torch.no_grad():
        native = model.generate(ids, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=3)[0, ids.shape[1] :].tolist()
    assert ours == native[: len(ours)] and len(ours) >= 1


def test_untested_families_still_stop_at_the_window():
    from transformers import AutoConfig

    config = AutoConfig.for_model("mixtral", sliding_window=16, max_position_embeddings=64)
    fit.check_length(config, 16)
    with pytest.raises(InputError, match="17 tokens is longer than the model's sliding attention window \\(16\\)"):
        fit.check_length(config, 17)
    fit.check_length(model_of("gemma3_text").config, 60)  # a verified family: no window limit
