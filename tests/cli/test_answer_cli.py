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
    (["--documents", "notes.tx", "--question", "Q?"], "error: --documents[0]: no file 'notes.tx'; to read it as a document's text, pass --text"),
    (["--documents", "a", "docs/b", "--question", "Q?"], "error: --documents[1]: no file 'docs/b'; to read it as a document's text, pass --text"),
    (["--documents", "sub", "--question", "Q?"], "error: --documents[0]: sub is a folder; name its files (e.g. sub/*.txt), one document each"),
    (["--documents", "a", "--question", "Q?", "--cache-mb", "-1"], "error: --cache-mb must be a number of megabytes >= 0 (0: off), got -1.0"),
    (["--documents", "a", "--question", "Q?", "--cache-mb", "0", "--cache-dir", "c"],
     "error: --cache-dir keeps the document cache on disk: it needs --cache-mb > 0"),
])
def test_user_errors_are_one_line_before_the_model_loads(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
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
    assert all(flag in text for flag in ("--documents", "--question", "--input", "--output", "--json", "--max-new-tokens", "--adapter",
                                         "--cache-mb", "--cache-dir", "--cache-dir-mb", "--text"))


def test_text_that_looks_like_a_path_is_read_as_text_when_asked(model_dir, lm, capsys):
    code, out, err = answer(capsys, model_dir, "--documents", "notes.txt", "docs/b", "--text", "--question", QUESTION, "--json")
    assert code == 0, err
    assert json.loads(out)["answer"] == lm.answer(["notes.txt", "docs/b"], QUESTION, max_new_tokens=4)


def test_under_sbp_the_last_line_says_what_the_cache_reused_and_a_folder_keeps_it(model_dir, capsys, tmp_path):
    argv = ("--documents", *DOCS, "--question", QUESTION, "--variant", "sbp", "--cache-dir", str(tmp_path / "c"))
    code, out, err = answer(capsys, model_dir, *argv)
    assert code == 0, err
    assert err.splitlines()[-1] == "document cache: reused 0 pieces (0 tokens), computed 4 (" + err.split("computed 4 (")[1].split(")")[0] + \
        "); on disk 0 read, 4 written, 0 refused"  # the prefix and three documents
    code, again, err = answer(capsys, model_dir, *argv[:1], *DOCS[::-1], *argv[4:])  # another process, another order: from disk
    assert code == 0 and again == out
    last = err.splitlines()[-1]
    assert last.startswith("document cache: reused 4 pieces (") and last.endswith("computed 0 (0 tokens in 0.00 s); on disk 4 read, 0 written, 0 refused")


def test_an_empty_answer_is_said(model_dir, capsys, monkeypatch):
    monkeypatch.setattr(SetLLM, "answer", lambda self, *a, **k: "")
    code, out, err = answer(capsys, model_dir, "--documents", *DOCS, "--question", QUESTION)
    assert code == 0 and out == "\n"
    assert "setllm: the answer is empty (the first line generated was blank)" in err.splitlines()


def test_an_interrupted_file_job_says_how_many_rows_are_saved_and_that_a_rerun_resumes(model_dir, capsys, tmp_path, monkeypatch):
    rows = [{"id": str(i), "documents": DOCS, "question": f"Question {i}?"} for i in range(4)]
    src, out = tmp_path / "q.jsonl", tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    real, calls = SetLLM.answer_many, []

    def interrupted_later(self, *a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(SetLLM, "answer_many", interrupted_later)
    code, _, err = answer(capsys, model_dir, "--input", str(src), "--output", str(out), "--batch-size", "2", "--no-progress")
    assert code == 130
    assert err.splitlines()[-1] == f"error: interrupted: 2 of 4 rows are saved in {out}; run the same command again to resume"
    monkeypatch.setattr(SetLLM, "answer_many", real)
    code, _, err = answer(capsys, model_dir, "--input", str(src), "--output", str(out), "--batch-size", "2", "--no-progress")
    assert code == 0 and "2 answered, 2 already" in err
