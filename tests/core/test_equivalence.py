"""Equivalences that pin the implementation to the plain model and to itself."""

import pytest
import torch
from tiny import ARCHS, same_weights, tiny_model, tiny_tokenizer

from setllm import EncodedPrompt, Set, SetLLM, as_prompt, get_variant, mc_prompt
from setllm.core.forward.generation import decode_one_token
from setllm.core.forward.runtime import forward
from setllm.core.forward.scoring import prefill
from setllm.core.tokens.batch import collate

PROMPT = mc_prompt("Which city is the capital of France?", ["Budapest", "Paris", "Zurich"])
OPTIONS = ["Budapest", "Paris", "Zurich"]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def run(model, tok, variant, enc: EncodedPrompt):
    v = get_variant(variant)
    b = collate([enc], v.positions, tok.pad_token_id)
    with torch.no_grad():
        return forward(model, v, b.input_ids, b.position_ids, b.layout).logits[0]


@pytest.mark.parametrize("variant", ["prefix-setpe", "setmask-setpe"])
def test_set_variants_without_sets_equal_prefix_pe(variant, tok):
    model = tiny_model("llama")
    enc = SetLLM(model, tok).encode(["Question: Which city is the capital of France?\n", "Answer:"])
    assert torch.equal(run(model, tok, variant, enc), run(model, tok, "prefix-pe", enc))


@pytest.mark.parametrize("variant", ["prefix-pe", "prefix-setpe", "setmask-setpe", "causal-pe"])
def test_one_element_set_equals_the_same_text(variant, tok):
    model = tiny_model("qwen2")
    lm = SetLLM(model, tok)
    text = lm.encode(["Choices:\n", "Paris\n", "Answer:"])
    # The same tokens, but marked as a one-element set (as_prompt would already make it text).
    n, m = len(lm.codec.encoder.tokenize("Choices:\n", True)), len(lm.codec.encoder.tokenize("Paris\n"))
    marks = [-1] * n + [0] * m + [-1] * (len(text) - n - m)
    as_set = EncodedPrompt(text.input_ids, marks, marks)
    assert as_prompt(["Choices:\n", Set(["Paris\n"]), "Answer:"]) == as_prompt(["Choices:\nParis\nAnswer:"])
    torch.testing.assert_close(run(model, tok, variant, as_set), run(model, tok, variant, text), atol=1e-6, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_sdpa_eager_flex_agree(arch, tok):
    base = tiny_model(arch, attn="eager")
    impls = ["eager", "sdpa", "flex_attention"]
    if arch == "gemma2":
        impls.remove("sdpa")  # refused by transformers (soft-capping)
    if arch == "gpt2":
        impls.remove("flex_attention")  # not supported by transformers for gpt2
    enc = SetLLM(base, tok).encode(PROMPT)
    ref = run(base, tok, "setmask-setpe", enc)
    for impl in impls[1:]:
        torch.testing.assert_close(run(same_weights(base, impl), tok, "setmask-setpe", enc), ref, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["llama", "gemma2", "gpt2", "phi3"])
@pytest.mark.parametrize("variant", ["setmask-setpe", "causal-pe", "prefix-nope"])
def test_cached_decoding_equals_full_forward(arch, variant, tok):
    model = tiny_model(arch)
    lm = SetLLM(model, tok, variant)
    v = lm.variant
    enc = lm.encode(PROMPT)
    batch = collate([enc], v.positions, tok.pad_token_id)
    cache, logprobs = prefill(model, v, batch)
    tokens, step_logits = [], [logprobs[0]]
    for step in range(4):
        tokens.append(int(step_logits[-1].argmax()))
        logits, batch = decode_one_token(model, v, cache, batch, torch.tensor([tokens[-1]]), step)
        step_logits.append(logits[0].float().log_softmax(-1))
    full = collate([enc], v.positions, tok.pad_token_id, responses=[tokens])
    with torch.no_grad():
        ref = forward(model, v, full.input_ids, full.position_ids, full.layout).logits[0, len(enc) - 1 :].float().log_softmax(-1)
    torch.testing.assert_close(torch.stack(step_logits), ref, atol=5e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["llama", "gpt2", "gemma3_text"])
def test_batched_equals_unbatched(arch, tok):
    model = tiny_model(arch)
    prompts = [PROMPT, mc_prompt("What do plants need?", ["sunlight", "rocks"]), as_prompt(["one two:\n", Set(["a\n", "b c\n"]), "Answer:"])]
    options = [OPTIONS, ["sunlight", "rocks"], ["a", "b c"]]
    batched = SetLLM(model, tok, batch_size=3).score_many(prompts, options)
    single = SetLLM(model, tok, batch_size=1).score_many(prompts, options)
    for got, ref in zip(batched, single):
        assert [s.logprob for s in got] == pytest.approx([s.logprob for s in ref], abs=1e-4)


@pytest.mark.parametrize("arch", ["llama", "gemma2", "gpt2", "mistral"])
@pytest.mark.parametrize("variant", ["setmask-setpe", "causal-pe", "prefix-nope"])
def test_kv_reuse_scoring_equals_separate_full_forwards(arch, variant, tok):
    lm = SetLLM(tiny_model(arch), tok, variant)
    got = lm.score(PROMPT, OPTIONS)
    for option, score in zip(OPTIONS, got):
        resp = lm.response_ids(PROMPT, option)
        logp = lm.logits(PROMPT, response=option).log_softmax(-1)
        n = logp.shape[0] - len(resp)
        expected = sum(logp[n - 1 + i, t].item() for i, t in enumerate(resp))
        assert score.logprob == pytest.approx(expected, abs=1e-4)
        assert score.n_tokens == len(resp) and score.mean_logprob == pytest.approx(expected / len(resp), abs=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_causal_pe_equals_the_untouched_model(arch, tok):
    model = tiny_model(arch)
    lm = SetLLM(model, tok, "causal-pe")
    enc = lm.encode(PROMPT)
    with torch.no_grad():
        plain = model(input_ids=torch.tensor([enc.input_ids])).logits[0]
    torch.testing.assert_close(lm.logits(PROMPT), plain, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["llama", "gemma2"])
def test_flex_model_scores_and_generates_like_sdpa(arch, tok):
    """Flex serves the prefill; cached steps run sdpa/eager (chosen per call, the model unchanged)."""
    from setllm import GenerationConfig

    flex = tiny_model(arch, attn="flex_attention")
    ref = same_weights(flex, "eager" if arch == "gemma2" else "sdpa")
    a, b = SetLLM(flex, tok), SetLLM(ref, tok)
    assert [s.logprob for s in a.score(PROMPT, OPTIONS)] == pytest.approx([s.logprob for s in b.score(PROMPT, OPTIONS)], abs=1e-4)
    cfg = GenerationConfig(max_new_tokens=4)
    assert a.generate_many([PROMPT], cfg) == b.generate_many([PROMPT], cfg)
    assert flex.config._attn_implementation == "setllm:flex_attention"  # installed once; no call switches it
