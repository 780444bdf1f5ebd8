"""One forward under a variant (:mod:`setllm.core.forward.runtime`), the fixed-row linear blocks it
runs under (:mod:`setllm.core.model.install`) and the fit rule (:mod:`setllm.core.model.fit`)."""

from __future__ import annotations

import pytest
import torch
from tiny import tiny_model

from setllm.core.model import fit, install
from setllm.errors import InputError


@pytest.mark.usefixtures("threads")
@pytest.mark.parametrize("batched", [True, False], ids=["one-batched-product", "a-product-per-block"])
@pytest.mark.parametrize("arch", ["llama", "gpt2"])  # nn.Linear, and gpt2's Conv1D
def test_a_row_gets_the_same_bits_among_any_number_of_rows(arch, batched, monkeypatch):
    """Both ways of multiplying the blocks (install.BATCHED_BLOCKS picks one per device type)."""

    monkeypatch.setattr(install, "BATCHED_BLOCKS", {"cpu"} if batched else set())
    model = tiny_model(arch, **({"n_embd": 128, "n_head": 4} if arch == "gpt2" else {"hidden_size": 128, "intermediate_size": 256,
                                                                                      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32}))
    layer = next(m for m in model.modules() if type(m).__name__ in ("Linear", "Conv1D") and m is not model.get_output_embeddings())
    x = torch.randn(70, 128, generator=torch.Generator().manual_seed(0))
    with install.fixed_row_linears(model, 64, 16):
        alone = layer(x[:1])
        for n in (2, 5, 63, 64, 65, 70):
            assert torch.equal(layer(x[:n])[:1], alone), n
        assert layer(x[None, :7]).shape[:2] == (1, 7)  # any leading shape
    plain = layer(x[:1])
    torch.testing.assert_close(plain, alone, rtol=1e-5, atol=1e-6)  # the same function, other kernels


@pytest.mark.parametrize("threads", [1, 2])
# the embedded model's widths, and the narrow ones of the tests' tiny models (a half of 8 columns ran other bits)
@pytest.mark.parametrize("inputs,outputs", [(1536, 576), (576, 1536), (576, 576), (576, 192), (32, 16), (32, 8), (16, 32)])
def test_a_lone_block_gets_the_bits_it_gets_among_blocks(threads, inputs, outputs):
    # At 2 threads the CPU's batched product of ONE block with 1,536 inputs (the embedded
    # model's down_proj) splits its sum over the threads; among several blocks each block
    # gets a thread of its own. blocked_linear must give a block the same bits either way
    # (on one thread it reads a lone block as it is: the same kernel, checked here).
    torch.manual_seed(0)
    layer = torch.nn.Linear(inputs, outputs, bias=False)
    x = torch.randn(4 * 64, inputs)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            alone = install.blocked_linear(layer, 64, x[:64])
            among = install.blocked_linear(layer, 64, x)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(alone, among[:64])


def test_installed_layers_are_plain_outside_a_plan_and_a_plan_changes_no_layer():

    model = tiny_model("llama")
    install.install(model)
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    forwards = [m.__dict__["forward"] for m in layers]
    x = torch.randn(3, 5, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    head = model.get_output_embeddings()
    assert torch.equal(head(x), torch.nn.Linear.forward(head, x))  # no plan: the layer's own forward, bit for bit
    with install.fixed_row_linears(model, 64, 16):
        assert [m.__dict__["forward"] for m in layers] == forwards
        blocked = head(x)
    assert [m.__dict__["forward"] for m in layers] == forwards
    torch.testing.assert_close(blocked, torch.nn.Linear.forward(head, x), rtol=1e-5, atol=1e-6)  # other kernels, the same function
    install.install(model)  # a second install changes nothing
    assert [m.__dict__["forward"] for m in layers] == forwards


def test_lengths_past_the_context_are_refused():
    llama = tiny_model("llama", max_position_embeddings=32)
    assert fit.sliding_window(llama.config) is None
    with pytest.raises(InputError, match="sequence of 10 tokens at positions up to 39 is longer than the model's context \\(32 tokens\\)"):
        fit.check_length(llama.config, 10, 40)


def test_every_family_setllm_calls_verified_is_in_the_tested_architectures():
    from tiny import ARCHS

    from setllm.core.model import families

    assert set(families.SUPPORTED_MODEL_TYPES) == set(ARCHS)
    assert families.default_attention("gemma2", "sdpa") == "eager"  # soft-capping: no sdpa
    assert families.default_attention("gemma2", "flex_attention") == "flex_attention"  # a choice is kept
    assert families.default_attention("llama", "sdpa") == "sdpa" and families.default_attention("bert", "sdpa") == "sdpa"
