"""One base model under several adapters (setllm.AdapterBank): each view reads as its
adapter loaded alone does (both unmerged: the same bits) and within rounding of it merged,
switching never leaks one adapter into another's scores, and "base" is the model with
no adapter."""

from __future__ import annotations

import pytest
from tiny import tiny_adapter

from setllm import AdapterBank, SetLLM, mc_prompt
from setllm.errors import InputError, ModelLoadError
from setllm.loading import load_model

QUESTION = ("Which is a fruit?", ["apple", "dog", "car"])


@pytest.fixture(scope="module")
def adapters(model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return {name: tiny_adapter(model_dir, root / name, seed) for seed, name in enumerate(["a", "b"], start=1)}


@pytest.fixture(scope="module")
def bank(model_dir, adapters):
    return AdapterBank.from_pretrained(model_dir, adapters)


def scores(lm, question=QUESTION):
    return [s.logprob for s in lm.score(mc_prompt(*question), question[1])]


def test_each_view_reads_as_its_adapter_loaded_alone(bank, model_dir, adapters):
    for name, path in adapters.items():
        alone = SetLLM(*load_model(model_dir, path), "setmask-setpe")  # what the library, the CLI and lm-eval load
        assert scores(bank[name]) == scores(alone)  # one computation: the same bits
        merged = SetLLM(*load_model(model_dir, path, merge=True), "setmask-setpe")  # other rounding, the same function
        assert scores(bank[name]) == pytest.approx(scores(merged), abs=1e-4)
    assert scores(bank["a"]) != pytest.approx(scores(bank["b"]), abs=1e-3)  # the adapters differ, and so do their views


def test_switching_adapters_leaves_no_trace(bank):
    first = scores(bank["a"])
    scores(bank["b"]), scores(bank.base)
    assert scores(bank["a"]) == first  # the same computation: the same bits


def test_the_base_view_is_the_base_model_and_none_is_no_adapter(bank, model_dir):
    """``base`` means what it means everywhere in setllm: the model as it is, read causally
    (``--variant causal-pe``); ``none`` is every adapter off under the bank's reading (``--adapter none``)."""
    net, tok = load_model(model_dir)
    scores(bank["a"])  # the last switch was to an adapter
    assert bank.base is bank["base"] and bank.base.variant.name == "causal-pe" and bank["none"].variant.name == "setmask-setpe"
    assert scores(bank.base) == scores(SetLLM(net, tok, "causal-pe"))
    scores(bank["b"])
    assert scores(bank["none"]) == scores(SetLLM(net, tok, "setmask-setpe"))


def test_a_bank_is_a_mapping_of_its_views(bank):
    assert list(bank) == ["a", "b", "none", "base"] == list(bank.keys()) and len(bank) == 4
    assert all(name in bank for name in bank) and "c" not in bank and 0 not in bank and bank.get("c") is None
    assert dict(bank) == {name: bank[name] for name in bank} and bank.names == ["a", "b"]
    with pytest.raises(KeyError, match="it has: a, b, none, base"):
        bank["c"]


def test_views_stay_order_invariant(bank):
    question, options = QUESTION
    for name in ("a", "b", "none"):
        lm = bank[name]
        got = {tuple(round(s, 6) for s in sorted(scores(lm, (question, perm)))) for perm in (options, options[::-1], options[1:] + options[:1])}
        assert len(got) == 1, name


def test_generation_reads_through_the_view(bank, model_dir, adapters):
    net, tok = load_model(model_dir, adapters["b"])
    merged = SetLLM(net, tok, "setmask-setpe")
    prompt = "Pick one:\n{{apple\n||dog\n}}Answer:"
    bank["a"].generate(prompt, max_new_tokens=4)
    assert bank["b"].generate(prompt, max_new_tokens=4) == merged.generate(prompt, max_new_tokens=4)


def test_views_read_as_each_adapter_was_trained(model_dir, tmp_path):
    causal = tiny_adapter(model_dir, tmp_path / "causal", seed=3, variant="causal-pe")
    bank = AdapterBank.from_pretrained(model_dir, {"set": tiny_adapter(model_dir, tmp_path / "set", seed=4), "causal": causal})
    assert bank["set"].variant.name == "setmask-setpe" and bank["causal"].variant.name == "causal-pe"
    assert bank["causal"].origin.adapter == causal and bank.names == ["set", "causal"]


def test_bad_banks_are_refused_before_loading(model_dir, adapters, tmp_path):
    with pytest.raises(InputError, match="at least one adapter"):
        AdapterBank.from_pretrained(model_dir, {})
    with pytest.raises(InputError, match="'auto' names a shipped adapter"):
        AdapterBank.from_pretrained(model_dir, {"choose": "auto"})
    with pytest.raises(InputError, match="other than 'none' and 'base'"):
        AdapterBank.from_pretrained(model_dir, {"base": adapters["a"]})
    with pytest.raises(ModelLoadError, match="no adapter_config.json"):
        AdapterBank.from_pretrained(model_dir, {"x": str(tmp_path)})
    with pytest.raises(KeyError, match="it has: a, b, none, base"):
        AdapterBank.from_pretrained(model_dir, adapters)["c"]


def test_no_adapter_weights_are_trainable(bank):
    scores(bank["a"]), scores(bank["b"])  # PEFT's switch would make the active adapter trainable unless told
    assert not any(p.requires_grad for p in bank.model.parameters())


def test_views_on_two_threads_take_turns(bank):
    from concurrent.futures import ThreadPoolExecutor

    expected = {name: scores(bank[name]) for name in ("a", "b")}
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda name: (name, scores(bank[name])), ["a", "b"] * 6))
    assert all(s == expected[name] for name, s in got)  # no forward ran under the other thread's adapter
