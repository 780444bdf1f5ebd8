"""`setllm report`: what each table cell stands for, one row per model, and errors that name their file.

Run directories are written here with :func:`summarize`, the code ``setllm eval`` writes
``summary.json`` with, from hand-made prediction rows; one test makes them with ``setllm eval``
and a tiny saved model.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from setllm.cli import main
from setllm.evaluation.config import EvalConfig
from setllm.evaluation.metrics import plan_for
from setllm.evaluation.report import (
    check_writable,
    load_run,
    markdown_table,
    save_plots,
    write_markdown,
)
from setllm.evaluation.store import PREDICTIONS_FILE, SUMMARY_FILE
from setllm.evaluation.summary import summarize
from setllm.io.records import DataError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "eval"
ALL = "single,random,adversarial,majority"
# (label, picks under the orderings [0, 1] and [1, 0]) of three two-option questions:
# single 66.67, random 50.00, adversarial 33.33.
QUESTIONS = [(0, [0, 0]), (1, [1, 0]), (0, [1, 1])]


def make_run(path: Path, modes: str = ALL, variant: str = "causal-pe", model: str = "org/tiny", adapter: str | None = None,
             label: str | None = None, dataset: str = "arc_challenge", one_run: bool = False) -> Path:
    """A finished run directory as ``setllm eval --modes MODES`` leaves it."""
    plan = "all" if one_run else plan_for(modes.split(","))
    rows = [_row(f"q{i}", label_, picks, plan, one_run) for i, (label_, picks) in enumerate(QUESTIONS)]
    settings = {"dataset": dataset, "split": "test", "variant": variant, "template": "modified", "model": model,
                "adapter": adapter, "invariant": variant == "setmask-setpe"}
    summary = summarize(rows, EvalConfig(dataset=dataset, modes=modes, label=label, out=str(path)), settings)
    path.mkdir(parents=True)
    (path / PREDICTIONS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / SUMMARY_FILE).write_text(json.dumps(summary))
    return path


def _row(qid: str, label: int, picks: list[int], plan: str, one_run: bool) -> dict:
    """A predictions.jsonl row holding the orderings ``plan`` would have scored."""
    n = len(picks)
    if one_run or plan == "first":
        n = 1
    elif plan == "until_failure":  # up to the first wrong answer
        n = next((i + 1 for i, p in enumerate(picks) if p != label), n)
    return {"id": qid, "label": label, "n_choices": 2, "plan": plan, "one_run": one_run, "orderings": [[0, 1], [1, 0]][:n],
            "predictions": picks[:n], "max_logprob_diff": 0.0 if n > 1 else None, "time_s": [0.01] * n, "peak_mb": [1.0] * n}


def table_rows(table: str) -> dict[tuple[str, ...], list[str]]:
    """Accuracy table rows: (model, training, mode) -> the cells after them (unescaped ``|`` split)."""
    out = {}
    for line in table.split("\n\n")[0].splitlines()[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        out[tuple(cells[:3])] = cells[3:]
    return out


# 1. A cell shows only what its run measured.

def test_single_mode_run_is_not_shown_as_random(tmp_path):
    run = load_run(make_run(tmp_path / "single", modes="single"))
    assert run.summary["accuracy"] == {"single": 66.6667}
    table = markdown_table([run])
    assert table_rows(table) == {("Causal Mask+PE", "Pretrained", "Single run"): ["-", "-"]}
    assert "accuracy in the dataset's option order (single): 66.67%" in table  # measured, said what it is


def test_rows_carry_the_papers_variant_names(tmp_path):
    from setllm.core.layout.variants import VARIANTS

    assert [v.paper_name for v in VARIANTS.values()] == [
        "Causal Mask+PE", "Causal Mask+NoPE", "Prefix Mask+NoPE", "Prefix Mask+PE", "Prefix Mask+SetPE", "SetMask+SetPE", "SBP",
        "Canonical Order"]
    run = load_run(make_run(tmp_path / "unknown", modes="single"))
    run.summary["variant"] = "from-a-later-version"  # a name this version does not know: shown as written
    assert run.base_name == "from-a-later-version"


def test_adversarial_without_random_leaves_rand_empty(tmp_path):
    run = load_run(make_run(tmp_path / "adv", modes="single,adversarial"))
    assert table_rows(markdown_table([run]))[("Causal Mask+PE", "Pretrained", "Single run")] == ["-", "33.33"]


def test_all_modes_fill_rand_adv_and_majority(tmp_path):
    rows = table_rows(markdown_table([load_run(make_run(tmp_path / "all"))]))
    assert rows[("Causal Mask+PE", "Pretrained", "Single run")] == ["50.00", "33.33"]
    assert ("Causal Mask+PE", "Pretrained", "Majority Vote") in rows


def test_one_run_per_question_stands_for_every_ordering(tmp_path):
    """An invariant variant reading a set runs each question once: that one accuracy is Rand. and Adv."""
    run = load_run(make_run(tmp_path / "set", modes="single", variant="setmask-setpe", one_run=True))
    rows = table_rows(markdown_table([run]))
    assert rows == {("SetMask+SetPE", "Pretrained", "Single run"): ["66.67", "66.67"]}


def test_eval_single_mode_then_report(tmp_path, capsys):
    """Through the CLI with a tiny saved model: the reported case, ``--modes single``."""
    from tiny import tiny_model, tiny_tokenizer

    model = tmp_path / "tiny-llama"
    tiny_model("llama", max_position_embeddings=1024).save_pretrained(model)
    tiny_tokenizer().save_pretrained(model)
    base = ["eval", "--dataset", "arc_challenge", "--data-dir", str(FIXTURES), "--model", str(model), "--adapter", "none",
            "--no-progress", "--batch-size", "4", "--limit", "3"]
    assert main([*base, "--variant", "causal-pe", "--modes", "single", "--out", str(tmp_path / "single")]) == 0
    assert main([*base, "--variant", "setmask-setpe", "--out", str(tmp_path / "set")]) == 0
    capsys.readouterr()
    assert main(["report", str(tmp_path / "single"), str(tmp_path / "set"), "--no-plots"]) == 0
    table = capsys.readouterr().out
    rows = table_rows(table)
    assert rows[("Causal Mask+PE", "Pretrained", "Single run")] == ["-", "-"]
    set_acc = json.loads((tmp_path / "set" / SUMMARY_FILE).read_text())["accuracy"]
    assert rows[("SetMask+SetPE", "Pretrained", "Single run")] == [f"{set_acc['random']:.2f}", f"{set_acc['adversarial']:.2f}"]


# 2. Runs of different models or adapters get rows of their own; one cell is never filled twice.

def test_runs_of_two_models_get_two_rows(tmp_path):
    runs = [load_run(make_run(tmp_path / "a", model="/models/a/llama")),
            load_run(make_run(tmp_path / "b", model="/models/b/llama", modes="single,random"))]
    rows = table_rows(markdown_table(runs))
    assert rows[("Causal Mask+PE [a/llama]", "Pretrained", "Single run")] == ["50.00", "33.33"]
    assert rows[("Causal Mask+PE [b/llama]", "Pretrained", "Single run")] == ["50.00", "-"]
    assert len({p.name for p in save_plots(runs, tmp_path / "plots")}) == 1  # only a has a majority vote
    runs[1] = load_run(make_run(tmp_path / "b2", model="/models/b/llama"))
    assert len({p.name for p in save_plots(runs, tmp_path / "plots2")}) == 2  # one figure each, none overwritten


def test_runs_of_two_adapters_get_two_rows(tmp_path):
    runs = [load_run(make_run(tmp_path / d, adapter=f"adapters/{d}/final", modes="single,random")) for d in ("x", "y")]
    runs.append(load_run(make_run(tmp_path / "base", modes="single,random")))
    assert set(table_rows(markdown_table(runs))) == {("Causal Mask+PE [x/final]", "Finetuned", "Single run"),
                                                      ("Causal Mask+PE [y/final]", "Finetuned", "Single run"),
                                                      ("Causal Mask+PE", "Pretrained", "Single run")}


def test_runs_of_two_base_models_are_never_paired(tmp_path):
    """Agreement compares two readings of one model: a Gemma baseline is never set beside a
    SmolLM2 adapter's invariant run (an adapter run pairs with its base model's baseline)."""
    runs = [load_run(make_run(tmp_path / f"{m}-{v}", variant=v, model=m, adapter="runs/a" if v != "causal-pe" else None))
            for m in ("gemma3-270m", "smollm2") for v in ("causal-pe", "setmask-setpe")]
    table = markdown_table(runs)
    agreed = [line for line in table.splitlines() if line.startswith("- agreement")]
    assert len(agreed) == 2 and all(line.count("gemma3-270m") in (0, 2) for line in agreed), agreed
    figures = sorted(p.name for p in save_plots(runs, tmp_path / "plots") if p.name.startswith("agreement"))
    assert figures == [f"agreement_arc_challenge_causal-mask-pe-{m}-pretrained_vs_setmask-setpe-{m}-finetuned.png"
                       for m in ("gemma3-270m", "smollm2")]


def test_every_run_has_a_runtime_row(tmp_path):
    """A run of other modes than ``single`` (an invariant run read under ``--modes
    random,adversarial``) still gets its single-run runtime: the cheapest mode it measured."""
    runs = [load_run(make_run(tmp_path / "base")),
            load_run(make_run(tmp_path / "inv", variant="setmask-setpe", modes="random,adversarial"))]
    runtime = table_rows(markdown_table(runs).split("\n\n", 1)[1].split("\n\n", 1)[1])
    assert runtime[("SetMask+SetPE", "Pretrained", "Single run")] == [f"{runs[1].summary['runtime_s']['adversarial']:.3g}"]
    assert runtime[("Causal Mask+PE", "Pretrained", "Single run")] == [f"{runs[0].summary['runtime_s']['single']:.3g}"]
    assert "SetMask+SetPE (Pretrained) on ARC test: n=3, runtime of its single-run row: its adversarial mode's" in markdown_table(runs)


def test_labels_name_rows(tmp_path):
    runs = [load_run(make_run(tmp_path / d, label=f"run {d}")) for d in ("a", "b")]
    assert {k[0] for k in table_rows(markdown_table(runs))} == {"run a", "run b"}


def test_two_runs_in_one_cell_are_refused(tmp_path):
    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b")
    runs = [load_run(a), load_run(b)]
    with pytest.raises(DataError, match=f"{re.escape(str(a))} and {re.escape(str(b))}: both are Causal Mask"):
        markdown_table(runs)
    with pytest.raises(DataError, match="both are"):
        save_plots(runs, tmp_path / "plots")


def test_one_model_on_two_datasets_shares_a_row(tmp_path):
    runs = [load_run(make_run(tmp_path / "arc")), load_run(make_run(tmp_path / "piqa", dataset="piqa"))]
    rows = table_rows(markdown_table(runs))
    assert rows[("Causal Mask+PE", "Pretrained", "Single run")] == ["50.00", "33.33"] * 2


# 3. A | in a name does not break the table.

def test_pipe_in_label_is_escaped(tmp_path):
    table = markdown_table([load_run(make_run(tmp_path / "a", label="A|B"))])
    assert "| A\\|B | Pretrained | Single run | 50.00 | 33.33 |" in table
    accuracy, _, runtime = table.split("\n\n")[:3]
    for section, width in ((accuracy, 5), (runtime, 4)):  # Model, Training, Eval. Mode + the dataset's columns
        for line in section.splitlines():
            assert len(re.split(r"(?<!\\)\|", line)) - 2 == width, line


# 4. Errors name their file.

@pytest.mark.parametrize("text, why", [
    ("{not json", "not JSON"),
    ('{"dataset": "arc_challenge"', "not JSON"),  # cut short
    ("[]", "a JSON list, not an object"),
])
def test_corrupt_summary_names_its_file(tmp_path, text, why):
    path = make_run(tmp_path / "a")
    (path / SUMMARY_FILE).write_text(text)
    with pytest.raises(DataError, match=rf"^{re.escape(str(path / SUMMARY_FILE))}: not a valid setllm eval summary \({why}"):
        load_run(path)


@pytest.mark.parametrize("key", ["accuracy", "dataset", "one_run_per_question"])
def test_partial_summary_names_its_file_and_key(tmp_path, key):
    path = make_run(tmp_path / "a")
    summary = json.loads((path / SUMMARY_FILE).read_text())
    del summary[key]
    (path / SUMMARY_FILE).write_text(json.dumps(summary))
    with pytest.raises(DataError, match=rf"^{re.escape(str(path / SUMMARY_FILE))}: not a valid setllm eval summary \(no '{key}'\)"):
        load_run(path)


def test_summary_with_wrong_types_is_refused(tmp_path):
    path = make_run(tmp_path / "a")
    summary = json.loads((path / SUMMARY_FILE).read_text())
    summary["accuracy"]["random"] = "high"
    (path / SUMMARY_FILE).write_text(json.dumps(summary))
    with pytest.raises(DataError, match=r"summary.json: not a valid setllm eval summary \(accuracy\['random'\] is 'high'"):
        load_run(path)


def test_malformed_predictions_name_file_and_line(tmp_path):
    path = make_run(tmp_path / "a")
    with (path / PREDICTIONS_FILE).open("a") as f:
        f.write("{cut\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path / PREDICTIONS_FILE))}:4: malformed JSON"):
        load_run(path)


def test_not_a_run_directory_is_named(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    for path, why in [("empty", "no summary.json"), ("file.txt", "not a directory"), ("nowhere", "no such directory")]:
        with pytest.raises(DataError, match=rf"^{re.escape(str(tmp_path / path))}: {why}"):
            load_run(tmp_path / path)


def test_cli_report_on_corrupt_summary_is_one_line(tmp_path, capsys):
    path = make_run(tmp_path / "a")
    (path / SUMMARY_FILE).write_text("{")
    assert main(["report", str(path), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path / SUMMARY_FILE}: not a valid setllm eval summary") and len(err.splitlines()) == 1


# 5. Output paths that cannot be written.

@pytest.fixture
def read_only(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    yield folder
    folder.chmod(0o700)


def test_read_only_outputs_are_refused(tmp_path, read_only):
    if os.access(read_only, os.W_OK):
        pytest.skip("running as root: a 0o500 folder is writable anyway")
    with pytest.raises(DataError, match=f"^--plot-dir {re.escape(str(read_only))}: not writable"):
        check_writable(read_only, "--plot-dir")
    with pytest.raises(DataError, match=f"^--markdown {re.escape(str(read_only / 'sub' / 't.md'))}: not writable"):
        check_writable(read_only / "sub" / "t.md", "--markdown", folder=False)
    runs = [load_run(make_run(tmp_path / "a"))]
    with pytest.raises(DataError, match=f"^plot folder {re.escape(str(read_only / 'plots'))}: not writable"):
        save_plots(runs, read_only / "plots")
    with pytest.raises(DataError, match=f"^{re.escape(str(read_only / 't.md'))}: cannot write"):
        write_markdown(read_only / "t.md", "| x |")


def test_output_under_a_file_is_refused(tmp_path):
    """Refused whoever runs it (root too): a file stands where a folder must be."""
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    runs = [load_run(make_run(tmp_path / "a"))]
    with pytest.raises(DataError, match=rf"^--plot-dir {re.escape(str(blocker / 'plots'))}: not writable \(.*is a file"):
        save_plots(runs, blocker / "plots", what="--plot-dir")
    with pytest.raises(DataError, match=rf"^--plot-dir {re.escape(str(blocker))}: not writable \(a file, not a folder\)"):
        check_writable(blocker, "--plot-dir")
    with pytest.raises(DataError, match=rf"^--markdown {re.escape(str(tmp_path))}: not writable \(a folder, not a file\)"):
        check_writable(tmp_path, "--markdown", folder=False)
    with pytest.raises(DataError, match=rf"^{re.escape(str(blocker / 'report' / 't.md'))}: cannot write"):
        write_markdown(blocker / "report" / "t.md", "| x |")


def test_writable_outputs_pass_and_markdown_makes_its_folder(tmp_path):
    check_writable(tmp_path / "new" / "plots", "--plot-dir")
    check_writable(tmp_path / "new" / "t.md", "--markdown", folder=False)
    write_markdown(tmp_path / "new" / "t.md", "| x |")
    assert (tmp_path / "new" / "t.md").read_text() == "| x |\n"


def test_plots_never_write_to_the_users_cache(tmp_path):
    """matplotlib keeps a font cache; under the tests it is theirs, not ~/.cache/matplotlib."""
    import matplotlib

    runs = [load_run(make_run(tmp_path / "a"))]
    save_plots(runs, tmp_path / "plots", what="--plot-dir")
    home = Path.home().resolve()
    for folder in (matplotlib.get_cachedir(), matplotlib.get_configdir()):
        assert not Path(folder).resolve().is_relative_to(home), folder
