"""`setllm judge` from the command line: one question, a resumable file, bad input."""

import json

import pytest
from tiny import run_cli, tiny_model, tiny_tokenizer

cli = run_cli


def test_one_question_json_gives_indices_and_the_same_best_in_any_order(model_dir, capsys):
    verdicts, cands = [], ["Paris is the capital.", "Rome, surely."]
    for order in (cands, cands[::-1]):
        code, out, _ = cli(capsys, "judge", "Capital of France?", "--candidates", *order, "--model", model_dir, "--adapter", "none", "--json")
        assert code == 0
        verdicts.append((order, json.loads(out)))
    (a_order, a), (b_order, b) = verdicts
    assert isinstance(a["best"], int) and a_order[a["best"]] == b_order[b["best"]] and a["scores"] == b["scores"][::-1]
    assert set(a) == {"best", "ranking", "scores"} and a["ranking"][0] == a["best"]


def test_an_empty_response_is_judged_and_bad_rows_can_be_skipped(model_dir, capsys, tmp_path):
    src, out = tmp_path / "rows.jsonl", tmp_path / "v.jsonl"
    rows = ['{"id": "e", "instruction": "Say hi", "candidates": ["", "Hello!"]}', '{"instruction": "Q", "candidates": ["only"]}',
            "not json", '{"id": "f", "instruction": "Q", "candidates": ["a", 3]}', '{"id": "g", "instruction": "Q", "candidates": ["a", "b"]}']
    src.write_text("\n".join(rows) + "\n")
    args = ["judge", "--input", str(src), "--output", str(out), "--model", model_dir, "--adapter", "none", "--no-progress"]
    code, _, err = cli(capsys, *args)
    assert code == 2 and f"error: {src}:2: " in err  # without --skip-bad: the first bad row stops it
    code, _, err = cli(capsys, *args, "--skip-bad")
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert code == 0 and len(warning) == 1 and "skipped 3 bad row(s)" in warning[0] and f"{src}:2:" in warning[0]
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["id"] for g in got] == ["e", "g"] and len(got[0]["scores"]) == 2 and "2 judged, 0 already in" in err


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
    ('{"instruction": "Q", "candidates": ["a", 3]}', "candidate 1 is not text"),
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
    from setllm import LoadOptions
    from setllm.api import default_adapter

    judge = default_adapter("judge")
    assert judge is not None and judge.endswith("smollm2-135m-judge") and judge != default_adapter("choose")
    assert LoadOptions().adapter_path("judge") == judge
    assert LoadOptions(variant="prefix-setpe").adapter_path("judge") == judge
    # The base model (an order-sensitive variant) or a model of the user's: no adapter.
    assert LoadOptions(variant="causal-pe").adapter_path("judge") is None
    assert LoadOptions(model="/some/model").adapter_path("judge") is None
    assert LoadOptions().adapter_path("choose") == default_adapter("choose")
    assert LoadOptions(adapter="none").adapter_path("judge") is None and LoadOptions(adapter="/my/adapter").adapter_path("judge") == "/my/adapter"
    with pytest.raises(Exception, match="unknown adapter kind 'rank'"):
        default_adapter("rank")
