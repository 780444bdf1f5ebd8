import json
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lm_eval"


@pytest.fixture(autouse=True)
def restore_lm_eval(monkeypatch):
    """`python -m setllm.lm_eval` adds the shipped tasks to every lm-eval TaskManager, reads
    local data, loads datasets through its own functions and checks them before the model
    loads (setllm.lm_eval.local), records the git hash quietly, and rewrites sys.argv for
    lm-eval's parser: undo all of it after each test."""
    manager = pytest.importorskip("lm_eval.tasks.manager")
    from lm_eval import evaluator
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.config.evaluate_config import EvaluatorConfig
    from lm_eval.tasks._factory import TaskFactory

    monkeypatch.setattr(manager.TaskManager, "__init__", manager.TaskManager.__init__)
    monkeypatch.setattr(TaskFactory, "_load_full_config", TaskFactory._load_full_config)
    monkeypatch.setattr(ConfigurableTask, "download", ConfigurableTask.download)
    monkeypatch.setattr(EvaluatorConfig, "process_tasks", EvaluatorConfig.process_tasks)
    monkeypatch.setattr(evaluator, "get_git_commit_hash", evaluator.get_git_commit_hash)
    monkeypatch.setattr(sys, "argv", list(sys.argv))


@pytest.fixture
def flipped_task():
    """Writes into a folder ``setllm_test_flipped``: the set task (``set_task.yaml``) on its
    records with every row's options reversed and its label moved along (flipped.yaml,
    flipped.jsonl)."""
    def write(folder: Path) -> None:
        rows = [json.loads(line) for line in (FIXTURES / "records.jsonl").read_text().splitlines()]
        flipped = [{**r, "choices": r["choices"][::-1], "label": len(r["choices"]) - 1 - r["label"]} for r in rows]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "flipped.jsonl").write_text("".join(json.dumps(r) + "\n" for r in flipped))
        yaml = (FIXTURES / "set_task.yaml").read_text().replace("setllm_test_set", "setllm_test_flipped")
        (folder / "flipped.yaml").write_text(yaml.replace("tests/fixtures/lm_eval/records.jsonl", str(folder / "flipped.jsonl")))
    return write
