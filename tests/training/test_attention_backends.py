"""Attention backends on the GPU recipe's path, checked on CPU: flash_attention_2 (no arbitrary
masks) is refused with one line wherever a backend is chosen; sdpa and flex_attention train
to the same loss as eager (the logic CUDA runs, on CPU kernels)."""

from __future__ import annotations

import pytest
import torch
from tiny import run_cli, same_weights, tiny_model, tiny_tokenizer

from setllm.core.layout.variants import ATTENTION_BACKENDS, attention_problem, check_attention, get_variant
from setllm.core.model.families import UnsupportedModelError, check_model
from setllm.errors import InputError
from setllm.loading import load_model
from setllm.training import TrainConfig
from setllm.training.trainer import set_llm_loss


@pytest.mark.parametrize("name", ["flash_attention_2", "flash_attention_3"])
def test_flash_attention_is_refused_with_the_reason_and_the_way_out(name):
    problem = attention_problem(name)
    assert "no arbitrary mask" in problem and "sdpa" in problem and "flex_attention" in problem
    with pytest.raises(InputError, match=f"--attn {name}: .*no arbitrary mask"):
        check_attention(name)


def test_mask_taking_backends_pass_and_unknown_names_list_them():
    for name in ATTENTION_BACKENDS:
        check_attention(name)
    with pytest.raises(InputError, match="unknown attention implementation 'sdpa2'; choose one of: sdpa, eager, flex_attention"):
        check_attention("sdpa2")


@pytest.mark.parametrize("command", ["train", "eval"])
def test_cli_refuses_flash_attention_in_one_line(command, capsys, tmp_path):
    extra = ["--data", "arc_challenge"] if command == "train" else ["--dataset", "arc_challenge"]
    code, out, err = run_cli(capsys, command, *extra, "--attn", "flash_attention_2", "--out", str(tmp_path / "o"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: --attn flash_attention_2: ") and "use sdpa" in err
    assert not (tmp_path / "o").exists()  # refused before any work


def test_train_config_and_loader_refuse_it_before_loading_anything(tmp_path):
    with pytest.raises(InputError, match="flash_attention_2"):
        TrainConfig(data="arc_challenge", output_dir=str(tmp_path), attn="flash_attention_2")
    with pytest.raises(InputError, match="attn_implementation flash_attention_2"):
        load_model(str(tmp_path / "no-such-model"), attn_implementation="flash_attention_2")  # before the path is even read


def test_a_model_already_loaded_with_flash_attention_is_refused():
    model = tiny_model()
    model.config._attn_implementation = "flash_attention_2"  # as from_pretrained(..., attn_implementation=...) leaves it
    with pytest.raises(UnsupportedModelError, match="no arbitrary mask"):
        check_model(model)


@pytest.mark.parametrize("attn", ["sdpa", "flex_attention"])
def test_training_loss_and_gradients_match_eager(attn):
    """The GPU recipe trains with sdpa (or flex): the loss and its gradients equal eager's
    under the set mask. (Flex has no backward on CPU: its loss is checked, its gradients are
    CUDA's; the block mask it compiles is the one ``tests/core`` checks.)"""
    from setllm.api import SetLLM
    from setllm.core.text.prompt import Set, as_prompt
    from setllm.training.collator import SetCollator, featurize
    from setllm.training.examples import Example

    eager = tiny_model(attn="eager")
    other = same_weights(eager, attn)
    tok = tiny_tokenizer()
    examples = [Example(as_prompt(["Pick:\n", Set(["apple\n", "rocks\n", "sand\n"]), "Answer:"]), "apple", "a"),
                Example(as_prompt(["Question: Which city?\n", Set(["Paris\n", "Zurich\n"]), "Answer:"]), "Paris", "b")]
    variant = get_variant("setmask-setpe")
    lm = SetLLM(eager, tok, variant)
    feats, _ = featurize(lm.codec, examples, 256)
    batch = SetCollator(variant.positions, lm.pad_id)(feats)
    backward = attn != "flex_attention"
    losses, grads = [], []
    for model in (eager, other):
        model.train()
        model.zero_grad()
        with torch.set_grad_enabled(backward):
            loss, _ = set_llm_loss(model, variant, batch)
        if backward:
            loss.backward()
            grads.append(model.model.layers[0].self_attn.q_proj.weight.grad.clone())
        losses.append(loss.detach())
    torch.testing.assert_close(losses[0], losses[1], atol=1e-5, rtol=1e-5)
    if backward:
        torch.testing.assert_close(grads[0], grads[1], atol=1e-5, rtol=1e-4)
