"""The Makefile's targets do what the README says: ``make demo`` and ``make test`` set up the
virtual environment and run, installing nothing outside it; ``make browser`` installs the
browser the playground's test drives, on purpose, and CI runs it before the tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def planned(target: str, tmp_path: Path) -> str:
    """What ``make TARGET`` would run for a fresh clone (a virtual environment not made yet), not running it."""
    return subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def test_make_demo_installs_nothing_outside_the_virtual_environment(tmp_path):
    demo = planned("demo", tmp_path)
    assert "pip install" in demo and "setllm demo" in demo
    assert "apt-get" not in demo and "chromium" not in demo and "sudo" not in demo


def test_make_test_installs_nothing_outside_the_virtual_environment(tmp_path):
    test = planned("test", tmp_path)
    assert "pip install" in test and "pytest" in test
    assert "apt-get" not in test and "chromium" not in test and "sudo" not in test


def test_make_test_says_why_each_test_skipped(tmp_path):
    for target in ("test", "test-fast"):
        assert "pytest -q -rs" in planned(target, tmp_path), target  # -rs: the summary lists each skip with its reason


def test_make_browser_installs_the_browser_and_ci_runs_it_before_the_tests(tmp_path):
    assert "apt-get install -y -qq chromium chromium-driver" in planned("browser", tmp_path)
    steps = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert steps.index("make browser") < steps.index("make test")
