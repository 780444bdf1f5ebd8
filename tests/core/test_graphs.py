"""CUDA-graph capture of scoring's packed prefill, tested on the CPU as far as it goes: the
graph is :class:`setllm.core.forward.graphs.EagerRunner` (replay = the captured function run again on
the static buffers, its results written into the graph's output buffers), so the keys, the
copying in, the reuse of entries, the priming of the plan and the cloning out are the code a
GPU runs."""

from __future__ import annotations

import pytest
import torch
from tiny import tiny_model, tiny_tokenizer

from setllm import SetLLM, mc_prompt
from setllm.core.forward import graphs, scoring
from setllm.errors import InputError

OPTIONS = ["apple", "dog", "fox", "water"]


def _lm(arch: str) -> SetLLM:
    return SetLLM(tiny_model(arch, hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32),
                  tiny_tokenizer(), "setmask-setpe")


@pytest.fixture(scope="module")
def lm():
    return _lm("llama")


def request(lm, words: int, options=OPTIONS, scored=None) -> scoring.ScoreRequest:
    prompt = mc_prompt("Which of these is a fruit?" + " Answer with one word." * words, options)
    return scoring.ScoreRequest(lm.encode(prompt), [lm.response_ids(prompt, o) for o in scored or options])


def run(lm, requests):
    return scoring.score_requests(lm.model, lm.variant, lm.pad_id, requests)


@pytest.fixture
def captured(lm):
    yield graphs.enable(lm.model, graphs.EagerRunner())
    graphs.disable(lm.model)


def test_a_graph_is_kept_per_shape_its_inputs_copied_in_and_its_outputs_cloned_out():
    g = graphs.Graphs(graphs.EagerRunner())
    calls = []

    def fn(static):
        calls.append(1)
        return [static[0] * 2 + static[1]]

    a, b = torch.arange(4.0), torch.ones(4)
    first = g.run("k", [a, b], fn)[0]
    second = g.run("k", [a + 10, b], fn)[0]  # same shapes: the entry is replayed with the new values
    assert torch.equal(first, a * 2 + 1)  # cloned out: the second replay did not overwrite it
    assert torch.equal(second, (a + 10) * 2 + 1)
    assert len(g.entries) == 1 and next(iter(g.entries.values())).replays == 2
    g.run("k", [torch.arange(5.0), torch.ones(5)], fn)  # a new shape: a new entry
    g.run("other", [a, b], fn)  # a new key: a new entry
    assert len(g.entries) == 3


def test_at_most_the_set_number_of_graphs_are_kept_the_least_recently_replayed_dropped():
    g = graphs.Graphs(graphs.EagerRunner(), most=2)
    x = [torch.ones(2)]
    fn = lambda static: [static[0] + 1]  # noqa: E731
    g.run("a", x, fn)
    g.run("b", x, fn)
    g.run("a", x, fn)  # a replayed: b is now the least recent
    g.run("c", x, fn)
    assert [key[0] for key in g.entries] == ["a", "c"]


def test_the_switch_is_off_by_default_and_refused_off_cuda(lm):
    assert graphs.of(lm.model) is None
    with pytest.raises(InputError, match="cuda_graphs needs a model on CUDA"):
        graphs.enable(lm.model)
    assert graphs.of(lm.model) is None


@pytest.mark.usefixtures("threads")
def test_captured_scoring_gives_the_bits_of_uncaptured(lm, captured):
    # Several prompt buckets, batches, and option rows past the first forward (on the rebuilt cache).
    many = [f"option number {i} of a long list" for i in range(30)]
    assert sum(map(len, request(lm, 1, scored=many).options)) > scoring.OPTION_TOKENS  # rows past the first forward
    batches = [[request(lm, 0)], [request(lm, 3)], [request(lm, w) for w in range(4)], [request(lm, 1, scored=many)]]
    graphs.disable(lm.model)
    plain = [run(lm, b) for b in batches]
    graphs.enable(lm.model, captured.runner).entries = captured.entries
    assert [run(lm, b) for b in batches] == plain
    assert [run(lm, b) for b in batches] == plain  # replays of the same shapes


def test_a_repeated_shape_replays_its_graph_and_a_new_shape_captures_another(lm, captured):
    run(lm, [request(lm, 0)])
    assert len(captured.entries) == 1
    other = [request(lm, 0, ["dog", "apple", "water", "fox"])]  # other tokens (options reordered), the same shapes
    got = run(lm, other)
    assert len(captured.entries) == 1 and next(iter(captured.entries.values())).replays == 2
    run(lm, [request(lm, 12)])  # a longer prompt: another bucket
    assert len(captured.entries) == 2
    graphs.disable(lm.model)
    assert got == run(lm, other)  # the replay read the new tokens and plan, not the captured call's


def test_sliding_and_soft_capped_attention_are_primed_and_keep_their_bits():
    lm = _lm("gemma2")  # sliding layers (windowed masks) and logit soft-capping (the eager formula)
    reqs = [request(lm, 0), request(lm, 2)]
    plain = run(lm, reqs)
    graphs.enable(lm.model, graphs.EagerRunner())
    assert run(lm, reqs) == plain


def test_loading_with_the_switch_on_a_cpu_is_refused_with_one_clear_error():
    from setllm import SetLLM

    with pytest.raises(InputError, match="cuda_graphs needs a model on CUDA; this one is on cpu"):
        SetLLM.from_pretrained(adapter="none", device="cpu", cuda_graphs=True)


def test_two_threads_scoring_through_the_graphs_get_their_own_bits(lm, captured):
    from concurrent.futures import ThreadPoolExecutor

    reqs = [[request(lm, 0)], [request(lm, 0, ["dog", "apple", "water", "fox"])], [request(lm, 2)]] * 3  # shared shapes: shared buffers
    graphs.disable(lm.model)
    want = [run(lm, r) for r in reqs]
    graphs.enable(lm.model, captured.runner).entries = captured.entries
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(lambda r: run(lm, r), reqs)) == want


def test_an_adapter_switched_off_or_on_is_another_graph():
    from peft import LoraConfig, get_peft_model

    base = _lm("llama")
    model = get_peft_model(base.model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    lm = SetLLM(model, tiny_tokenizer(), "setmask-setpe")
    reqs = [request(lm, 0)]
    on = run(lm, reqs)
    model.base_model.disable_adapter_layers()
    off = run(lm, reqs)
    model.base_model.enable_adapter_layers()
    assert on != off  # the adapter changes the scores
    g = graphs.enable(lm.model, graphs.EagerRunner())
    assert run(lm, reqs) == on
    model.base_model.disable_adapter_layers()
    assert run(lm, reqs) == off and len(g.entries) == 2
