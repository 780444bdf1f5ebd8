"""The Makefile's targets do what the README says: ``make demo`` sets up the virtual
environment and runs the demo, installing nothing outside it; ``make test`` adds the browser
its playground test drives."""

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


def test_make_test_installs_the_browser_of_the_playground_test(tmp_path):
    assert "apt-get install -y -qq chromium chromium-driver" in planned("test", tmp_path)
