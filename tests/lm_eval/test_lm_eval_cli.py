"""lm-eval's own command line, run as a user runs it: ``python -m setllm.lm_eval`` in a
subprocess, with lm-eval's flags as text (``--batch_size 8``, ``auto:4``, ``--device cpu``,
``--apply_chat_template``, ``--log_samples``, ``--output_path``) and every ``--model_args`` key."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = "tests/fixtures/lm_eval"


def lm_eval_cli(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "setllm.lm_eval", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def results_file(out: Path) -> dict:
    files = sorted(out.rglob("results_*.json"))
    assert files, f"no results under {out}"
    return json.loads(files[-1].read_text())


def test_every_model_arg_and_lm_eval_flag_as_text(model_dir, tmp_path):
    args = (f"model={model_dir},adapter=none,variant=causal-pe,exact=false,dtype=float32,eos=auto,markup=true,attn=sdpa,device=cpu,"
            "allow_untested=false,allow_pickle=false,allow_base_mismatch=false")
    run = lm_eval_cli("--model", "setllm", "--model_args", args, "--tasks", "setllm_test_plain,setllm_test_set",
                      "--include_path", FIXTURES, "--batch_size", "8", "--device", "cpu", "--limit", "3",
                      "--log_samples", "--output_path", str(tmp_path))
    assert run.returncode == 0, run.stderr[-2000:]
    results = results_file(tmp_path)
    assert set(results["results"]) == {"setllm_test_plain", "setllm_test_set"}
    assert len(list(tmp_path.rglob("samples_setllm_test_plain_*.jsonl"))) == 1
    samples = [json.loads(x) for x in next(tmp_path.rglob("samples_setllm_test_set_*.jsonl")).read_text().splitlines()]
    assert len(samples) == 3 and "{{" in samples[0]["arguments"]["gen_args_0"]["arg_0"]


@pytest.mark.parametrize("batch_size", ["auto", "auto:4"])
def test_batch_size_auto_and_the_chat_template(model_dir, tmp_path, batch_size):
    run = lm_eval_cli("--model", "setllm", "--model_args", f"model={model_dir},variant=setmask-setpe,batch_size=2",
                      "--tasks", "setllm_test_set", "--include_path", FIXTURES, "--batch_size", batch_size, "--limit", "2",
                      "--apply_chat_template", "--log_samples", "--output_path", str(tmp_path))
    assert run.returncode == 0, run.stderr[-2000:]
    sample = json.loads(next(tmp_path.rglob("samples_setllm_test_set_*.jsonl")).read_text().splitlines()[0])
    assert sample["arguments"]["gen_args_0"]["arg_0"].startswith("<s><|user|>")


@pytest.mark.parametrize("variant", ["sbp", "canonical"])
def test_training_free_variants_answer_alike_with_the_options_reversed(model_dir, tmp_path, variant, flipped_task):
    """The training-free invariant readings through lm-eval's own command line: every option's
    log-likelihood the same bits whatever order the set comes in."""
    flipped_task(tmp_path / "tasks")  # lm-eval's command line takes one --include_path: the set task goes beside it
    (tmp_path / "tasks" / "set.yaml").write_text((ROOT / FIXTURES / "set_task.yaml").read_text())
    run = lm_eval_cli("--model", "setllm", "--model_args", f"model={model_dir},variant={variant}", "--tasks",
                      "setllm_test_set,setllm_test_flipped", "--include_path", str(tmp_path / "tasks"), "--log_samples",
                      "--output_path", str(tmp_path / "out"))
    assert run.returncode == 0, run.stderr[-2000:]
    given, flip = ({(s["doc"]["id"], a["arg_1"]): r[0] for s in samples(tmp_path / "out", task)
                    for a, r in zip(s["arguments"].values(), s["resps"])} for task in ("setllm_test_set", "setllm_test_flipped"))
    assert len(given) == 19 and given == flip


def samples(out: Path, task: str) -> list[dict]:
    return [json.loads(x) for x in next(out.rglob(f"samples_{task}_*.jsonl")).read_text().splitlines()]


def test_a_bad_model_arg_is_one_line_and_exit_2(model_dir):
    run = lm_eval_cli("--model", "setllm", "--model_args", f"model={model_dir},batch_size=0", "--tasks", "setllm_test_plain",
                      "--include_path", FIXTURES)
    assert run.returncode == 2 and run.stderr.strip().splitlines()[-1] == "error: --model_args batch_size must be at least 1, got 0"


def test_outside_a_git_checkout_git_says_nothing(tmp_path, monkeypatch, capfd):
    """lm-eval records `git describe` of the working directory in its results; outside a
    checkout git's "fatal: not a git repository" reached the user's terminal. Now quiet, and
    the hash recorded is lm-eval's own (None there, the checkout's here)."""
    from lm_eval import evaluator

    from setllm.lm_eval.__main__ import quiet_git_hash

    lm_evals = evaluator.get_git_commit_hash
    quiet_git_hash()
    assert evaluator.get_git_commit_hash() == lm_evals()  # in this checkout (or its files)
    capfd.readouterr()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # a tmp folder inside a checkout is not one
    assert evaluator.get_git_commit_hash() is None
    assert capfd.readouterr().err == ""
    if shutil.which("git"):  # what lm-eval's own let through
        assert lm_evals() is None and "not a git repository" in capfd.readouterr().err


def test_batch_size_defaults_to_the_backends_and_runs_are_filed_by_adapter_and_variant(model_dir, tmp_path):
    """Without ``--batch_size`` (lm-eval then passes 1) the backend runs at its own default, 8,
    as docs/lm_eval.md says; ``--batch_size 2`` is 2. Each run is named, in its results and
    its ``--output_path`` folder, by model, adapter and variant, never by lm-eval's random id."""
    runs = {}
    for variant, flags in (("causal-pe", ()), ("sbp", ("--batch_size", "2"))):
        out = tmp_path / variant
        run = lm_eval_cli("--model", "setllm", "--model_args", f"model={model_dir},adapter=none,variant={variant}", "--tasks",
                          "setllm_test_plain", "--include_path", FIXTURES, "--limit", "2", "--output_path", str(out), *flags)
        assert run.returncode == 0, run.stderr[-2000:]
        runs[variant] = (results_file(out), next(out.rglob("results_*.json")).parent.name)
    (plain, plain_dir), (sbp, sbp_dir) = runs["causal-pe"], runs["sbp"]
    assert plain["config"]["setllm"]["batch_size"] == 8 and sbp["config"]["setllm"]["batch_size"] == 2
    assert plain["config"]["batch_size"] == 8  # what lm-eval reports is what ran
    assert plain["model_name"] == f"{model_dir}/none/causal-pe" and sbp["model_name"] == f"{model_dir}/none/sbp"
    assert plain_dir != sbp_dir and plain_dir.endswith("__none__causal-pe") and sbp_dir.endswith("__none__sbp")
