"""``research/reproduce_gpu.sh`` (docs/gpu.md), checked on CPU: the paper's 100 examples a
step split over any GPU count that divides it, one process per GPU, and flags that
``setllm train`` / ``setllm eval`` accept."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from setllm.cli import build_parser
from setllm.cli.common import config_from_args
from setllm.evaluation.config import EvalConfig
from setllm.loading.options import LoadOptions
from setllm.training import TrainConfig

RECIPE = Path(__file__).parents[2] / "research" / "reproduce_gpu.sh"


def recipe_env(gpus: int, **extra: str) -> dict[str, str]:
    """The variables the recipe hands to reproduce.sh (its ``step`` mode runs ``printenv``)."""
    names = ["TRAIN_FLAGS", "ULTRA_TRAIN_FLAGS", "EVAL_FLAGS", "SETLLM_RUN", "N_EVAL", "LR", "ULTRA_N"]
    # `make test` runs the venv's python without activating it: put its bin (setllm) on PATH.
    env = {**os.environ, "GPUS": str(gpus), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **extra}
    env.pop("SETLLM_RUN", None)
    res = subprocess.run([str(RECIPE), "step", "bash", "-c", "for n in " + " ".join(names) + "; do printf '%s=%s\\n' $n \"${!n}\"; done"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    return dict(line.split("=", 1) for line in res.stdout.splitlines())


def flag(flags: str, name: str) -> str:
    return re.search(rf"{name} (\S+)", flags).group(1)


@pytest.mark.parametrize("gpus", [1, 2, 4, 5, 10])
def test_every_step_is_100_examples_in_at_most_10_per_forward(gpus):
    env = recipe_env(gpus)
    train = env["TRAIN_FLAGS"]
    batch, accum = int(flag(train, "--batch-size")), int(flag(train, "--grad-accum"))
    assert batch * accum * gpus == 100 and batch <= 10
    assert "--bf16" in train and flag(train, "--max-steps") == "3000" and env["LR"] == "1e-3"
    assert "--dtype float32" in env["EVAL_FLAGS"] and "--device cuda" in env["EVAL_FLAGS"]  # fp32 evaluation
    launcher = env["SETLLM_RUN"]
    if gpus == 1:
        assert launcher == ""  # reproduce.sh then runs plain `setllm`
    else:
        assert f"--num_processes {gpus}" in launcher and launcher.endswith("setllm")


def test_a_gpu_count_that_does_not_divide_the_step_is_one_line():
    res = subprocess.run([str(RECIPE), "A"], capture_output=True, text=True, env={**os.environ, "GPUS": "3"}, timeout=60)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "GPUS=3 does not divide" in res.stderr


def test_the_recipe_flags_are_valid_setllm_flags(tmp_path):
    env = recipe_env(4, MODEL="google/gemma-2b", ATTN="flex_attention")
    train = shlex.split(env["TRAIN_FLAGS"].replace("--bf16", ""))  # bf16 autocast needs a GPU; its flag is checked above
    parser, _ = build_parser("train")
    cfg = config_from_args(TrainConfig, parser.parse_args(["train", "--data", "arc_challenge", "--out", str(tmp_path), *train]))
    assert (cfg.model, cfg.attn, cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps, cfg.max_steps) == \
        ("google/gemma-2b", "flex_attention", 5, 5, 3000)
    evals = shlex.split(env["EVAL_FLAGS"].replace("--device cuda", "--device cpu"))  # no CUDA here
    parser, _ = build_parser("eval")
    args = parser.parse_args(["eval", "--dataset", "arc_challenge", "--out", str(tmp_path), *evals])
    opts, _ = config_from_args(LoadOptions, args), config_from_args(EvalConfig, args)
    assert (opts.model, opts.dtype, opts.attn) == ("google/gemma-2b", "float32", "flex_attention")
