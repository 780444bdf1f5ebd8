"""benchmarks/gpu_check.py --smoke: the prepared GPU check runs its own code on the CPU with
tiny shapes, so a lent GPU runs a script that is known to work."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
import gpu_check  # noqa: E402


@pytest.mark.slow
def test_the_smoke_run_checks_every_part_and_writes_its_report(tmp_path, capsys):
    out = tmp_path / "smoke.json"
    assert gpu_check.main(["--smoke", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["smoke"] and report["device"].startswith("CPU") and not report["skipped"]
    assert list(report["shapes"]) == list(gpu_check.SMOKE_SHAPES)
    for name, shape in report["shapes"].items():
        for backend, same in shape["invariance"].items():  # exact mode: the same bits in every ordering
            assert same == {"orderings": 6, "same_logits": True, "same_text": True}, (name, backend)
        assert shape["batched_blocks"] == {"device": "cpu", "rows": 64, "same_bits": True, "enabled": True}  # what BATCHED_BLOCKS claims
        for part, ratio in (("costs", "ratio_score_s"), ("costs", "ratio_generate_s"), ("training_step", "ratio_step_s")):
            assert set(shape[part]) == {"batch_1", "batch_8"} and all(row[ratio] > 0 for row in shape[part].values())
        assert all(row["setmask-setpe"]["tokens"] == row["causal-pe"]["tokens"] > 0 for row in shape["training_step"].values())
        captured = shape["captured"]  # scoring by the graph code (the CPU's eager stand-in) and not, beside plain transformers
        assert set(captured) == {"batch_1", "batch_8", "long_256", "long_512"} if name == "llama-1b" else {"batch_1", "batch_8"}
        for call, row in captured.items():
            assert row["same_bits"] is True and row["captured_over_plain_s"] > 0 and row["uncaptured_over_plain_s"] > 0, (name, call, row)
            assert row["graphs"] >= 1 or call.startswith("long"), (name, call)  # a long prompt on flex is not captured
    long = report["shapes"]["llama-1b"]["long_set"]
    assert set(long) == {"256", "512"}
    for n, row in long.items():  # every reading ran: no error, a time for each part
        assert row["tokens"] >= int(n) * 0.9 and row["flex_attention_over_base_score"] > 0 and row["sdpa_over_base_score"] > 0, row
        assert all(row[r][part]["s"] > 0 for r in ("base", "flex_attention", "sdpa") for part in ("score", "generate_16", "decode_16", "per_token"))
        assert row["flex_attention"]["decode_16"]["tokens"] >= 2 and row["flex_attention_over_base_per_token"] > 0
    table = capsys.readouterr().out
    assert table.startswith("# gpu_check on CPU") and "(tiny shapes)" in table and "| gemma3-1b" in table and "yes / yes" in table
    assert "Scoring with CUDA graphs" in table


def test_an_unknown_shape_is_one_line(tmp_path, capsys):
    assert gpu_check.main(["--smoke", "--shapes", "llama-70b", "--out", str(tmp_path / "x.json")]) == 2
    assert capsys.readouterr().err.strip() == "error: unknown shape 'llama-70b'; choose from llama-1b, llama-3b, llama-8b, gemma2-2b, gemma3-1b, embedded"
