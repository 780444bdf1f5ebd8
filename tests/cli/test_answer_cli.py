"""``setllm answer``: documents from files or text, one question or a resumable file of them."""

import json

import pytest
from tiny import run_cli

from setllm import SetLLM

DOCS = ["The backup server runs at 2 am.\n", "Lena leads the billing team.\n", "The office wifi password is maple-77.\n"]
QUESTION = "When does the backup server run?"


@pytest.fixture(scope="module")
def lm(model_dir):
    return SetLLM.from_pretrained(model_dir, adapter="none")


def answer(capsys, model_dir, *argv):
    return run_cli(capsys, "answer", *argv, "--model", model_dir, "--adapter", "none", "--max-new-tokens", "4")


def test_documents_from_files_and_text_answer_as_the_library_does_in_any_order(model_dir, lm, capsys, tmp_path):
    first = tmp_path / "backup.txt"
    first.write_text(DOCS[0])
    code, out, err = answer(capsys, model_dir, "--documents", str(first), DOCS[1], DOCS[2], "--question", QUESTION, "--json")
    assert code == 0, err
    got = json.loads(out)
    assert got["answer"] == lm.answer(DOCS, QUESTION, max_new_tokens=4) and got["adapter"] is None and got["variant"] == lm.variant.name
    code, out, _ = answer(capsys, model_dir, "--documents", DOCS[2], DOCS[1], str(first), "--question", QUESTION)
    assert code == 0 and out == got["answer"] + "\n"  # another order, the same answer; plain text without --json


def test_a_file_of_questions_resumes_in_input_order(model_dir, lm, capsys, tmp_path):
    rows = [{"id": "a", "documents": DOCS, "question": QUESTION},
            {"documents": DOCS[::-1], "question": "Who leads the billing team?", "answer": "Lena", "gold": 1},
            {"id": "c", "documents": DOCS[:2], "question": "What is the wifi password?"}]
    src, out = tmp_path / "q.jsonl", tmp_path / "out" / "a.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, _, err = answer(capsys, model_dir, "--input", str(src), "--output", str(out), "--no-progress")
    assert code == 0 and "3 answered" in err, err
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["id"] for g in got] == ["a", "1", "c"]
    assert [g["answer"] for g in got] == [lm.answer(r["documents"], r["question"], max_new_tokens=4) for r in rows]
    out.write_text(out.read_text().splitlines(keepends=True)[0] + '{"id": "1", "ans')  # killed mid-line
    code, _, err = answer(capsys, model_dir, "--input", str(src), "--output", str(out), "--no-progress")
    assert code == 0 and "2 answered, 1 already" in err
    assert [json.loads(line) for line in out.read_text().splitlines()] == got
    code, _, err = run_cli(capsys, "answer", "--input", str(src), "--output", str(out), "--model", model_dir, "--adapter", "none",
                           "--max-new-tokens", "5")
    assert code == 2 and err.startswith("error: ") and "max_new_tokens" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    ([], "error: pass --documents FILE|TEXT... and --question TEXT, or --input FILE.jsonl --output FILE.jsonl"),
    (["--documents", "a"], "error: pass --documents FILE|TEXT... and --question TEXT, or --input FILE.jsonl --output FILE.jsonl"),
    (["--documents", " ", "--question", "Q?"], "error: --documents[0]: a document must be non-empty text"),
    (["--documents", "a", "--question", " "], "error: --question must be non-empty text, got ' '"),
    (["--documents", "a", "--question", "Q?", "--max-new-tokens", "0"], "error: --max-new-tokens must be at least 1, got 0"),
    (["--input", "x.jsonl", "--output", "y.jsonl", "--question", "Q?"],
     "error: --input FILE.jsonl and --output FILE.jsonl go together, without --documents or --question"),
])
def test_user_errors_are_one_line_before_the_model_loads(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.jsonl").write_text(json.dumps({"documents": ["a"], "question": "Q?"}) + "\n")
    code, _, err = run_cli(capsys, "answer", *argv, "--model", str(tmp_path / "no-such-model"))
    assert code == 2 and err.strip() == message


def test_a_bad_row_is_named(capsys, tmp_path, model_dir):
    src = tmp_path / "bad.jsonl"
    src.write_text(json.dumps({"documents": [], "question": "Q?"}) + "\n")
    code, _, err = answer(capsys, model_dir, "--input", str(src), "--output", str(tmp_path / "o.jsonl"))
    assert code == 2 and err.strip() == f"error: {src}:1: 'documents' must be a non-empty list of strings"
    assert not (tmp_path / "o.jsonl").exists()


def test_help_names_every_flag(capsys):
    from setllm.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["answer", "--help"])
    text = capsys.readouterr().out
    assert exit_.value.code == 0
    assert all(flag in text for flag in ("--documents", "--question", "--input", "--output", "--json", "--max-new-tokens", "--adapter"))
