"""One declaration of "which model, read how" (setllm.LoadOptions): the CLI's model flags, lm-eval's
``--model_args`` and ``SetLLM.from_pretrained`` all come from it, and a bad value is named the
way each surface spells it."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from setllm import LoadOptions, SetLLM
from setllm.cli import build_parser
from setllm.errors import InputError
from setllm.lm_eval import BackendOptions
from setllm.loading.plan import plan_load

FIELDS = [f.name for f in dataclasses.fields(LoadOptions)]


@pytest.mark.parametrize("command", ["choose", "generate", "judge", "serve", "eval", "demo"])
def test_every_model_command_has_one_flag_per_field(command):
    _, sub = build_parser(command)
    dests = {a.dest for a in sub._actions}
    assert set(FIELDS) <= dests
    flag = {a.dest: a for a in sub._actions if a.option_strings and not a.option_strings[0].startswith("--no")}
    assert flag["adapter"].default == "auto" and flag["batch_size"].default == 8
    assert all(flag[name].help for name in FIELDS)  # every field has its help string


def test_lm_eval_model_args_are_the_fields():
    parsed = BackendOptions.parse({"model": "m", "batch_size": "4", "adapter": "none", "eos": "false", "allow_pickle": "true"})
    assert parsed.load == LoadOptions(model="m", batch_size=4, adapter="none", allow_pickle=True) and parsed.eos is False
    assert BackendOptions.parse({"pretrained": "m", "batch_size": "auto:4"}).load == LoadOptions(model="m")


def test_from_pretrained_takes_every_field():
    params = inspect.signature(SetLLM.from_pretrained).parameters
    named = {"attn_implementation": "attn"}  # transformers' name for it
    explicit = {named.get(p, p) for p in params} - {"cls", "options", "progress", "kind"}
    assert explicit <= set(FIELDS)
    # Everything else reaches LoadOptions through **options.
    assert any(p.kind is p.VAR_KEYWORD for p in params.values())


@pytest.mark.parametrize("changes, message", [
    ({"batch_size": 0}, "batch_size must be at least 1, got 0"),
    ({"batch_size": "8"}, "batch_size must be an integer, got '8'"),
    ({"exact": "yes"}, "exact must be true or false, got 'yes'"),
    ({"model": 7}, "model must be text, got 7 \\(quote it: model='7'\\)"),
    ({"dtype": "float8"}, "dtype must be one of float32, bfloat16, bf16, float16, fp16, got 'float8'"),
    ({"variant": "causal"}, "unknown variant 'causal'"),
    ({"attn": "flash_attention_2"}, "--attn flash_attention_2"),
])
def test_bad_values_name_the_option(changes, message):
    with pytest.raises(InputError, match=message):
        LoadOptions(**changes)


def test_each_surface_spells_the_option_its_own_way(capsys):
    from setllm.cli import main

    with pytest.raises(InputError, match="^--model_args batch_size must be at least 1, got 0$"):
        BackendOptions.parse({"batch_size": "0"})
    assert main(["choose", "q", "--options", "a", "b", "--dtype", "float32", "--batch-size", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: --batch-size must be at least 1, got 0"


def test_none_is_no_adapter_and_auto_depends_on_the_task():
    from setllm.api import default_adapter

    assert LoadOptions(adapter=None).adapter == "none" and plan_load(LoadOptions(adapter=None)).adapter is None
    assert plan_load(LoadOptions(), "judge").adapter == default_adapter("judge")
    assert plan_load(LoadOptions(model="elsewhere")).adapter is None  # the shipped adapters fit the embedded model only


@pytest.mark.parametrize("variant", ["sbp", "canonical"])
@pytest.mark.parametrize("kind", ["choose", "judge"])
def test_auto_loads_no_adapter_under_a_training_free_variant(variant, kind, tmp_path):
    from setllm.api import default_adapter

    assert default_adapter(kind) is not None  # the embedded model has one, read under setmask-setpe
    assert plan_load(LoadOptions(variant="setmask-setpe"), kind).adapter == default_adapter(kind)
    assert plan_load(LoadOptions(variant=variant), kind).adapter is None  # the base model as it is
    assert plan_load(LoadOptions(variant=variant), kind).adapter is None
    assert plan_load(LoadOptions(variant=variant, adapter=str(tmp_path)), kind).adapter == str(tmp_path)  # one trained under it can be named


@pytest.fixture
def restore_threads():
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_threads_are_set_before_the_model_loads(model_dir, monkeypatch, restore_threads):
    """``threads=N`` (``--threads N``), else ``$SETLLM_THREADS``, sets torch's thread count."""
    import torch

    torch.set_num_threads(2)
    SetLLM.from_pretrained(model_dir, adapter="none", threads=1)
    assert torch.get_num_threads() == 1
    torch.set_num_threads(2)
    monkeypatch.setenv("SETLLM_THREADS", "1")
    SetLLM.from_pretrained(model_dir, adapter="none")
    assert torch.get_num_threads() == 1
    monkeypatch.setenv("SETLLM_THREADS", "")  # empty: unset, torch's own default stays
    torch.set_num_threads(2)
    SetLLM.from_pretrained(model_dir, adapter="none")
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("command", ["choose", "generate", "judge", "serve", "eval", "demo", "train"])
def test_every_command_that_computes_takes_threads(command):
    _, sub = build_parser(command)
    assert "--threads" in {o for a in sub._actions for o in a.option_strings}


def test_bad_thread_counts_are_one_line(model_dir, monkeypatch, capsys, restore_threads):
    from setllm.cli import main

    assert main(["choose", "Q?", "--options", "a", "b", "--model", model_dir, "--threads", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: --threads must be at least 1, got 0"
    monkeypatch.setenv("SETLLM_THREADS", "two")
    assert main(["choose", "Q?", "--options", "a", "b", "--model", model_dir]) == 2
    assert capsys.readouterr().err.strip() == "error: $SETLLM_THREADS must be a whole number of threads >= 1, got 'two'"
