"""A short soak of `setllm serve` (benchmarks/soak_serve.py): mixed load (choose through two
adapters, score, the base model under causal-pe, judge, generate, bad requests) against the
embedded model for ~25 s, every answer checked against the library in the soak's process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_soak(tmp_path):
    out = tmp_path / "soak.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "soak_serve.py", "--seconds", "25", "--warmup-s", "8", "--clients", "4", "--max-growth", "10",
                          "--json", str(out)], cwd=ROOT / "benchmarks", env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["5xx"] == 0 and r["differing"] == 0 and r["checked"] == r["requests"] > 0
    routes = r["routes"]
    assert {"/v1/choose", "/v1/score", "/v1/judge", "/v1/generate"} <= set(routes)  # every kind of request ran
    assert all(set(x["statuses"]) == {"200"} for name, x in routes.items() if not name.startswith("bad "))
    assert all(s in {400, 404, 422} for name, x in routes.items() if name.startswith("bad ") for s in map(int, x["statuses"]))
    assert r["scores_compared"] > 0 and r["rss_growth_pct"] <= 10
