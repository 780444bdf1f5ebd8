"""What ``setllm train`` computes in, what it loads the base model in, what ``setllm.json``
says of both, and the FSDP save it refuses before anything loads (tiny models, CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny import run_cli

from setllm.training import TrainConfig
from setllm.training.config import check_state_dict_type, fsdp_state_dict_type

FIXTURES = Path(__file__).parents[1] / "fixtures" / "train"
TRAIN = ["train", "--data", f"{FIXTURES}/prompt_response.jsonl", "--max-steps", "2", "--batch-size", "2", "--no-progress",
         "--logging-steps", "1", "--save-steps", "2"]


def trained(capsys, model_dir, out, *flags) -> dict:
    """``setllm train`` on the tiny model; the ``training`` record of its ``setllm.json``."""
    code, _, err = run_cli(capsys, *TRAIN, "--model", model_dir, "--out", str(out), *flags)
    assert code == 0, err
    return json.loads((out / "setllm.json").read_text())["training"]


def test_bf16_loads_the_base_in_bf16_and_records_it(capsys, model_dir, tmp_path):
    record = trained(capsys, model_dir, tmp_path / "bf16", "--bf16")
    # The frozen base is read in bf16 anyway: fp32 copies would only double its memory.
    # LoRA's own weights stay fp32 (the optimizer's master weights).
    assert record["precision"] == {"compute": "bf16", "base_weights": "bfloat16", "trained_weights": "float32"}
    assert record["config"]["bf16"] is True


def test_without_bf16_everything_is_fp32(capsys, model_dir, tmp_path):
    record = trained(capsys, model_dir, tmp_path / "fp32")
    assert record["precision"] == {"compute": "fp32", "base_weights": "float32", "trained_weights": "float32"}
    assert record["config"]["bf16"] is False


def test_a_launcher_in_bf16_is_recorded_as_bf16_without_the_flag(capsys, model_dir, tmp_path, monkeypatch):
    # What `accelerate launch --config_file configs/accelerate/fsdp.yaml` hands each process:
    # the Trainer then computes in bf16 though --bf16 was not given.
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    record = trained(capsys, model_dir, tmp_path / "launched")
    assert record["precision"]["compute"] == "bf16" and record["precision"]["base_weights"] == "bfloat16"
    assert record["config"]["bf16"] is True


def test_a_full_finetune_keeps_fp32_master_weights_under_bf16(tmp_path):
    lora = TrainConfig(data="x.jsonl", output_dir=str(tmp_path / "a"), bf16=True)
    full = TrainConfig(data="x.jsonl", output_dir=str(tmp_path / "b"), bf16=True, full_finetune=True)
    assert (lora.base_dtype, full.base_dtype) == (torch.bfloat16, torch.float32)


FSDP = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}


@pytest.mark.parametrize("env, kind", [
    ({}, None),
    ({**FSDP, "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT"}, "FULL_STATE_DICT"),  # configs/accelerate/fsdp.yaml
    ({**FSDP, "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT"}, "SHARDED_STATE_DICT"),
    ({**FSDP, "FSDP_STATE_DICT_TYPE": "3"}, "SHARDED_STATE_DICT"),  # accelerate also takes torch's enum value
    (FSDP, "SHARDED_STATE_DICT"),  # accelerate's FSDP2 default when the config names none
    ({"ACCELERATE_USE_FSDP": "true"}, "FULL_STATE_DICT"),  # FSDP1's default
])
def test_the_fsdp_state_dict_type_is_resolved_as_accelerate_does(monkeypatch, tmp_path, env, kind):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cfg = TrainConfig.__new__(TrainConfig)  # only the fields the rule reads: no FSDP set-up here
    cfg.fsdp, cfg.fsdp_plugin_args = "", None
    assert fsdp_state_dict_type(cfg) == kind


def test_a_sharded_fsdp_save_is_refused_before_anything_loads(capsys, model_dir, tmp_path, monkeypatch):
    for key, value in {**FSDP, "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT"}.items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "sharded"
    code, _, err = run_cli(capsys, *TRAIN, "--model", model_dir, "--out", str(out))
    assert code == 2 and err == ("error: FSDP would save with SHARDED_STATE_DICT: each rank's shard of the weights, not an adapter; set "
                                 "fsdp_state_dict_type: FULL_STATE_DICT in the accelerate config (configs/accelerate/fsdp.yaml does)\n")
    assert not out.exists()
    check_state_dict_type("FULL_STATE_DICT")  # what the shipped config saves with passes
