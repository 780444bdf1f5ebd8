"""A new user's papercuts: each command says what it does the same way."""

from __future__ import annotations

import json
import re

import pytest
import torch
from tiny import run_cli

cli = run_cli


def _fake_run(path):
    """What `setllm export adapter` needs from a finished `setllm train` run."""
    from safetensors.torch import save_file

    path.mkdir()
    (path / "adapter_config.json").write_text("{}")
    (path / "setllm.json").write_text(json.dumps({"base_model": "embedded:smollm2-135m-instruct", "variant": "setmask-setpe"}))
    save_file({"a.lora_A.weight": torch.ones(2, 2), "a.lora_B.weight": torch.ones(2, 2)}, path / "adapter_model.safetensors")
    return path


def test_export_adapter_refuses_a_folder_that_holds_files_unless_overwrite(capsys, tmp_path):
    run, dest = _fake_run(tmp_path / "run"), tmp_path / "dist"
    assert cli(capsys, "export", "adapter", str(run), str(dest))[0] == 0  # a new folder
    (dest / "notes.txt").write_text("mine")
    code, _, err = cli(capsys, "export", "adapter", str(run), str(dest))
    assert code == 2 and err.strip().startswith(f"error: {dest} already holds files") and "--overwrite" in err
    code, _, err = cli(capsys, "export", "adapter", str(run), str(dest), "--overwrite")
    assert code == 0 and (dest / "notes.txt").read_text() == "mine" and (dest / "adapter_model.safetensors").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli(capsys, "export", "adapter", str(run), str(empty))[0] == 0  # an empty folder is fine
    code, _, err = cli(capsys, "export", "adapter", str(run), str(run), "--overwrite")
    assert code == 2 and "is the run folder itself" in err


def test_demo_takes_no_progress(model_dir, capsys):
    code, out, err = cli(capsys, "demo", "--options", "Paris", "Rome", "--model", model_dir, "--adapter", "none", "--no-progress")
    assert code == 0 and "orderings" in out and "it/s" not in err and "\r" not in err


def test_generate_says_which_model_answered(model_dir, capsys):
    code, out, err = cli(capsys, "generate", "--prompt", r"Pick one:\n{{dog\n||apple\n}}Answer:", "--max-new-tokens", "2",
                         "--model", model_dir, "--adapter", "none", "--json")
    result = json.loads(out)
    assert code == 0 and f"setllm: {model_dir}, adapter none, variant setmask-setpe" in err.splitlines()
    assert result["model"] == model_dir and result["adapter"] is None and result["variant"] == "setmask-setpe" and isinstance(result["text"], str)


def test_judge_help_says_task_input_is_the_rows_input_field(capsys):
    with pytest.raises(SystemExit):
        cli(capsys, "judge", "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert "--task-input TEXT" in text and 'the "input" field of --input rows and of POST /v1/judge' in text


@pytest.mark.parametrize("argv", [["data"], ["export"], ["export", "data"], ["data", "mc-framed"], ["judge"], ["choose"]])
def test_help_shows_no_rst_markup(capsys, argv):
    with pytest.raises(SystemExit):
        cli(capsys, *argv, "--help")
    text = capsys.readouterr().out
    assert "``" not in text and not re.search(r":\w+:`", text) and "::" not in text


@pytest.mark.parametrize("command", ["choose", "judge", "generate", "train", "eval", "serve", "data kv-retrieval"])
def test_help_shows_every_flag_dashed(capsys, command):
    with pytest.raises(SystemExit):
        cli(capsys, *command.split(), "--help")
    text = capsys.readouterr().out
    assert "--batch-size" in text or command.startswith("data")
    assert not re.findall(r"--[a-z0-9]+_[a-z0-9_]+", text), re.findall(r"--[a-z0-9]+_[a-z0-9_]+", text)


def test_underscore_flags_still_parse(model_dir, capsys):
    code, out, _ = cli(capsys, "choose", "q?", "--options", "a", "b", "--model", model_dir, "--adapter", "none", "--batch_size", "2",
                       "--allow_untested", "--json")
    assert code == 0 and json.loads(out)["answer"] in ("a", "b")


def test_a_model_with_no_adapter_says_it_reads_untrained_set_llm(model_dir, capsys):
    code, _, err = cli(capsys, "choose", "q?", "--options", "a", "b", "--model", model_dir)
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert code == 0 and len(warning) == 1 and "untrained Set-LLM" in warning[0] and "no shipped adapter" in warning[0]
    for quiet in (["--adapter", "none"], ["--variant", "causal-pe"]):  # asked for as such: nothing to say
        code, _, err = cli(capsys, "choose", "q?", "--options", "a", "b", "--model", model_dir, *quiet)
        assert code == 0 and "warning:" not in err
