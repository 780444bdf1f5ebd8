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
    assert a["ranking"][0] == a["best"]
    assert {k: a[k] for k in ("variant", "model", "adapter", "readout")} == {  # the reading, as choose --json says it
        "variant": "setmask-setpe", "model": model_dir, "adapter": None, "readout": "likelihood"}


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
    assert code == 2 and f"{src}:1 (id '0'): prompt is" in err and "longer than the model's context" in err
    assert "its candidates are the longest part" in err


def test_judging_defaults_to_the_shipped_judge_adapter():
    from setllm import LoadOptions
    from setllm.api import default_adapter
    from setllm.loading.plan import plan_load

    judge = default_adapter("judge")
    assert judge is not None and judge.endswith("smollm2-135m-judge") and judge != default_adapter("choose")
    assert plan_load(LoadOptions(), "judge").adapter == judge
    assert plan_load(LoadOptions(variant="prefix-setpe"), "judge").adapter == judge
    # The base model (an order-sensitive variant) or a model of the user's: no adapter.
    assert plan_load(LoadOptions(variant="causal-pe"), "judge").adapter is None
    assert plan_load(LoadOptions(model="/some/model"), "judge").adapter is None
    assert plan_load(LoadOptions(), "choose").adapter == default_adapter("choose")
    assert plan_load(LoadOptions(adapter="none"), "judge").adapter is None and plan_load(LoadOptions(adapter="/my/adapter"), "judge").adapter == "/my/adapter"
    with pytest.raises(Exception, match="unknown adapter kind 'rank'"):
        default_adapter("rank")


def test_a_resume_is_keyed_on_the_readout_the_run_resolves_to(capsys, tmp_path):
    """The judge's own readout (its setllm.json) named with --readout is the same job; another
    readout is refused as judged under another readout, not as another file's rows."""
    judge = tmp_path / "judge"
    tiny_model("llama").save_pretrained(judge)
    tiny_tokenizer().save_pretrained(judge)
    (judge / "setllm.json").write_text(json.dumps({"readout": "mean"}))  # a full fine-tune records what it was trained as
    src, out = tmp_path / "j.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps({"id": "j0", "instruction": "Say hi", "candidates": ["Hello!", "Go away."]}) + "\n")
    args = ["judge", "--input", str(src), "--output", str(out), "--model", str(judge), "--adapter", "none", "--no-progress"]
    code, _, err = cli(capsys, *args)
    assert code == 0 and "readout mean" in err and "1 judged" in err
    code, _, err = cli(capsys, *args, "--readout", "mean")
    assert code == 0 and err.strip() == f"0 judged, 1 already in {out}"
    code, _, err = cli(capsys, *args, "--readout", "likelihood")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{out}:1 was judged under another readout ('mean'; this run: 'likelihood')" in err and "--overwrite" in err


def _long_judge_model(tmp_path):
    small = tmp_path / "small"
    tiny_model("llama", max_position_embeddings=64).save_pretrained(small)
    tiny_tokenizer().save_pretrained(small)
    return small


def test_a_too_long_row_is_named_before_anything_is_written_and_skipped_with_skip_bad(capsys, tmp_path):
    small = _long_judge_model(tmp_path)
    src, out = tmp_path / "rows.jsonl", tmp_path / "v.jsonl"
    rows = [{"id": "ok", "instruction": "Q", "candidates": ["a", "b"]},
            {"id": "long", "instruction": "word " * 80, "candidates": ["yes", "no"]},
            '{"instruction": "Q", "candidates": ["only"]}']
    src.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    args = ["judge", "--input", str(src), "--output", str(out), "--model", str(small), "--adapter", "none", "--no-progress"]
    code, _, err = cli(capsys, *args)
    assert code == 2 and f"{src}:3: " in err and not out.exists()  # a malformed row is found first, before loading
    src.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    code, _, err = cli(capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 2 and not out.exists()  # the model line, then the error
    error = err.strip().splitlines()[-1]
    assert error.startswith(f"error: {src}:2 (id 'long'): prompt is") and "longer than the model's context" in error
    assert "its instruction is the longest part" in error and "candidates" not in error.split("context")[-1]
    src.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    code, _, err = cli(capsys, *args, "--skip-bad")
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert code == 0 and len(warning) == 1 and "skipped 2 bad row(s)" in warning[0] and f"{src}:2 (id 'long')" in warning[0]
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["ok"] and "1 judged, 0 already" in err
    assert "2 skipped as bad" in err
