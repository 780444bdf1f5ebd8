"""Where benchmark data comes from: ``--data-dir`` (the flag), else ``SETLLM_DATA_DIR``, else
the hub; and errors that say so when a split cannot be had (a user's clone has no local copy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from setllm.cli import main
from setllm.io.records import DataError
from setllm.tasks import TASKS, get_task, hub_rows, load_records
from setllm.training.examples import load_examples

DATA = Path(__file__).parents[1] / "fixtures" / "data"


@pytest.fixture(autouse=True)
def no_env_data_dir(monkeypatch):
    monkeypatch.delenv("SETLLM_DATA_DIR", raising=False)


def test_a_missing_split_says_where_data_comes_from(tmp_path):
    with pytest.raises(DataError) as err:
        load_records(TASKS["arc_challenge"], data_dir=str(tmp_path / "x"))
    message = str(err.value)
    assert message == (f"{tmp_path / 'x' / 'arc_challenge' / 'test.jsonl'}: no such file (splits here: none); --data-dir D "
                       "(or SETLLM_DATA_DIR=D) reads D/<dataset>/<split>.jsonl (setllm's record format, see docs/evaluation.md); "
                       "without either, data comes from the hub (allenai/ai2_arc)")


def test_the_cli_says_it_in_one_line(capsys, tmp_path):
    code = main(["eval", "--dataset", "piqa", "--data-dir", str(tmp_path), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and "hub (ybisk/piqa)" in err[0]


def test_the_env_var_is_the_default_data_dir_and_the_flag_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("SETLLM_DATA_DIR", str(DATA))
    records, source = load_records(TASKS["arc_challenge"])
    assert source == str((DATA / "arc_challenge" / "test.jsonl").resolve()) and len(records) == 6
    with pytest.raises(DataError, match=f"^{tmp_path / 'arc_challenge' / 'test.jsonl'}: no such file"):
        load_records(TASKS["arc_challenge"], data_dir=str(tmp_path))  # the flag wins
    mine = tmp_path / "mine.jsonl"
    mine.write_text(json.dumps({"question": "Q?", "choices": ["a", "b"], "label": 1}) + "\n")
    assert load_records(get_task(None), data_file=str(mine))[1] == str(mine.resolve())  # a user's file wins over both


def test_training_reads_the_env_var_and_says_where_data_comes_from(monkeypatch, tmp_path):
    monkeypatch.setenv("SETLLM_DATA_DIR", str(DATA))
    examples, report = load_examples(["arc_challenge:2", "ultrafeedback:1", "ultrafeedback-judge:1"])
    assert report.kept == {"arc_challenge": 2, "ultrafeedback": 1, "ultrafeedback-judge": 1}
    monkeypatch.setenv("SETLLM_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError, match=r"piqa/train.jsonl: no such file \(splits here: none\); --data-dir D .*hub \(ybisk/piqa\)"):
        load_examples(["piqa"])


def test_qa_lookup_reads_the_env_var_without_data_dir(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("SETLLM_DATA_DIR", str(DATA))
    out = tmp_path / "qa.jsonl"
    code = main(["data", "qa-lookup", "--source", "commonsense_qa", "--split", "validation", "--docs", "2", "--n", "3", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 3


def test_the_hub_error_says_how_to_point_at_a_local_copy(monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError) as err:
        hub_rows(TASKS["social_iqa"], "validation")
    assert str(err.value).endswith("; pass --data-dir D or set SETLLM_DATA_DIR=D for a local copy "
                                   "(layout D/<dataset>/<split>.jsonl, setllm's record format, see docs/evaluation.md)")


def test_training_from_an_unreachable_hub_fails_at_once_in_one_line(capsys, monkeypatch, tmp_path):
    """`setllm train --data ultrafeedback,...` asks the hub once, as `setllm eval` does (one
    ``hub_rows``), then lets `datasets` read only its cache: one error line, no ~30 s of retries."""
    pytest.importorskip("datasets")
    import datasets
    import datasets.config

    import setllm.tasks.base as base

    monkeypatch.setattr(base, "hub_problem", lambda *a, **k: "unreachable (no network)")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)  # as when HF_HUB_OFFLINE is not set
    seen = []

    def load_dataset(path, *args, **kwargs):  # what a cache miss offline raises
        seen.append((path, kwargs.get("split"), datasets.config.HF_HUB_OFFLINE))
        raise ConnectionError("Couldn't reach the Hugging Face Hub")

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    for spec in ("ultrafeedback,arc_challenge", "ultrafeedback-judge"):
        code = main(["train", "--data", spec, "--out", str(tmp_path / "run")])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith("error: could not load HuggingFaceH4/ultrafeedback_binarized split 'train' from the hub "
                              "(the hub is unreachable (no network) and no copy is cached); pass --data-dir D")
    assert seen == [("HuggingFaceH4/ultrafeedback_binarized", "train_prefs", True)] * 2  # offline: the cache only
    assert not (tmp_path / "run").exists()
