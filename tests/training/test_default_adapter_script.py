"""``research/default_adapter.sh build`` (the training quick start's first command) needs local
copies of the train splits: without them it says which files are missing and how to point it
at them, before training anything."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "research" / "default_adapter.sh"


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
def test_build_without_the_data_folder_says_what_it_needs(tmp_path):
    (tmp_path / "piqa").mkdir()
    (tmp_path / "piqa" / "train.jsonl").write_text("")
    env = {**os.environ, "DATA": str(tmp_path), "RUNS": str(tmp_path / "runs"), "PATH": "/usr/bin:/bin"}  # no setllm: nothing may train
    out = subprocess.run(["/bin/bash", str(SCRIPT), "build"], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and out.stdout == ""
    missing = out.stderr.split("missing: ")[1].split(". Put them")[0].split()
    assert missing == [str(tmp_path / d / "train.jsonl") for d in ("ultrafeedback", "arc_challenge", "commonsense_qa", "social_iqa")]
    assert "DATA=DIR" in out.stderr and not (tmp_path / "runs").exists()
