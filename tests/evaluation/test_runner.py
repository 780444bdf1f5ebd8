"""End-to-end evaluation on the fixtures with tiny models: modes, invariance, resume."""

import json
from pathlib import Path

import pytest
from tiny import sharp_model, tiny_model, tiny_tokenizer

from setllm import SetLLM
from setllm.evaluation import EvalConfig, run_eval, runner, store
from setllm.io import rundir

FIXTURES = Path(__file__).parents[1] / "fixtures" / "eval"
STABLE = ("dataset", "split", "n", "variant", "template", "accuracy", "runs_per_question", "one_run_per_question", "orderings",
          "invariance_flips", "invariance_runs", "flip_rate", "metrics", "settings", "ids")




@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def sharp():
    return sharp_model()


def evaluate(model, tok, variant, out, batch_size=8, **kw):
    lm = SetLLM(model, tok, variant=variant, batch_size=batch_size)
    kw.setdefault("dataset", "arc_challenge")
    return run_eval(lm, EvalConfig(data_dir=str(FIXTURES), out=str(out), progress=False, **kw))


def rows(out):
    return [json.loads(line) for line in (Path(out) / "predictions.jsonl").read_text().splitlines()]


def test_order_sensitive_model_adversarial_below_random(sharp, tok, tmp_path):
    s = evaluate(sharp, tok, "causal-pe", tmp_path)
    acc = s["accuracy"]
    assert acc["adversarial"] < acc["random"]
    assert acc["adversarial"] <= acc["single"] and acc["adversarial"] <= acc["majority"]
    assert s["invariance_flips"] > 0 and s["runs_per_question"]["random"] == 24.0 and not s["one_run_per_question"]
    rpq, t = s["runs_per_question"], s["runtime_s"]  # times are rounded to ms: compare runs, and times loosely
    written = rows(tmp_path)
    # adversarial alone stops at a question's first wrong ordering
    first_wrong = [next((i + 1 for i, p in enumerate(r["predictions"]) if p != r["label"]), 24) for r in written]
    assert rpq["adversarial"] == round(sum(first_wrong) / len(written), 3)
    assert rpq["single"] <= rpq["adversarial"] < rpq["random"] == rpq["majority"] == 24.0
    assert t["single"] <= t["adversarial"] <= t["random"] == t["majority"]
    assert [r["id"] for r in written] == ["MCAS_1998_4_19", "Mercury_401699", "TAKS_2009_8_36", "Mercury_7041143",
                                         "Mercury_405804", "Mercury_SC_416168"]
    assert all(r["orderings"][0] == [0, 1, 2, 3] and len(r["predictions"]) == 24 for r in written)
    assert all(sum(r["votes"].values()) == 24 and r["votes"][str(r["majority"])] == max(r["votes"].values()) for r in written)
    assert json.loads((tmp_path / "summary.json").read_text())["accuracy"] == acc


def test_invariant_variant_adversarial_equals_random(sharp, tok, tmp_path):
    one = evaluate(sharp, tok, "setmask-setpe", tmp_path / "one")
    acc = one["accuracy"]
    assert acc["adversarial"] == acc["random"] == acc["single"] == acc["majority"]
    assert one["one_run_per_question"] and one["runs_per_question"]["majority"] == 1.0
    assert "invariance_flips" not in one
    verified = evaluate(sharp, tok, "setmask-setpe", tmp_path / "verified", verify_invariance=True)
    assert verified["invariance_flips"] == 0 and verified["invariance_runs"] == 6 * 23
    assert verified["accuracy"]["adversarial"] == verified["accuracy"]["random"]
    assert verified["accuracy"] == acc
    # Unsorted orderings really ran: low bits differ, answers do not.
    assert 0 < verified["max_logprob_diff"] < 1e-3
    only_single = evaluate(sharp, tok, "setmask-setpe", tmp_path / "single", verify_invariance=True, modes="single")
    assert only_single["invariance_runs"] == 6 * 23  # verification runs every ordering whatever the modes


@pytest.mark.parametrize("variant", ["sbp", "canonical"])
def test_training_free_invariant_readings_verify_invariant(sharp, tok, tmp_path, variant):
    one = evaluate(sharp, tok, variant, tmp_path / "one")
    assert one["one_run_per_question"] and one["variant"] == variant and one["invariant"]
    verified = evaluate(sharp, tok, variant, tmp_path / "verified", verify_invariance=True)
    assert verified["invariance_flips"] == 0 and verified["invariance_runs"] == 6 * 23
    assert verified["accuracy"] == one["accuracy"]
    if variant == "canonical":  # sorted whatever the ordering: the same computation, bit for bit
        assert verified["max_logprob_diff"] == 0


def test_held_out_template_is_a_set_template(sharp, tok, tmp_path):
    """The held-out wording keeps the options a set: one run per question, verified invariant;
    the causal model reads it order by order."""
    s = evaluate(sharp, tok, "setmask-setpe", tmp_path / "set", dataset="social_iqa", template="held-out")
    assert s["template"] == "held-out" and s["one_run_per_question"]
    verified = evaluate(sharp, tok, "setmask-setpe", tmp_path / "verified", dataset="social_iqa", template="held-out", verify_invariance=True)
    assert verified["invariance_flips"] == 0 and verified["invariance_runs"] == s["n"] * 5  # every other ordering of 3
    assert verified["accuracy"] == s["accuracy"]
    causal = evaluate(sharp, tok, "causal-pe", tmp_path / "causal", dataset="social_iqa", template="held-out")
    assert not causal["one_run_per_question"] and causal["runs_per_question"]["random"] == 6.0


def test_numbered_siqa_is_order_sensitive_even_for_set_llm(sharp, tok, tmp_path):
    s = evaluate(sharp, tok, "setmask-setpe", tmp_path, dataset="social_iqa", template="original")
    assert not s["one_run_per_question"] and s["runs_per_question"]["random"] == 6.0
    cont = evaluate(sharp, tok, "causal-pe", tmp_path / "c", dataset="piqa", template="original")
    assert cont["one_run_per_question"]  # options only as continuations: one run per question


def test_capped_orderings_and_adversarial_only(sharp, tok, tmp_path):
    s = evaluate(sharp, tok, "causal-pe", tmp_path / "cap", dataset="commonsense_qa", max_orderings=6, ordering_choice="first")
    assert s["orderings"]["mean_tested"] == 6 and all(r["orderings"][0] == [0, 1, 2, 3, 4] for r in rows(tmp_path / "cap"))
    adv = evaluate(sharp, tok, "causal-pe", tmp_path / "adv", modes="adversarial")
    full = evaluate(sharp, tok, "causal-pe", tmp_path / "full")
    assert adv["accuracy"]["adversarial"] == full["accuracy"]["adversarial"]
    stopped = rows(tmp_path / "adv")
    assert any(len(r["predictions"]) < 24 for r in stopped)  # stopped at the first failure
    assert all(p == r["label"] for r in stopped for p in r["predictions"][:-1])
    # Asking for more later re-runs only what the earlier plan did not cover.
    more = evaluate(sharp, tok, "causal-pe", tmp_path / "adv", modes="adversarial,random")
    assert more["accuracy"]["random"] == full["accuracy"]["random"]


def test_resume_after_interruption_gives_the_same_summary(sharp, tok, tmp_path, monkeypatch):
    whole = evaluate(sharp, tok, "causal-pe", tmp_path / "whole", batch_size=2)
    calls = {"n": 0}
    real = runner.evaluate_chunk

    def dies_on_second_chunk(*args, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # killed mid-run
        return real(*args, **kw)

    monkeypatch.setattr(runner, "evaluate_chunk", dies_on_second_chunk)
    with pytest.raises(KeyboardInterrupt):
        evaluate(sharp, tok, "causal-pe", tmp_path / "cut", batch_size=2)
    monkeypatch.setattr(runner, "evaluate_chunk", real)
    # 24 orderings a question fill a batch: one question per chunk, so one finished before the kill.
    assert len(rows(tmp_path / "cut")) == 1 and not (tmp_path / "cut" / "summary.json").exists()
    with (tmp_path / "cut" / "predictions.jsonl").open("a") as f:
        f.write('{"id": "Mercury_7041143", "label": 2, "orderi')  # a line cut short by the kill
    resumed = evaluate(sharp, tok, "causal-pe", tmp_path / "cut", batch_size=2)
    assert resumed["resumed_questions"] == 1
    assert {k: resumed.get(k) for k in STABLE} == {k: whole.get(k) for k in STABLE}
    strip = lambda rs: [{k: v for k, v in r.items() if k not in ("time_s", "peak_mb")} for r in rs]  # noqa: E731
    assert strip(rows(tmp_path / "cut")) == strip(rows(tmp_path / "whole"))
    again = evaluate(sharp, tok, "causal-pe", tmp_path / "cut", batch_size=2)  # all done: nothing re-run
    assert again["resumed_questions"] == 6 and again["accuracy"] == whole["accuracy"]


def test_resume_refuses_other_settings(sharp, tok, tmp_path):
    evaluate(sharp, tok, "causal-pe", tmp_path, limit=2)
    with pytest.raises(ValueError, match="other settings.*variant"):
        evaluate(sharp, tok, "setmask-setpe", tmp_path, limit=2)
    s = evaluate(sharp, tok, "setmask-setpe", tmp_path, limit=2, overwrite=True)
    assert s["variant"] == "setmask-setpe" and len(rows(tmp_path)) == 2
    assert json.loads((tmp_path / store.SETTINGS_FILE).read_text())["variant"] == "setmask-setpe"


def test_config_validation():
    with pytest.raises(ValueError, match="--out"):
        EvalConfig(dataset="piqa")
    with pytest.raises(ValueError, match="unknown mode"):
        EvalConfig(dataset="piqa", out="x", modes="single,worst")
    with pytest.raises(ValueError, match="--max-orderings must be at least 1"):
        EvalConfig(dataset="piqa", out="x", max_orderings=0)
    with pytest.raises(ValueError, match="--dataset"):
        EvalConfig(out="x")


def test_resume_refuses_other_weights_at_the_same_path(sharp, tok, tmp_path):
    """An adapter retrained in place keeps its path; the weights' fingerprint tells the runs apart."""
    evaluate(sharp, tok, "causal-pe", tmp_path, limit=2)
    retrained = tiny_model("llama", max_position_embeddings=1024)  # other weights, same config and name
    with pytest.raises(ValueError, match="other settings.*weights"):
        evaluate(retrained, tok, "causal-pe", tmp_path, limit=3)
    assert len(rows(tmp_path)) == 2  # nothing of the other weights was mixed in


def test_a_failed_start_changes_nothing_and_blocks_nothing(sharp, tok, tmp_path, monkeypatch):
    evaluate(sharp, tok, "causal-pe", tmp_path / "kept", limit=2)
    before = (tmp_path / "kept" / "predictions.jsonl").read_text()
    ten = tmp_path / "ten.jsonl"  # 10 options: 3.6 million orderings, refused before --out is touched
    ten.write_text(json.dumps({"id": "q", "question": "Q?", "choices": [f"o{i}" for i in range(10)], "label": 0}) + "\n")
    with pytest.raises(ValueError, match="10 options: 3628800 orderings; pass --max-orderings"):
        evaluate(sharp, tok, "causal-pe", tmp_path / "kept", dataset=None, data_file=str(ten), overwrite=True)
    assert (tmp_path / "kept" / "predictions.jsonl").read_text() == before  # --overwrite did not run
    monkeypatch.setattr(runner, "evaluate_chunk", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("crash")))
    with pytest.raises(RuntimeError):
        evaluate(sharp, tok, "causal-pe", tmp_path / "new", limit=2)
    assert not (tmp_path / "new" / store.SETTINGS_FILE).exists()  # nothing scored: no run.json to block the next run
    monkeypatch.undo()
    assert evaluate(sharp, tok, "setmask-setpe", tmp_path / "new", limit=2)["variant"] == "setmask-setpe"


def test_a_second_writer_is_refused(sharp, tok, tmp_path):
    import fcntl

    tmp_path.mkdir(exist_ok=True)
    with (tmp_path / rundir.LOCK_FILE).open("a") as held:  # another process holding the run
        fcntl.flock(held, fcntl.LOCK_EX)
        import subprocess
        import sys

        # flock locks belong to the open file: a second open in another process must be refused.
        code = f"""
import sys; sys.path.insert(0, {str(Path(__file__).parents[1])!r})
from pathlib import Path
from setllm.io import rundir
try:
    with rundir.locked(Path({str(tmp_path)!r})):
        print("entered")
except Exception as e:
    print(type(e).__name__, e)
"""
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert out.startswith("InputError") and "another setllm process is writing there" in out
    assert evaluate(sharp, tok, "causal-pe", tmp_path, limit=1)["n"] == 1  # released: runs again


def test_a_rerun_with_more_modes_keeps_one_row_per_question(sharp, tok, tmp_path):
    evaluate(sharp, tok, "causal-pe", tmp_path, modes="single")
    s = evaluate(sharp, tok, "causal-pe", tmp_path, modes="single,random")
    written = rows(tmp_path)
    assert len(written) == 6 and len({r["id"] for r in written}) == 6 and all(len(r["predictions"]) == 24 for r in written)
    assert s["runs_per_question"]["random"] == 24.0


def test_summary_has_standard_errors_versions_and_samples_when_asked(sharp, tok, tmp_path):
    s = evaluate(sharp, tok, "causal-pe", tmp_path, log_samples=True)
    n = s["n"]
    for mode in ("single", "adversarial", "majority"):  # 0/1 per question: the binomial standard error
        p = s["accuracy"][mode] / 100
        assert s["accuracy_stderr"][mode] == pytest.approx(100 * (p * (1 - p) / (n - 1)) ** 0.5, abs=1e-3)
    assert set(s["versions"]) == {"torch", "transformers", "peft", "accelerate"} and s["versions"]["transformers"]
    row = rows(tmp_path)[0]
    assert row["prompt"].startswith("Question: ") and row["prompt"].endswith("Answer:") and len(row["choices"]) == 4
    assert all(c in row["prompt"] for c in row["choices"])
