import sys

import pytest


@pytest.fixture(autouse=True)
def restore_lm_eval(monkeypatch):
    """`python -m setllm.lm_eval` adds the shipped tasks to every lm-eval TaskManager, reads
    local data and loads datasets through its own functions (setllm.lm_eval.local) and
    rewrites sys.argv for lm-eval's parser: undo all of it after each test."""
    manager = pytest.importorskip("lm_eval.tasks.manager")
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._factory import TaskFactory

    monkeypatch.setattr(manager.TaskManager, "__init__", manager.TaskManager.__init__)
    monkeypatch.setattr(TaskFactory, "_load_full_config", TaskFactory._load_full_config)
    monkeypatch.setattr(ConfigurableTask, "download", ConfigurableTask.download)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
