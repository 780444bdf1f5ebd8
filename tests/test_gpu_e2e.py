"""benchmarks/gpu_e2e.py --smoke: every surface, each through its own command line in its own
process, runs end to end on the CPU with a tiny shape, so the script a lent GPU runs is known
to work and its verdicts are known to mean something."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
import gpu_e2e  # noqa: E402

STEPS = ["write model", "train set", "train causal", "choose", "generate", "eval", "serve", "lm_eval"]


@pytest.mark.slow
def test_the_smoke_run_passes_every_surface_and_reports_it(tmp_path, capsys):
    out, work = tmp_path / "smoke.json", tmp_path / "work"
    assert gpu_e2e.main(["--smoke", "--out", str(out), "--work", str(work), "--budget-s", "900"]) == 0
    report = json.loads(out.read_text())
    assert report["smoke"] and report["device"].startswith("CPU") and report["work"] is None and not work.exists()
    steps = {s["name"]: s for s in report["steps"]}
    assert list(steps) == STEPS and all(s["ok"] for s in steps.values())
    lm_eval_there = importlib.util.find_spec("lm_eval") is not None
    ran = [n for n in STEPS[1:] if lm_eval_there or n != "lm_eval"]
    for name in ran:  # every child exited 0 and said how much memory it peaked at
        exits = steps[name]["exit"] if isinstance(steps[name]["exit"], list) else [steps[name]["exit"]]
        assert exits and set(exits) == {0} and steps[name]["peak_rss_mib"] > 0 and all(steps[name]["checks"].values()), name
    if not lm_eval_there:
        assert steps["lm_eval"]["skipped"].startswith("lm_eval not installed")
    for name in ("train set", "train causal"):  # fp32 on the CPU, and setllm.json says so
        measured = steps[name]["measured"]
        assert measured["precision"] == {"compute": "fp32", "base_weights": "float32", "trained_weights": "float32"}
        assert measured["recorded_bf16"] is False and measured["steps"] == 4 and measured["tokens_per_s"] > 0
    assert steps["choose"]["checks"] == {"same_answer": True, "same_bits": True} and steps["choose"]["measured"]["orderings"] == 2
    assert steps["generate"]["checks"] == {"same_text": True}
    evaluated = steps["eval"]["measured"]
    assert evaluated["answer_changes"] == 0 and evaluated["orderings_compared"] >= evaluated["questions"] == 8
    served = steps["serve"]
    assert served["exit"] == 0 and served["measured"]["requests"] == 8 and not served["measured"]["errors"]  # stopped by SIGTERM, cleanly
    assert served["checks"]["served_equals_library_bits"] and served["checks"]["same_bits_over_orderings"]
    assert served["measured"]["alone_max_abs_diff"] < 1e-3  # each adapter loaded alone: the same function
    goals = report["goals"]
    assert goals["every_step_passed"] and goals["answer_changes_over_orderings"] == 0 and goals["served_equals_library_bits"]
    assert goals["memory_measure"] == "peak RSS" and 0.5 < goals["serve_two_adapters_over_one_choose"] < 2
    assert goals["set_over_causal_training_tokens_per_s"] > 0
    table = capsys.readouterr().out
    assert table.startswith("# gpu_e2e on CPU") and "| serve | 0 |" in table and "answer changes over orderings: 0" in table


def test_a_spent_budget_skips_every_step_and_says_why(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert gpu_e2e.main(["--smoke", "--budget-s", "0", "--out", str(out), "--work", str(tmp_path / "w")]) == 1
    report = json.loads(out.read_text())
    assert [s["name"] for s in report["steps"]] == STEPS
    assert all(s["skipped"].startswith("budget: ") and s["skipped"].endswith("of --budget-s 0") for s in report["steps"])
    assert not report["goals"]["every_step_passed"] and set(report["goals"]["skipped"]) == set(STEPS)
    assert "| eval | - |" in capsys.readouterr().out


def test_a_step_waits_for_the_steps_it_needs(tmp_path):
    plan = gpu_e2e.make_plan(gpu_e2e.parse_args(["--smoke", "--work", str(tmp_path)]))
    report = gpu_e2e.Report(plan)
    report.add({"name": "train set", "ok": False, "exit": 2})
    assert report.skip_reason(["train set"]) == "needs train set, which did not pass" and report.skip_reason(["write model"]) is None


def test_an_unknown_shape_is_one_line(tmp_path, capsys):
    assert gpu_e2e.main(["--smoke", "--shape", "llama-70b", "--out", str(tmp_path / "x.json")]) == 2
    assert capsys.readouterr().err.strip() == "error: unknown shape 'llama-70b'; choose from llama-1b, llama-3b, llama-8b, gemma2-2b, gemma3-1b"


def test_the_orderings_start_with_the_given_one_and_differ():
    orders = gpu_e2e.orderings(["a", "b", "c", "d"], 3)
    assert orders[0] == ["a", "b", "c", "d"] and len({tuple(o) for o in orders}) == 3 and all(sorted(o) == ["a", "b", "c", "d"] for o in orders)
