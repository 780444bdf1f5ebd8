"""User-facing errors (one line, exit 2) and the CLI contract, on a tiny saved model."""

import json

import pytest
import torch
from tiny import run_cli, tiny_model, tiny_tokenizer

from setllm import (
    PromptError,
    Set,
    SetLLM,
    UnsupportedModelError,
    load_model,
)

cli = run_cli
from setllm.loading import ModelLoadError


def test_choose_json_contract(model_dir, capsys):
    code, out, err = cli(capsys, "choose", "Which city is the capital of France?", "--options", "Paris", "Rome", "Zurich", "--model", model_dir, "--json")
    assert code == 0
    result = json.loads(out)
    assert result["model"] == model_dir and result["adapter"] is None  # says which adapter is in use
    assert f"setllm: {model_dir}, adapter none, variant setmask-setpe" in err
    assert result["answer"] in ("Paris", "Rome", "Zurich") and set(result["scores"]) == {"Paris", "Rome", "Zurich"}
    assert result["answer"] == max(result["scores"], key=result["scores"].get)
    assert result["variant"] == "setmask-setpe"
    # Same answer and scores through the Python API.
    lm = SetLLM(*load_model(model_dir))
    choice = lm.choose("Which city is the capital of France?", ["Paris", "Rome", "Zurich"])
    assert {s.text: s.logprob for s in choice.scores} == pytest.approx(result["scores"], abs=1e-6)


def test_choose_is_order_invariant_from_the_cli(model_dir, capsys):
    a = json.loads(cli(capsys, "choose", "q?", "--options", "apple", "dog", "fox", "--model", model_dir, "--json")[1])
    b = json.loads(cli(capsys, "choose", "q?", "--options", "fox", "apple", "dog", "--model", model_dir, "--json")[1])
    assert a["answer"] == b["answer"] and a["scores"] == b["scores"]  # exact mode: bit-identical


@pytest.mark.parametrize("variant", ["sbp", "canonical"])
def test_training_free_variants_from_the_cli(model_dir, capsys, variant):
    code, out, err = cli(capsys, "choose", "q?", "--options", "apple", "seven dog", "fox", "--model", model_dir, "--variant", variant, "--json")
    assert code == 0
    a = json.loads(out)
    assert a["variant"] == variant and a["adapter"] is None
    assert f"adapter none, variant {variant}" in err and "untrained Set-LLM" not in err  # the base model as it is, by design
    b = json.loads(cli(capsys, "choose", "q?", "--options", "fox", "apple", "seven dog", "--model", model_dir, "--variant", variant, "--json")[1])
    assert a["answer"] == b["answer"] and a["scores"] == b["scores"]  # exact mode: bit-identical


def test_generate_json_file_and_markup(model_dir, capsys, tmp_path):
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"prompt": ["Pick one:\n", {"set": ["apple\n", "dog\n"]}, "Answer:"]}))
    code, out, _ = cli(capsys, "generate", "--prompt-file", str(f), "--max-new-tokens", "4", "--model", model_dir, "--json")
    assert code == 0 and isinstance(json.loads(out)["text"], str)
    code, out2, _ = cli(capsys, "generate", "--prompt", r"Pick one:\n{{dog\n||apple\n}}Answer:", "--max-new-tokens", "4", "--model", model_dir, "--json")
    assert code == 0 and json.loads(out2)["text"] == json.loads(out)["text"]


@pytest.mark.parametrize("argv, message", [
    (["generate", "--prompt", "a {{x||"], "markup offset 2: set opened with '{{' is never closed"),
    (["generate", "--prompt", "a {{x||}}"], "markup offset 7: empty set element"),
    (["choose", "q", "--options", "a", "--model", "MODEL"], "--options: a question needs at least two options, got 1"),
    (["choose", "q", "--options", "a", "", "--model", "MODEL"], "--options[1] must be non-empty text"),
    (["choose", "q", "--options", "a", "b", "a ", "--model", "MODEL"], "--options: duplicate option 'a'"),
    (["choose", "q", "--options", "a", "b", "--model", "MODEL", "--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    (["choose", "q", "--options", "a", "b", "--model", "MODEL", "--batch-size", "-1"], "--batch-size must be at least 1, got -1"),
    (["choose", "q", "--options", "a", "b", "--model", "MODEL", "--device", "foo"], "--device 'foo' is not a torch device"),
    pytest.param(["choose", "q", "--options", "a", "b", "--model", "MODEL", "--device", "cuda"], "no CUDA GPU",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
    (["choose", "q", "--options", "a", "b", "--model", "MODEL", "--dtype", "int8"], "argument --dtype: invalid choice"),
    (["demo", "--options", "Paris", "--model", "MODEL"], "--options: a question needs at least two options"),
    (["demo", "--options", "a", "b", "c", "d", "e", "f", "g", "--model", "MODEL"], "7 options are 5040 orderings (at most 6 options)"),
    (["choose", "q", "--options", "a", "b", "--model", "/nonexistent/model"], "model '/nonexistent/model' not found"),
    (["choose", "q", "--options", "a", "b", "--model", "MODEL", "--adapter", "/nonexistent"], "no adapter_config.json"),
    (["choose", "q", "--options", "a", "b", "--model", "MODEL", "--variant", "causal-pe", "--exact"], "only to invariant variants"),
])
def test_user_errors_exit_2_with_one_line(argv, message, model_dir, capsys):
    argv = [model_dir if a == "MODEL" else a for a in argv]
    code, out, err = cli(capsys, *argv)
    assert code == 2
    last = err.strip().splitlines()[-1]  # earlier lines may be a loading progress bar
    assert last.startswith("error: ") and message in last and err.count("error:") == 1 and "Traceback" not in err


def test_bad_json_prompt_file(capsys, tmp_path):
    f = tmp_path / "bad.json"
    f.write_text('{"prompt": ["a", {"set": ["x"]')
    code, _, err = cli(capsys, "generate", "--prompt-file", str(f))
    assert code == 2 and "malformed JSON at line 1" in err
    code, _, err = cli(capsys, "generate", "--prompt-file", str(tmp_path / "missing.json"))
    assert code == 2 and "missing.json: no such file" in err
    code, _, err = cli(capsys, "generate", "--prompt-file", str(tmp_path))
    assert code == 2 and "is a directory" in err


@pytest.mark.parametrize("name, data, message", [
    ("latin1.txt", "Pick: caf\xe9\n{{a\n||b\n}}Answer:".encode("latin-1"), "latin1.txt:1: not UTF-8 text (byte 9); save the file as UTF-8"),
    ("latin1.json", '{"prompt": ["caf\xe9\n", {"set": ["a\n", "b\n"]}, "Answer:"]}'.encode("latin-1"), "latin1.json:1: not UTF-8 text (byte 16)"),
    ("bom.txt", b"\xef\xbb\xbfPick {{a||b}}Answer:", "bom.txt:1: starts with a byte-order mark (BOM)"),
    ("empty.json", b"\n", "prompt file {dir}/empty.json: is empty"),
])
def test_user_files_that_are_not_utf8_text_get_one_line(capsys, tmp_path, name, data, message):
    (tmp_path / name).write_bytes(data)
    code, _, err = cli(capsys, "generate", "--prompt-file", str(tmp_path / name))
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and message.format(dir=tmp_path) in err
    config = tmp_path / "c.yaml"
    config.write_bytes(data)
    code, _, err = cli(capsys, "eval", "--config", str(config), "--out", str(tmp_path / "o"))
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ")


def test_prompt_longer_than_context(model_dir):
    lm = SetLLM(*load_model(model_dir))
    with pytest.raises(PromptError, match="longer than the model's context"):
        lm.encode(["fox " * 300 + "fox"])


def test_unsupported_architectures():
    from transformers import BertConfig, BertLMHeadModel

    bert = BertLMHeadModel(BertConfig(vocab_size=400, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, is_decoder=True))
    with pytest.raises(UnsupportedModelError, match="'bert' has not been verified"):
        SetLLM(bert, tiny_tokenizer())

    class EncDec(torch.nn.Module):
        config = type("C", (), {"model_type": "t5", "is_encoder_decoder": True})()

    with pytest.raises(UnsupportedModelError, match="encoder-decoder"):
        SetLLM(EncDec(), tiny_tokenizer())


def test_missing_model_error_is_actionable(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        load_model(str(tmp_path / "nope"))


def test_unknown_variant():
    with pytest.raises(ValueError, match="unknown variant 'set'; choose one of: causal-pe"):
        SetLLM(tiny_model("llama"), tiny_tokenizer(), "set")


def test_score_needs_options_for_several_sets():
    lm = SetLLM(tiny_model("llama"), tiny_tokenizer())
    with pytest.raises(ValueError, match="it has 2 sets; pass options explicitly"):
        lm.score(["q", Set(["a", "b"]), "r", Set(["c", "d"])])


def test_choose_a_file_of_questions_resumes_in_input_order(model_dir, capsys, tmp_path):
    rows = [{"id": "a", "question": "Capital of France?", "options": ["Paris", "Rome"]},
            {"question": "Pick", "options": ["x", "y", "z"], "context": "Ctx."},
            {"id": "c", "question": "Colour?", "options": ["red", "blue"]}]
    src, out = tmp_path / "q.jsonl", tmp_path / "out" / "a.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, _, err = cli(capsys, "choose", "--input", str(src), "--output", str(out), "--model", model_dir, "--no-progress")
    assert code == 0 and "3 answered" in err
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["id"] for g in got] == ["a", "1", "c"] and [len(g["scores"]) for g in got] == [2, 3, 2]
    code, single, _ = cli(capsys, "choose", "Capital of France?", "--options", "Paris", "Rome", "--model", model_dir, "--json")
    assert got[0]["answer"] == json.loads(single)["answer"]
    out.write_text(out.read_text().splitlines(keepends=True)[0] + '{"id": "1", "ans')  # killed mid-line
    code, _, err = cli(capsys, "choose", "--input", str(src), "--output", str(out), "--model", model_dir, "--no-progress")
    assert code == 0 and "2 answered, 1 already" in err
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["a", "1", "c"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n" + json.dumps({"question": "Q", "options": ["a"]}) + "\n")
    code, _, err = cli(capsys, "choose", "--input", str(bad), "--output", str(tmp_path / "b.jsonl"), "--model", model_dir)
    assert code == 2 and err.strip() == f"error: {bad}:2: options: a question needs at least two options, got 1"
    assert not (tmp_path / "b.jsonl").exists()  # nothing written for a bad file


def test_setllm_warnings_print_once_as_one_line(model_dir, capsys):
    code, _, err = cli(capsys, "generate", "--prompt", "a\\n{{x||y}}Answer: ", "--max-new-tokens", "2", "--model", model_dir, "--adapter", "none")
    assert code == 0
    warning_lines = [line for line in err.splitlines() if "warning" in line.lower()]
    assert len(warning_lines) == 1 and warning_lines[0].startswith("warning: a prompt segment ends with a space")


def test_help_shows_only_defaults_that_say_something(capsys):
    """HfArgumentParser's formatter printed "(default: None)" after every optional flag, even
    after a help text that names its default in words."""
    from setllm.cli import main

    for command in ("choose", "eval", "report", "train"):
        with pytest.raises(SystemExit) as exit_:
            main([command, "--help"])
        assert exit_.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        assert "(default: None)" not in text and "(default: False)" not in text and "(default: True)" not in text, command
        assert "(default: )" not in text, command
    choose = " ".join(_help("choose", capsys).split())
    assert "else setmask-setpe (default" not in choose  # the help names its default in words
    assert "prompts per forward pass (default: 8)" in choose


def _help(command: str, capsys) -> str:
    from setllm.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    return capsys.readouterr().out


def test_train_prints_no_weights_bars(model_dir, capsys, tmp_path):
    """A full fine-tune wrote a "Writing model shards" bar per save, even with --no-progress."""
    from pathlib import Path

    data = Path(__file__).parents[1] / "fixtures" / "train"
    code, out, err = cli(capsys, "train", "--data", "piqa", "--data-dir", str(data), "--model", model_dir, "--full-finetune",
                         "--max-steps", "1", "--save-steps", "1", "--batch-size", "2", "--no-progress", "--out", str(tmp_path / "full"))
    assert code == 0 and json.loads(out)["steps"] == 1
    assert "Writing model shards" not in err and "Loading weights" not in err and "it/s" not in err, err


def test_json_output_keeps_non_ascii_text(model_dir, capsys):
    code, out, _ = cli(capsys, "choose", "Où?", "--options", "Zürich", "Genève", "--model", model_dir, "--json")
    assert code == 0 and "Zürich" in out and "\\u00fc" not in out
    assert set(json.loads(out)["scores"]) == {"Zürich", "Genève"}


def test_an_option_before_the_command_is_named(capsys):
    code, out, err = cli(capsys, "--foo")
    assert code == 2 and err.strip() == "error: unknown option --foo; a command comes first: setllm COMMAND [options] (see `setllm --help`)"


def test_off_switches_are_listed_and_say_what_they_turn_off(capsys):
    from setllm.cli import main

    for command, flag, what in (("choose", "--no-exact", "--exact"), ("choose", "--no-eos", "--eos"), ("eval", "--no-progress", "--progress")):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        lines = capsys.readouterr().out.splitlines()
        at = next(i for i, line in enumerate(lines) if line.strip().startswith(flag) or f", {flag}" in line)
        assert f"turn off {what}" in " ".join(lines[at : at + 2])
