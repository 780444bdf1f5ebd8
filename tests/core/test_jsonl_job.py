"""The JSONL job (:mod:`setllm.io.jsonl_job`): answers are matched to input rows by id *and*
content, so a resumed job never hands back answers to other rows; the output is never the
input; bad rows stop the job or, with ``skip_bad``, are skipped and counted."""

from __future__ import annotations

import json

import pytest
from tiny import run_cli

from setllm import LoadOptions
from setllm.io import jsonl_job
from setllm.io.records import DataError
from setllm.loading.plan import plan_load


def parse(obj, where):
    if not isinstance(obj, dict) or "q" not in obj:
        raise DataError(f"{where}: missing field 'q'")
    return {"q": obj["q"]}


def write(path, *rows) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def answer(batch):
    return [{"a": r["q"].upper()} for r in batch]


def test_answers_carry_id_and_content_and_resume_skips_only_their_own_rows(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write(src, {"q": "x"}, {"id": "k", "q": "y"})
    rows = jsonl_job.read_rows(src, parse).rows
    assert jsonl_job.run(jsonl_job.todo(rows, out), out, answer, 1, progress=False) == 2
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(g["id"], g["a"]) for g in got] == [("0", "X"), ("k", "Y")] and all(len(g["row"]) == 16 for g in got)
    assert jsonl_job.todo(rows, out) == []


@pytest.mark.parametrize("other", [[{"q": "z"}, {"id": "k", "q": "y"}], [{"q": "x"}, {"id": "k", "q": "edited"}]])
def test_answers_to_other_rows_are_refused(tmp_path, other):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write(src, {"q": "x"}, {"id": "k", "q": "y"})
    rows = jsonl_job.read_rows(src, parse).rows
    jsonl_job.run(rows, out, answer, 2, progress=False)
    write(src, *other)
    changed = jsonl_job.read_rows(src, parse).rows
    with pytest.raises(DataError, match=r"out.jsonl:\d answers a row that is not in this --input .*--overwrite to start over"):
        jsonl_job.todo(changed, out)
    assert jsonl_job.todo(changed, out, overwrite=True) == changed and out.read_text() == ""


def test_answers_by_another_model_are_refused(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write(src, {"q": "x"}, {"q": "y"})
    rows = jsonl_job.read_rows(src, parse).rows
    jsonl_job.run(rows[:1], out, answer, 1, progress=False, by="model-a")
    assert json.loads(out.read_text())["by"] == "model-a"
    assert jsonl_job.todo(rows, out, by="model-a") == rows[1:]  # its own answers resume
    with pytest.raises(DataError, match=r"out.jsonl:1 was answered by another model .*--overwrite to start over"):
        jsonl_job.todo(rows, out, by="model-b")
    write(out, {"id": "0", "a": "X", "row": rows[0]["row"]})  # an older setllm recorded no model
    with pytest.raises(DataError, match="answered by another model"):
        jsonl_job.todo(rows, out, by="model-a")


def test_a_models_identity_follows_its_adapter_files_and_reading_not_its_arithmetic(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "adapter_model.safetensors").write_bytes(b"weights one")
    (adapter / "setllm.json").write_text('{"variant": "setmask-setpe"}')
    first = plan_load(LoadOptions(model="m", adapter=str(adapter))).answer_fingerprint()
    assert plan_load(LoadOptions(model="m", adapter=str(adapter), batch_size=1, dtype="bf16", exact=False)).answer_fingerprint() == first
    assert plan_load(LoadOptions(model="m", adapter=str(adapter), variant="setmask-setpe", eos=True)).answer_fingerprint() == first  # as recorded
    causal = plan_load(LoadOptions(model="m", adapter="none", variant="causal-pe")).answer_fingerprint()
    assert plan_load(LoadOptions(model="m", adapter="none")).answer_fingerprint() != causal
    (adapter / "trainer_state.json").write_text("{}")  # a training log decides no answer
    assert plan_load(LoadOptions(model="m", adapter=str(adapter))).answer_fingerprint() == first
    others = [LoadOptions(model="m2", adapter=str(adapter)), LoadOptions(model="m", adapter="none"),
              LoadOptions(model="m", adapter=str(adapter), variant="causal-pe"), LoadOptions(model="m", adapter=str(adapter), eos=False)]
    (adapter / "adapter_model.safetensors").write_bytes(b"weights two")  # retrained in place
    others.append(LoadOptions(model="m", adapter=str(adapter)))
    assert len({first, *(plan_load(o).answer_fingerprint() for o in others)}) == 1 + len(others)


def test_the_output_cannot_be_the_input(tmp_path):
    src = tmp_path / "in.jsonl"
    write(src, {"id": "a", "q": "x"})
    with pytest.raises(DataError, match="is the --input file"):
        jsonl_job.check_output(src, src)
    with pytest.raises(DataError, match="is the --input file"):
        jsonl_job.check_output(tmp_path / "." / "in.jsonl", src)


def test_bad_rows_stop_the_read_or_are_skipped_and_counted(tmp_path):
    src = tmp_path / "in.jsonl"
    write(src, {"q": "x"}, {"nope": 1}, "{broken", {"id": "d", "q": "y"}, {"id": "d", "q": "z"})
    with pytest.raises(DataError, match=r"in.jsonl:2: missing field 'q'"):
        jsonl_job.read_rows(src, parse)
    with pytest.warns(UserWarning, match=r"skipped 3 bad row\(s\) of .*in.jsonl; the first: .*in.jsonl:2: missing field 'q'"):
        read = jsonl_job.read_rows(src, parse, skip_bad=True)
    assert [r["id"] for r in read.rows] == ["0", "d"] and len(read.skipped) == 3 and "duplicate id 'd'" in read.skipped[2]


def test_an_answer_file_of_something_else_is_refused(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write(src, {"q": "x"})
    write(out, {"id": "0", "answer": "from an older setllm, without its row's content"})
    with pytest.raises(DataError, match="out.jsonl:1: not an answer row of setllm"):
        jsonl_job.todo(jsonl_job.read_rows(src, parse).rows, out)


def test_choose_cli_refuses_another_files_answers_and_says_who_answered(model_dir, capsys, tmp_path):
    a, b, out = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "out.jsonl"
    write(a, {"question": "Capital of France?", "options": ["Paris", "Rome"]}, {"question": "Colour?", "options": ["red", "blue"]})
    write(b, {"question": "Pick a fruit", "options": ["apple", "dog"]}, {"question": "Pick an animal", "options": ["cat", "rock"]})
    args = ["--output", str(out), "--model", model_dir, "--no-progress"]
    code, _, err = run_cli(capsys, "choose", "--input", str(a), *args)
    assert code == 0 and err.splitlines()[0] == f"setllm: {model_dir}, adapter none, variant setmask-setpe" and "2 answered" in err
    code, _, err = run_cli(capsys, "choose", "--input", str(b), *args)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "answers a row that is not in this --input" in err
    code, _, err = run_cli(capsys, "choose", "--input", str(b), *args, "--overwrite")
    assert code == 0 and "2 answered, 0 already" in err
    assert [json.loads(x)["answer"] for x in out.read_text().splitlines()] in (["apple", "cat"], ["apple", "rock"], ["dog", "cat"], ["dog", "rock"])
    code, _, err = run_cli(capsys, "choose", "--input", str(b), *args, "--variant", "causal-pe")
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{out}:1 was answered by another model" in err
    code, _, err = run_cli(capsys, "choose", "--input", str(b), "--output", str(b), "--model", model_dir)
    assert code == 2 and err.strip() == f"error: --output {b} is the --input file; answers go to a file of their own"


def test_a_resume_with_nothing_left_loads_no_model(model_dir, capsys, tmp_path, monkeypatch):
    src, out = tmp_path / "a.jsonl", tmp_path / "out.jsonl"
    write(src, {"question": "Capital of France?", "options": ["Paris", "Rome"]})
    assert run_cli(capsys, "choose", "--input", str(src), "--output", str(out), "--model", model_dir, "--no-progress")[0] == 0
    import setllm.cli.common as common

    monkeypatch.setattr(common, "load_setllm", lambda *a, **k: pytest.fail("loaded a model with nothing to do"))
    code, _, err = run_cli(capsys, "choose", "--input", str(src), "--output", str(out), "--model", model_dir)
    assert code == 0 and err.strip() == f"0 answered, 1 already in {out}"


def test_a_local_model_retrained_in_place_is_another_model(tmp_path):
    """A model named by path is fingerprinted by its files (names, sizes, both ends), so
    answers of a folder retrained under the same path are not resumed; files that decide
    no answer (a README) do not count."""
    from setllm.loading.plan import EDGE, local_model_fingerprint

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    weights = model / "model.safetensors"
    weights.write_bytes(b"h" * EDGE + b"m" * EDGE + b"t" * EDGE)
    first = plan_load(LoadOptions(model=str(model), adapter="none")).answer_fingerprint()
    assert plan_load(LoadOptions(model=str(model) + "/", adapter="none", batch_size=2)).answer_fingerprint() == first  # the same path, spelled otherwise
    (model / "README.md").write_text("notes")
    assert plan_load(LoadOptions(model=str(model), adapter="none")).answer_fingerprint() == first
    weights.write_bytes(b"h" * EDGE + b"m" * EDGE + b"T" * EDGE)  # the last layers retrained
    second = plan_load(LoadOptions(model=str(model), adapter="none")).answer_fingerprint()
    (model / "config.json").write_text('{"model_type": "llama", "rope_theta": 1}')
    assert len({first, second, plan_load(LoadOptions(model=str(model), adapter="none")).answer_fingerprint()}) == 3
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"one")
    before = local_model_fingerprint(gguf)
    gguf.write_bytes(b"two")
    assert local_model_fingerprint(gguf) != before


def test_choose_names_a_too_long_row_before_writing_and_skips_it_with_skip_bad(capsys, tmp_path):
    from tiny import tiny_model, tiny_tokenizer

    small = tmp_path / "small"
    tiny_model("llama", max_position_embeddings=64).save_pretrained(small)
    tiny_tokenizer().save_pretrained(small)
    src, out = tmp_path / "in.jsonl", tmp_path / "sub" / "out.jsonl"
    write(src, {"question": "Colour?", "options": ["red", "blue"]}, {"id": "big", "question": "Colour?", "context": "word " * 80,
                                                                      "options": ["red", "blue"]})
    args = ["choose", "--input", str(src), "--output", str(out), "--model", str(small), "--adapter", "none", "--no-progress"]
    code, _, err = run_cli(capsys, *args)
    error = err.strip().splitlines()[-1]
    assert code == 2 and error.startswith(f"error: {src}:2 (id 'big'): prompt is") and "its context is the longest part" in error
    assert not out.exists() and not out.parent.exists()  # "before anything is written"
    code, _, err = run_cli(capsys, *args, "--skip-bad")
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert code == 0 and len(warning) == 1 and "skipped 1 bad row(s)" in warning[0] and f"{src}:2 (id 'big')" in warning[0]
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["0"] and "1 answered, 0 already" in err


def test_answers_under_other_settings_are_refused_naming_the_setting(tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write(src, {"q": "x"}, {"q": "y"})
    rows = jsonl_job.read_rows(src, parse).rows
    jsonl_job.run(rows[:1], out, answer, 1, progress=False, by="m", settings={"readout": "mean"})
    assert json.loads(out.read_text())["settings"] == {"readout": "mean"}
    assert jsonl_job.todo(rows, out, by="m", settings={"readout": "mean"}, verb="judged") == rows[1:]
    with pytest.raises(DataError, match=r"out.jsonl:1 was judged under another readout \('mean'; this run: 'pmi'\); .*--overwrite"):
        jsonl_job.todo(rows, out, by="m", settings={"readout": "pmi"}, verb="judged")
    write(out, {"id": "0", "a": "X", "row": "0123456789abcdef", "by": "m"})  # an older setllm hashed the readout into "row"
    with pytest.raises(DataError, match=r"out.jsonl:1 was judged by an older setllm that did not record its readout"):
        jsonl_job.todo(rows, out, by="m", settings={"readout": "mean"}, verb="judged")
