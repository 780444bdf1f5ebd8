"""benchmarks/cost_curves.py --smoke: the CPU cost curves run their own code on tiny shapes, so
the full run (long, done by hand) is a script known to work, and its report means what it says."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
import cost_curves  # noqa: E402
import gpu_check  # noqa: E402


def _smoke(tmp_path, *flags: str) -> dict:
    out = tmp_path / "cc.json"
    threads = torch.get_num_threads()
    try:  # the smoke run sets one thread; the suite's other tests keep their own
        assert cost_curves.main(["--smoke", "--out", str(out), *flags]) == 0
    finally:
        torch.set_num_threads(threads)
    return json.loads(out.read_text())


@pytest.mark.slow
def test_the_smoke_run_measures_every_point_side_by_side(tmp_path, capsys):
    report = _smoke(tmp_path, "--plot", str(tmp_path / "cc.png"))
    cfg = cost_curves.PRESETS["smoke"]
    wanted = ({("length", n, b) for n in cfg.lengths for b in cfg.backends} | {("set_size", k, b) for k in cfg.set_sizes for b in cfg.set_backends}
              | {("model_size", m, w) for m in cfg.sizes for w in cfg.workloads})
    got = [(p["axis"], p.get("model", p["x"]), p["reading"]) for p in report["points"]]
    assert sorted(got) == sorted(wanted) and not report["skipped"]
    for p in report["points"]:
        set_, base = p[cost_curves.SET], p[cost_curves.BASE]
        assert set_["s"] > 0 and base["s"] > 0 and 1 <= p["rounds"] <= cfg.repeats, p
        assert p["ratio_s"] == pytest.approx(set_["s"] / base["s"])
        assert set_["peak_growth_mb"] >= 0 and base["peak_growth_mb"] >= 0
        if base["peak_growth_mb"] >= 1.0:
            assert p["ratio_peak"] == pytest.approx(set_["peak_growth_mb"] / base["peak_growth_mb"])
        else:  # within the RSS counters' resolution: no ratio rather than a meaningless one
            assert p["ratio_peak"] is None
        assert p["tokens"] > 0
    by_axis = {a: [p for p in report["points"] if p["axis"] == a] for a in cost_curves.AXES}
    # The set-size axis holds the total fixed and splits it into exactly k documents.
    assert all(p["elements"] == p["x"] for p in by_axis["set_size"]) and len({p["tokens"] for p in by_axis["set_size"]}) == 1
    assert [p["tokens"] for p in by_axis["length"]] == sorted(p["tokens"] for p in by_axis["length"])
    # attn="auto" picks sdpa below LONG_PROMPT_TOKENS: the smoke's short prompts.
    assert {p["reading"] for p in by_axis["length"] if p["auto_picks"]} == {"sdpa"}
    for p in by_axis["model_size"]:
        if p["reading"] == "generate":  # both readings generated every token: the ratio compares like with like
            assert p["new_tokens"] == {cost_curves.SET: cfg.batch * cfg.new_tokens, cost_curves.BASE: cfg.batch * cfg.new_tokens}
    assert (tmp_path / "cc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = capsys.readouterr().out
    assert table.startswith("# cost curves on CPU") and table.count("\n| ") == len(wanted) + 1  # the header and one row per point
    assert set(gpu_check.SHAPES) == {"llama-1b", "llama-3b", "llama-8b", "gemma2-2b", "gemma3-1b"}  # the embedded shape was only lent


def test_points_past_the_budget_are_skipped_and_named(tmp_path):
    report = _smoke(tmp_path, "--budget-s", "0", "--axes", "length,model_size")
    assert report["points"] == []
    assert report["skipped"] == ["length 128, sdpa", "length 128, flex_attention", "length 256, sdpa", "length 256, flex_attention",
                                 "smollm2-135m (every workload)", "llama-1b (every workload)"]


def test_a_bad_flag_is_one_line(capsys):
    with pytest.raises(SystemExit):
        cost_curves.parse_args(["--sizes", "llama-70b"])
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "--sizes: unknown 'llama-70b'; choose from smollm2-135m, llama-1b, llama-3b, llama-8b, gemma2-2b, gemma3-1b")


def test_max_tokens_caps_the_length_axis():
    assert cost_curves.parse_args(["--max-tokens", "2048"]).lengths == (256, 512, 1024, 2048)
