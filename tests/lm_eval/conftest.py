import sys

import pytest


@pytest.fixture(autouse=True)
def restore_lm_eval(monkeypatch):
    """`python -m setllm.lm_eval` adds the shipped tasks to every lm-eval TaskManager and
    rewrites sys.argv for lm-eval's parser: undo both after each test."""
    manager = pytest.importorskip("lm_eval.tasks.manager")
    monkeypatch.setattr(manager.TaskManager, "__init__", manager.TaskManager.__init__)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
