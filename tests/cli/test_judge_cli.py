"""`setllm judge` from the command line: one question, a resumable file, bad input."""

import json

import pytest
from tiny import run_cli, tiny_model, tiny_tokenizer

cli = run_cli


def test_one_question_json_names_the_best_text_in_any_order(model_dir, capsys):
    verdicts = []
    for cands in (["Paris is the capital.", "Rome, surely."], ["Rome, surely.", "Paris is the capital."]):
        code, out, _ = cli(capsys, "judge", "Capital of France?", "--candidates", *cands, "--model", model_dir, "--adapter", "none", "--json")
        assert code == 0
        verdicts.append(json.loads(out))
    assert verdicts[0]["best"] == verdicts[1]["best"] and verdicts[0]["scores"] == verdicts[1]["scores"][::-1]
    assert set(verdicts[0]) == {"best", "ranking", "scores"}


def test_a_file_is_judged_in_order_and_resumed(model_dir, capsys, tmp_path):
    rows = [{"id": "a", "instruction": "Capital of France?", "candidates": ["Paris.", "Rome."]},
            {"instruction": "Say hi", "input": "politely", "candidates": ["Hello!", "Go away.", "Hi there."]}]
    src, out = tmp_path / "rows.jsonl", tmp_path / "v.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["judge", "--input", str(src), "--output", str(out), "--model", model_dir, "--adapter", "none", "--no-progress"]
    assert cli(capsys, *args)[0] == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["id"] for g in got] == ["a", "1"] and [len(g["scores"]) for g in got] == [2, 3]
    assert all(g["best"] == g["ranking"][0] and sorted(g["ranking"]) == list(range(len(g["scores"]))) for g in got)
    out.write_text(out.read_text().splitlines(keepends=True)[0])  # as if killed after the first row
    code, _, err = cli(capsys, *args)
    assert code == 0 and "1 judged, 1 already" in err
    assert [json.loads(line) for line in out.read_text().splitlines()] == got


@pytest.mark.parametrize("line, message", [
    ('{"instruction": "Q", "candidates": ["only"]}', "'candidates' must be a list of at least two responses"),
    ('{"instruction": "Q", "candidates": ["a", ""]}', "candidate 1 is empty or not text"),
    ('{"candidates": ["a", "b"]}', "missing field 'instruction'"),
    ('{"instruction": "Q", "candidates": ["a", "b"]', "malformed JSON"),
])
def test_bad_rows_are_one_line_and_nothing_is_written(model_dir, capsys, tmp_path, line, message):
    src, out = tmp_path / "rows.jsonl", tmp_path / "v.jsonl"
    src.write_text('{"instruction": "Q", "candidates": ["a", "b"]}\n' + line + "\n")
    code, _, err = cli(capsys, "judge", "--input", str(src), "--output", str(out), "--model", model_dir, "--adapter", "none")
    assert code == 2 and err.strip().startswith(f"error: {src}:2: ") and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_row_longer_than_the_context_is_named(capsys, tmp_path):
    small = tmp_path / "small"
    tiny_model("llama", max_position_embeddings=64).save_pretrained(small)
    tiny_tokenizer().save_pretrained(small)
    src = tmp_path / "rows.jsonl"
    src.write_text(json.dumps({"instruction": "Q", "candidates": ["word " * 80, "short"]}) + "\n")
    code, _, err = cli(capsys, "judge", "--input", str(src), "--output", str(tmp_path / "v.jsonl"), "--model", str(small), "--adapter", "none")
    assert code == 2 and f"{src}:1: prompt is" in err and "longer than the model's context" in err


def test_judging_defaults_to_the_shipped_judge_adapter():
    from setllm.api import default_adapter
    from setllm.cli.common import ModelOptions, shipped_adapter

    judge = default_adapter("judge")
    assert judge is not None and judge.endswith("smollm2-135m-judge") and judge != default_adapter("choose")
    assert shipped_adapter(ModelOptions(), "judge") == judge
    assert shipped_adapter(ModelOptions(variant="prefix-setpe"), "judge") == judge
    # The base model (an order-sensitive variant), a model of the user's, or another task: "auto".
    assert shipped_adapter(ModelOptions(variant="causal-pe"), "judge") == "auto"
    assert shipped_adapter(ModelOptions(model="/some/model"), "judge") == "auto"
    assert shipped_adapter(ModelOptions(), "choose") == "auto"
    with pytest.raises(Exception, match="unknown adapter kind 'rank'"):
        default_adapter("rank")
