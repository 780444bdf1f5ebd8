"""Generation: greedy equals argmax of full forwards, sampling is seeded, stops work."""

import pytest
import torch
from tiny import tiny_model, tiny_tokenizer

from setllm import GenerationConfig, Set, SetLLM, as_prompt
from setllm.core.forward.runtime import forward
from setllm.core.tokens.batch import collate

PROMPT = as_prompt(["Question: Which fruit?\n\nChoices:\n", Set(["apple\n", "dog\n"]), "Answer:"])


@pytest.fixture(scope="module")
def lm():
    return SetLLM(tiny_model("llama"), tiny_tokenizer())


def greedy_by_full_forwards(lm, prompt, n):
    enc, tokens = lm.encode(prompt), []
    for _ in range(n):
        b = collate([enc], lm.variant.positions, lm.pad_id, responses=[tokens])
        with torch.no_grad():
            logits = forward(lm.model, lm.variant, b.input_ids, b.position_ids, b.layout).logits[0, -1]
        tokens.append(int(logits.argmax()))
    return tokens


def test_greedy_matches_full_forward_argmax(lm):
    tokens = greedy_by_full_forwards(lm, PROMPT, 6)
    eos = lm.tokenizer.eos_token_id
    if eos in tokens:
        tokens = tokens[: tokens.index(eos)]
    assert lm.generate_many([PROMPT], GenerationConfig(max_new_tokens=6)) == [lm.tokenizer.decode(tokens, skip_special_tokens=True)]


def test_batched_generation_equals_one_by_one(lm):
    prompts = [PROMPT, as_prompt(["one two three:\n", Set(["fox\n", "dog\n", "water\n"]), "seven:"])]
    cfg = GenerationConfig(max_new_tokens=5)
    batched = SetLLM(lm.model, lm.tokenizer, batch_size=2).generate_many(prompts, cfg)
    assert batched == [lm.generate(p, cfg) for p in prompts]


def test_sampling_is_seeded_and_varies_with_seed(lm):
    cfg = lambda seed: GenerationConfig(max_new_tokens=8, temperature=1.5, top_p=0.95, seed=seed)  # noqa: E731
    a, b = lm.generate_many([PROMPT], cfg(1)), lm.generate_many([PROMPT], cfg(1))
    assert a == b
    assert len({lm.generate(PROMPT, cfg(s)) for s in range(2, 6)} | set(a)) > 1


def test_generation_is_invariant_in_exact_mode(lm):
    cfg = GenerationConfig(max_new_tokens=6, temperature=1.0, seed=3)
    assert lm.generate_many([PROMPT], cfg) == lm.generate_many([PROMPT.permuted([[1, 0]])], cfg)


def test_stop_string_cuts_the_text(lm):
    full = lm.generate(PROMPT, GenerationConfig(max_new_tokens=8))
    assert len(full) > 2
    stop = full[1:3]
    out = lm.generate(PROMPT, GenerationConfig(max_new_tokens=8, stop=(stop,)))
    assert out == full[: full.index(stop)]


def test_rows_stopping_at_different_steps_end_the_batch_early(lm):
    """A row whose stop string came many tokens ago still counts as stopped."""
    from reference import generate

    second = as_prompt(["one two three:\n", Set(["fox\n", "dog\n", "water\n"]), "seven:"])
    enc = [lm.encode(p) for p in (PROMPT, second)]
    batch = lambda: collate(enc, lm.variant.positions, lm.pad_id)  # noqa: E731
    n = 40
    full = generate(lm.model, lm.tokenizer, lm.variant, batch(), GenerationConfig(max_new_tokens=n))
    assert all(len(text) > 30 for text in full)
    # Row 0 stops at once; row 1 at a 3-character string first seen about 25 tokens later.
    late = next(full[1][k : k + 3] for k in range(25, len(full[1]) - 3)
                if full[1].find(full[1][k : k + 3]) == k and full[1][k : k + 3] not in full[0])
    stops = (full[0][:3], late)
    assert full[0].count(stops[0]) == 1 and stops[0] not in full[1]  # row 0 hits its stop exactly once
    steps = []
    out = generate(lm.model, lm.tokenizer, lm.variant, batch(), GenerationConfig(max_new_tokens=n, stop=stops),
                   on_token=lambda tokens: steps.append(len(tokens)))
    assert len(steps) < n
    for text, got in zip(full, out):
        assert got == text[: min(text.index(s) for s in stops if s in text)]


def test_eos_stops_generation(lm):
    model = lm.model
    eos = lm.tokenizer.eos_token_id
    with torch.no_grad():  # make EOS the most likely token everywhere
        model.lm_head.bias = torch.nn.Parameter(torch.zeros(model.config.vocab_size))
        model.lm_head.bias[eos] = 1e4
    try:
        assert lm.generate_many([PROMPT], GenerationConfig(max_new_tokens=8)) == [""]
    finally:
        model.lm_head.bias = None


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_new_tokens=0), "max_new_tokens must be >= 1"),
    (dict(temperature=-1), "temperature must be >= 0"),
    (dict(top_p=0), r"top_p must be in \(0, 1\]"),
])
def test_bad_generation_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GenerationConfig(**kwargs)


def test_a_character_cut_by_max_new_tokens_is_dropped_not_replaced():
    """Byte-level tokens can stop inside a multi-byte character; the text must not end in U+FFFD."""
    from setllm.core.forward.generation import _finish

    tok = tiny_tokenizer()
    ids = tok.encode("日本", add_special_tokens=False)  # 6 byte tokens, 3 per character
    assert tok.decode(ids[:4]).endswith("\ufffd")  # what a plain decode gives
    assert [_finish(tok, ids[:n], (), set()) for n in range(1, 7)] == ["", "", "日", "日", "日", "日本"]


@pytest.mark.parametrize("every", [3, 8])
def test_steps_run_ahead_of_the_host_without_changing_any_text(lm, monkeypatch, every):
    """On a GPU the host looks at the tokens every few steps (generation.CHECK_EVERY): a row that
    ended within a run of steps is cut where it ended, stop strings and EOS as before."""
    from setllm.core.forward import generation

    prompts = [PROMPT, as_prompt(["one two three:\n", Set(["fox\n", "dog\n", "water\n"]), "seven:"])]
    configs = [GenerationConfig(max_new_tokens=n) for n in (1, 7, 20)]
    looked = {cfg.max_new_tokens: lm.generate_many(prompts, cfg) for cfg in configs}
    full = looked[20]
    stops = [GenerationConfig(max_new_tokens=20, stop=[full[0][2:4]]), GenerationConfig(max_new_tokens=20, stop=[full[1][5:7]])]
    stopped = [lm.generate_many(prompts, cfg) for cfg in stops]
    steps = []
    real = generation.decode_one_token
    monkeypatch.setattr(generation, "decode_one_token", lambda *a: steps.append(1) or real(*a))
    monkeypatch.setitem(generation.CHECK_EVERY, "cpu", every)
    assert {cfg.max_new_tokens: lm.generate_many(prompts, cfg) for cfg in configs} == looked
    assert [lm.generate_many(prompts, cfg) for cfg in stops] == stopped
    assert steps  # the steps did run through the chunked loop


def test_sampling_survives_a_tiny_temperature_and_a_tiny_top_p():
    """A top_p below float32's smallest number keeps the likeliest token (it used to drop every
    token), a temperature that overflows the scaled logits samples the likeliest one (it used to
    give NaN), and an empty stop string is refused (it ended every answer before it began)."""
    from setllm.core.forward.generation import sample
    from setllm.errors import InputError

    logits = torch.tensor([[1.0, 3.0, 2.0], [5.0, -1.0, 0.0]])
    for config in (GenerationConfig(temperature=1.0, top_p=5e-324), GenerationConfig(temperature=1e-38)):
        assert sample(logits, config, torch.Generator().manual_seed(0)).tolist() == [1, 0]
    with pytest.raises(InputError, match="stop strings must be non-empty"):
        GenerationConfig(stop=["\n", ""])
