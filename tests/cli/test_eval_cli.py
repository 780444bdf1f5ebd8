"""`setllm eval` and `setllm report` through the command line, with a tiny saved model."""

import json
from pathlib import Path

import pytest
from tiny import tiny_model, tiny_tokenizer

from setllm.cli import main

FIXTURES = Path(__file__).parents[1] / "fixtures" / "eval"




@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama", max_position_embeddings=1024).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


def eval_args(model_dir, out, *extra):
    return ["eval", "--dataset", "arc_challenge", "--data-dir", str(FIXTURES), "--model", str(model_dir), "--adapter", "none",
            "--out", str(out), "--no-progress", "--batch-size", "4", *extra]


def test_eval_then_report(model_dir, tmp_path, capsys):
    assert main(eval_args(model_dir, tmp_path / "base", "--variant", "causal-pe", "--limit", "3")) == 0
    assert main(eval_args(model_dir, tmp_path / "set", "--variant", "setmask-setpe", "--limit", "3")) == 0
    summary = json.loads((tmp_path / "base" / "summary.json").read_text())
    for key in ("dataset", "split", "n", "variant", "accuracy", "runtime_s"):
        assert key in summary
    assert (summary["dataset"], summary["split"], summary["n"], summary["variant"]) == ("arc_challenge", "test", 3, "causal-pe")
    assert set(summary["accuracy"]) == set(summary["runtime_s"]) == {"single", "random", "adversarial", "majority"}
    assert summary["model"] == str(model_dir) and summary["adapter"] is None
    assert "arc_challenge test n=3 causal-pe (modified)" in capsys.readouterr().out

    md = tmp_path / "report" / "table.md"  # its folder is made
    assert main(["report", str(tmp_path / "base"), str(tmp_path / "set"), "--plot-dir", str(tmp_path / "plots"), "--markdown", str(md)]) == 0
    table = capsys.readouterr().out
    assert "| Model | Training | Eval. Mode | ARC Rand. | ARC Adv. |" in table
    assert "| Causal Mask+PE | Pretrained | Majority Vote |" in table and "| SetMask+SetPE | Pretrained | Single run |" in table
    assert md.read_text().strip() == table.strip()
    pngs = sorted(p.name for p in (tmp_path / "plots").glob("*.png"))
    assert pngs == ["agreement_arc_challenge_causal-mask-pe-pretrained_vs_setmask-setpe-pretrained.png",
                    "votes_accuracy_arc_challenge_causal-mask-pe-pretrained.png"]
    assert all((tmp_path / "plots" / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)
    assert "Not comparable" not in table
    # A run on other questions in the same table is called out, in the table and once on stderr.
    assert main(eval_args(model_dir, tmp_path / "more", "--variant", "setmask-setpe", "--limit", "5", "--label", "five")) == 0
    capsys.readouterr()
    assert main(["report", str(tmp_path / "base"), str(tmp_path / "more")]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("**Not comparable:** the runs on ARC were measured on different questions (n = 3, 5).")
    assert err.count("warning: the runs on ARC were measured on different questions (n = 3, 5)") == 1


def test_template_other_than_the_trained_one_warns(model_dir, tmp_path, capsys):
    import shutil

    from setllm.loading import AdapterInfo

    trained = shutil.copytree(model_dir, tmp_path / "trained")  # a full fine-tune records what it was trained as
    AdapterInfo(str(model_dir), "causal-pe", "modified").write(trained)
    assert main(eval_args(trained, tmp_path / "m", "--limit", "1", "--modes", "single")) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(eval_args(trained, tmp_path / "o", "--limit", "1", "--modes", "single", "--template", "original")) == 0
    assert "warning: the model was trained with template=modified; reading it with template=original as asked" in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--template", "sideways"], "error: argument --template: invalid choice: 'sideways'"),  # a flag error: one line too
    (["--max-orderings", "0"], "error: --max-orderings must be at least 1"),
    (["--split", "train"], "error: "),
    (["--modes", "single,best"], "error: unknown mode 'best'"),
    (["--modes", ""], "error: --modes is empty"),
    (["--subset-seed", "3"], "error: --subset-seed picks a random subset of --limit questions"),
    (["--batch-size", "0"], "error: --batch-size must be at least 1"),
])
def test_user_errors_exit_2_with_one_line(model_dir, tmp_path, capsys, extra, message):
    assert main(eval_args(model_dir, tmp_path / "x", *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and len(err.splitlines()) == 1


def test_bad_record_names_file_and_line(model_dir, tmp_path, capsys):
    bad = tmp_path / "mine.jsonl"
    bad.write_text('{"question": "Q?", "choices": ["a", "b"], "label": 0}\n{"question": "Q?", "choices": ["a", "b"], "label": 5}\n')
    code = main(["eval", "--data-file", str(bad), "--model", str(model_dir), "--adapter", "none", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"error: {bad}:2: 'label' must be an integer index") and len(err.splitlines()) == 1
    assert main(["report", str(tmp_path / "nowhere")]) == 2


def test_skip_bad_skips_and_counts_bad_records(model_dir, tmp_path, capsys):
    data = tmp_path / "mine.jsonl"
    data.write_text('{"id": "a", "question": "Q?", "choices": ["x", "y"], "label": 0}\n{"question": "Q?", "choices": ["a", "b"], "label": 5}\n'
                    'not json\n{"id": "d", "question": "R?", "choices": ["u", "v"], "label": 1}\n')
    code = main(["eval", "--data-file", str(data), "--model", str(model_dir), "--adapter", "none", "--out", str(tmp_path / "o"),
                 "--modes", "single", "--no-progress", "--skip-bad"])
    err = capsys.readouterr().err
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert code == 0 and len(warning) == 1 and "skipped 2 bad record(s)" in warning[0] and f"{data}:2: 'label'" in warning[0]
    assert [json.loads(x)["id"] for x in (tmp_path / "o" / "predictions.jsonl").read_text().splitlines()] == ["a", "d"]



def test_config_file_takes_every_option_name_including_model_ones(model_dir, tmp_path, capsys):
    cfg = tmp_path / "eval.yaml"
    cfg.write_text(f"dataset: arc_challenge\ndata_dir: {FIXTURES}\nmodel: {model_dir}\nadapter: none\nvariant: causal-pe\n"
                   f"limit: 2\nmodes: [single]\nout: {tmp_path / 'run'}\nprogress: false\n")
    assert main(["eval", "--config", str(cfg), "--limit", "1"]) == 0  # flags override the file
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["variant"], summary["n"], summary["modes"]) == ("causal-pe", 1, ["single"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: arc_challenge\nlimit: many\n")
    assert main(["eval", "--config", str(bad), "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip().startswith("error: argument --limit: invalid int value: 'many'")


def test_eval_under_sbp_reads_the_model_without_an_adapter_or_a_warning(model_dir, tmp_path, capsys):
    args = [a for a in eval_args(model_dir, tmp_path / "sbp", "--variant", "sbp", "--limit", "2", "--modes", "single") if a not in ("--adapter", "none")]
    assert main(args) == 0
    summary = json.loads((tmp_path / "sbp" / "summary.json").read_text())
    assert (summary["variant"], summary["adapter"], summary["one_run_per_question"]) == ("sbp", None, True)
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]


def test_a_model_with_no_adapter_is_said_to_read_untrained_set_llm(model_dir, tmp_path, capsys):
    args = [a for a in eval_args(model_dir, tmp_path / "auto", "--limit", "1", "--modes", "single") if a not in ("--adapter", "none")]
    assert main(args) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "has no shipped adapter: this is the untrained Set-LLM reading (setmask-setpe)" in warnings[0]


def test_one_row_format_for_choose_and_eval(model_dir, tmp_path, capsys):
    """`choose --input` names the options "options", eval's records "choices": each command reads both names, so
    one file of labelled rows serves both (eval needs the label; choose ignores it)."""
    data = tmp_path / "rows.jsonl"
    data.write_text('{"id": "a", "question": "Q?", "options": ["x", "y"], "label": 0}\n{"id": "b", "question": "R?", "choices": ["u", "v"], "label": 1}\n')
    code = main(["eval", "--data-file", str(data), "--model", str(model_dir), "--adapter", "none", "--out", str(tmp_path / "o"),
                 "--modes", "single", "--no-progress"])
    assert code == 0 and [json.loads(x)["id"] for x in (tmp_path / "o" / "predictions.jsonl").read_text().splitlines()] == ["a", "b"]
    code = main(["choose", "--input", str(data), "--output", str(tmp_path / "answers.jsonl"), "--model", str(model_dir), "--no-progress"])
    answers = [json.loads(x) for x in (tmp_path / "answers.jsonl").read_text().splitlines()]
    assert code == 0 and [(a["id"], len(a["scores"])) for a in answers] == [("a", 2), ("b", 2)]
    capsys.readouterr()
    data.write_text('{"id": "a", "question": "Q?", "options": ["x", "y"]}\n')
    assert main(["eval", "--data-file", str(data), "--model", str(model_dir), "--adapter", "none", "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert "missing 'label'" in err and "setllm choose --input answers rows without one" in err


@pytest.mark.parametrize("variant", ["causal-pe", "setmask-setpe"])
def test_judge_eval_prints_both_orders_and_position_bias(model_dir, tmp_path, capsys, variant):
    """`eval --dataset ultrafeedback-pairs` prints what summary.json holds for a judge: the
    swapped order's accuracy, position consistency and first-slot rate."""
    args = ["eval", "--dataset", "ultrafeedback-pairs", "--data-dir", str(FIXTURES.parent / "data"), "--model", str(model_dir),
            "--adapter", "none", "--variant", variant, "--out", str(tmp_path / "run"), "--no-progress"]
    assert main(args) == 0
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"ultrafeedback-pairs test n={s['n']} {variant} (modified): single {s['accuracy']['single']:.2f}%")
    assert line.endswith(f"; swapped {s['accuracy_swapped']:.2f}%, position consistency {s['position_consistency']:.2f}%, "
                         f"first-slot rate {s['first_slot_rate']:.2f}%")
    if variant == "setmask-setpe":  # invariant: one run per pair, the same pick in both orders
        assert (s["position_consistency"], s["first_slot_rate"]) == (100.0, 50.0)
