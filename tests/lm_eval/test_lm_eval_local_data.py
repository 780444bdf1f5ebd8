"""The shipped lm-eval tasks on local files (``SETLLM_DATA_DIR``, :mod:`setllm.lm_eval.local`),
and a dataset that cannot be had offline as one ``error:`` line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from lm_eval.tasks._yaml_loader import load_yaml  # noqa: E402

from setllm.core.text.prompt import parse_markup  # noqa: E402
from setllm.io.records import DataError, parse_record  # noqa: E402
from setllm.lm_eval import TASKS_DIR  # noqa: E402
from setllm.lm_eval.local import local_config  # noqa: E402
from setllm.tasks import TASKS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "fixtures" / "data"
SPLIT = {"arc_challenge": "test", "piqa": "validation", "commonsense_qa": "validation", "social_iqa": "validation"}


def shipped(task: str) -> dict:
    return load_yaml(TASKS_DIR / f"{task}_set.yaml", resolve_func=True)


@pytest.mark.parametrize("task", sorted(SPLIT))
def test_a_local_record_renders_as_setllm_eval_reads_it(task):
    record = json.loads((DATA / task / f"{SPLIT[task]}.jsonl").read_text().splitlines()[0])
    want = TASKS[task].modified.render(parse_record(record, "row"), tuple(range(len(record["choices"]))))
    config = shipped(task)
    assert parse_markup(config["doc_to_text"](record)) == want.prompt and config["doc_to_choice"](record) == want.options
    target = config["doc_to_target"]
    assert (record[target] if isinstance(target, str) else target(record)) == record["label"]


def test_a_hub_row_and_its_record_render_alike():
    row = {"id": "x1", "question": "Which is a gas?", "choices": {"label": ["A", "B", "C"], "text": ["ice", "steam", "rock"]}, "answerKey": "B"}
    record = {"id": "x1", **TASKS["arc_challenge"].hub.normalise(row)}
    config = shipped("arc_challenge")
    for key in ("doc_to_text", "doc_to_choice", "doc_to_target"):
        assert config[key](row) == config[key](record)


def test_local_config_reads_the_folder_and_drops_absent_splits(tmp_path):
    piqa = local_config(shipped("piqa"), DATA)
    assert (piqa["dataset_path"], piqa["dataset_name"], piqa["test_split"]) == ("json", None, None)
    assert piqa["dataset_kwargs"] == {"data_files": {s: str((DATA / "piqa" / f"{s}.jsonl").resolve()) for s in ("train", "validation")}}
    arc = local_config(shipped("arc_challenge"), DATA)  # no validation.jsonl in the fixture
    assert arc["validation_split"] is None and set(arc["dataset_kwargs"]["data_files"]) == {"train", "test"}
    with pytest.raises(DataError, match=r"^SETLLM_DATA_DIR: .*piqa/validation.jsonl: no such file \(splits here: none\); lm-eval task "
                                        r"piqa_set reads D/piqa/<split>.jsonl .*unset, it downloads baber/piqa from the hub$"):
        local_config(shipped("piqa"), tmp_path)


def lm_eval_cli(*argv: str, **env: str) -> subprocess.CompletedProcess:
    env = {**{k: v for k, v in os.environ.items() if k != "SETLLM_DATA_DIR"}, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **env}
    return subprocess.run([sys.executable, "-m", "setllm.lm_eval", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_the_shipped_tasks_run_on_local_files(model_dir, tmp_path):
    run = lm_eval_cli("--model", "setllm", "--model_args", f"model={model_dir}", "--tasks", "setllm_set", "--limit", "2",
                      "--output_path", str(tmp_path), SETLLM_DATA_DIR="tests/fixtures/data")
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads(next(tmp_path.rglob("results_*.json")).read_text())["results"]
    assert {f"{t}_set" for t in SPLIT} <= set(results) and all("acc,none" in results[f"{t}_set"] for t in SPLIT)


def test_offline_without_local_data_is_one_line_and_exit_2(model_dir):
    run = lm_eval_cli("--model", "setllm", "--model_args", f"model={model_dir}", "--tasks", "piqa_set", "--limit", "5")
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert run.stderr.strip().splitlines()[-1] == (
        "error: lm-eval task piqa_set: could not load dataset baber/piqa (Couldn't reach 'baber/piqa' on the Hub (OfflineModeIsEnabled)); "
        "to read a local copy, set SETLLM_DATA_DIR=D holding D/piqa/<split>.jsonl in setllm's record format (see docs/lm_eval.md, 'Local data')")


@pytest.mark.parametrize("data_dir", ["nowhere", None])
def test_missing_data_is_refused_before_the_model_loads(monkeypatch, capsys, tmp_path, data_dir):
    """lm-eval loads the model before the data: the data is checked first, so a run that
    cannot have it says so in one line without loading a model (here, one that would fail)."""
    from setllm.lm_eval import model
    from setllm.lm_eval.__main__ import main

    def load(*args, **kwargs):
        raise AssertionError("the model loaded before the data was checked")

    monkeypatch.setattr(model.SetLLM, "load", load)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if data_dir:
        monkeypatch.setenv("SETLLM_DATA_DIR", str(tmp_path / data_dir))
    else:
        monkeypatch.delenv("SETLLM_DATA_DIR", raising=False)
    assert main(["--model", "setllm", "--tasks", "piqa_set"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    want = (f"error: SETLLM_DATA_DIR: {tmp_path / 'nowhere' / 'piqa' / 'validation.jsonl'}: no such file" if data_dir
            else "error: lm-eval task piqa_set: could not load dataset baber/piqa (Couldn't reach 'baber/piqa' on the Hub")
    assert len(err) == 1 and err[0].startswith(want), err


def test_a_tag_of_tasks_with_local_data_passes_the_check(monkeypatch):
    """The check reads what the run will read: every task of the tag ``setllm_set`` has its
    local split, so nothing is refused."""
    from lm_eval.tasks import TaskManager

    from setllm.lm_eval.__main__ import include_shipped_tasks
    from setllm.lm_eval.local import check_data, install

    monkeypatch.setenv("SETLLM_DATA_DIR", str(DATA))
    include_shipped_tasks()
    install()
    check_data(TaskManager(), ["setllm_set"])
    monkeypatch.setenv("SETLLM_DATA_DIR", str(DATA / "nowhere"))
    with pytest.raises(DataError, match="arc_challenge_set"):  # the tag's first task, by name
        check_data(TaskManager(), ["setllm_set"])
