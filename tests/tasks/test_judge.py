"""The judge: label-free framing, a symmetric readout, verdicts invariant under every order."""

import itertools
import json
from pathlib import Path

import pytest
from tiny import sharp_model, tiny_tokenizer

from setllm import SetLLM
from setllm.io.records import DataError
from setllm.tasks import get_task, load_records
from setllm.tasks.judge import judge_prompt, pair_row, parse_row

FIXTURES = Path(__file__).parents[1] / "fixtures"
CANDIDATES = ["Paris is the capital.", "I think it is Rome.", "Lyon, probably.", "The capital of France is Paris."]


@pytest.fixture(scope="module")
def sharp():
    return sharp_model()


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.usefixtures("threads")
def test_verdicts_are_identical_under_every_order_and_map_back(sharp, k):
    lm = SetLLM(sharp, tiny_tokenizer(), "setmask-setpe")
    cands = CANDIDATES[:k]
    ref = lm.judge("What is the capital of France?", cands)
    for perm in itertools.permutations(range(k)):
        v = lm.judge("What is the capital of France?", [cands[i] for i in perm])
        assert v.scores == [ref.scores[i] for i in perm]  # bit-identical (exact mode), in the caller's order
        assert perm[v.best] == ref.best and [perm[i] for i in v.ranking] == ref.ranking
    assert sorted(ref.ranking) == list(range(k)) and ref.scores[ref.ranking[0]] == max(ref.scores)


def test_the_causal_judge_is_order_sensitive(sharp):
    lm = SetLLM(sharp, tiny_tokenizer(), "causal-pe")
    pairs = [("Capital of France?", CANDIDATES[i], CANDIDATES[j]) for i, j in itertools.combinations(range(4), 2)]
    moved = 0
    for q, a, b in pairs:
        s1, s2 = lm.judge(q, [a, b]).scores, lm.judge(q, [b, a]).scores
        moved += max(abs(s1[0] - s2[1]), abs(s1[1] - s2[0])) > 1e-3
    assert moved > 0


def test_the_framing_names_no_candidate():
    prompt = judge_prompt("Which is best?", CANDIDATES[:3], input="context")
    (elements,) = [s.elements for s in prompt.sets]
    frames = [e.replace(c, "{}") for e, c in zip(elements, CANDIDATES[:3])]
    assert frames == ["Response: {}\n"] * 3  # the same frame, no letter or number naming a slot
    assert prompt.text().endswith("Best response:") and "Input: context\n" in prompt.text()


def test_ties_within_a_margin(sharp):
    lm = SetLLM(sharp, tiny_tokenizer(), "setmask-setpe")
    v = lm.judge("Q?", ["same answer", "same answer"], tie_margin=1e-6)
    assert v.best is None and v.scores[0] == v.scores[1]
    assert lm.judge("Q?", ["same answer", "same answer"]).best == 0  # margin 0: the first of equal bests


def test_bad_rows_name_their_line():
    with pytest.raises(DataError, match="x:1: 'candidates' must be a list of at least two"):
        parse_row({"instruction": "Q", "candidates": ["only one"], "label": 0}, "x:1")
    with pytest.raises(DataError, match="x:2: candidate 1 is not text"):
        parse_row({"instruction": "Q", "candidates": ["a", None], "label": 0}, "x:2")
    assert parse_row({"instruction": "Q", "candidates": ["a", " "], "label": 0}, "x:2").choices == ("a", " ")  # an empty answer is judged
    with pytest.raises(DataError, match="x:3: missing field 'instruction'"):
        parse_row({"candidates": ["a", "b"], "label": 0}, "x:3")
    with pytest.raises(DataError, match="'label' must be -1 \\(tie\\) or an index"):
        parse_row({"instruction": "Q", "candidates": ["a", "b"], "label": 2}, "x:4")
    assert parse_row({"instruction": "Q", "candidates": ["a", "b"], "label": -1}, "x:5") is None  # a tie: nothing to score


def test_ultrafeedback_pairs_are_shuffled_by_seed_and_ties_dropped():
    rows = [json.loads(line) for line in (FIXTURES / "judge" / "ultrafeedback" / "train.jsonl").read_text().splitlines()]
    made = [pair_row(r, f"uf:{i}") for i, r in enumerate(rows)]
    assert made == [pair_row(r, f"uf:{i}") for i, r in enumerate(rows)]  # reproducible
    for r, m in zip(rows, made):
        assert m["candidates"][m["label"]] == r["response"] and r["rejected"] in m["candidates"]
    assert pair_row({**rows[0], "score_chosen": 7.0, "score_rejected": 7.0}, "uf:tie") is None
    records, _ = load_records(get_task("ultrafeedback-pairs"), "train", str(FIXTURES / "judge"))
    assert len(records) == len(rows) and {r.label for r in records} <= {0, 1}


def test_judge_evaluation_reports_swap_consistency_and_first_slot_rate(sharp, tmp_path):
    from setllm.evaluation import EvalConfig, run_eval

    def run(variant, out):
        lm = SetLLM(sharp, tiny_tokenizer(), variant)
        cfg = EvalConfig(dataset="ultrafeedback-pairs", split="train", data_dir=str(FIXTURES / "judge"), out=str(tmp_path / out), progress=False)
        return run_eval(lm, cfg)

    inv, causal = run("setmask-setpe", "set"), run("causal-pe", "causal")
    assert inv["one_run_per_question"] and inv["position_consistency"] == 100.0 and inv["first_slot_rate"] == 50.0
    assert inv["accuracy_swapped"] == inv["accuracy"]["single"] == inv["accuracy"]["adversarial"]
    assert causal["runs_per_question"]["random"] == 2.0 and not causal["one_run_per_question"]
    rows = [json.loads(line) for line in (tmp_path / "causal" / "predictions.jsonl").read_text().splitlines()]
    first = [p == o[0] for r in rows for p, o in zip(r["predictions"], r["orderings"])]
    assert causal["first_slot_rate"] == pytest.approx(100 * sum(first) / len(first), abs=1e-3)
    same = [r["predictions"][0] == r["predictions"][1] for r in rows]
    assert causal["position_consistency"] == pytest.approx(100 * sum(same) / len(same), abs=1e-3)
    both = [all(p == r["label"] for p in r["predictions"]) for r in rows]
    assert causal["accuracy"]["adversarial"] == pytest.approx(100 * sum(both) / len(both), abs=1e-3)  # the both-orders aggregate


def test_judge_training_examples_from_pairs_and_user_rows(tmp_path):
    from setllm.training.examples import load_examples

    examples, report = load_examples(["ultrafeedback-judge"], str(FIXTURES / "judge"))
    rows = [json.loads(line) for line in (FIXTURES / "judge" / "ultrafeedback" / "train.jsonl").read_text().splitlines()]
    assert len(examples) == len(rows) and report.kept == {"ultrafeedback-judge": len(rows)}
    for ex, row in zip(examples, rows):
        assert ex.response == row["response"].strip() and ex.prompt.text().endswith("Best response:")
        (elements,) = [s.elements for s in ex.prompt.sets]
        assert sorted(elements) == sorted(f"Response: {row[k].strip()}\n" for k in ("response", "rejected"))
    mine = tmp_path / "judge.jsonl"
    mine.write_text(json.dumps({"instruction": "Q", "candidates": ["bad", "good"], "label": 1}) + "\n"
                    + json.dumps({"instruction": "Q2", "candidates": ["x", "y"], "label": -1}) + "\n")
    (ex,), _ = load_examples([str(mine)])  # the tie teaches nothing: skipped
    assert ex.response == "good"


@pytest.mark.usefixtures("threads")
def test_the_held_out_judge_prompt_is_read_as_the_trained_one_and_stays_invariant(sharp, tmp_path):
    """`--template held-out` on judge data: `mean` reads the template's own prompt (on the
    trained template, exactly the library's `mean` readout), the two orders give the same
    scores under Set-LLM (up to float rounding: elements in another order are summed in
    another order), and readouts that build the trained prompt are refused."""
    from setllm.errors import InputError
    from setllm.evaluation import EvalConfig, run_eval
    from setllm.tasks.judge import JUDGE_HELD_OUT

    lm = SetLLM(sharp, tiny_tokenizer(), "setmask-setpe")
    pairs = load_records(get_task("ultrafeedback-pairs"), "train", str(FIXTURES / "judge"))[0]

    def rows(template, out, **kw):
        cfg = EvalConfig(dataset="ultrafeedback-pairs", split="train", data_dir=str(FIXTURES / "judge"), template=template,
                         readout="mean", out=str(tmp_path / out), progress=False, **kw)
        summary = run_eval(lm, cfg)
        return summary, [json.loads(line) for line in (tmp_path / out / "predictions.jsonl").read_text().splitlines()]

    _, trained = rows("modified", "trained")
    first = pairs[0]
    assert trained[0]["logprobs"] == lm.judge(first.question, list(first.choices), readout="mean").scores
    summary, held = rows("held-out", "held", verify_invariance=True)
    assert summary["template"] == "held-out" and summary["position_consistency"] == 100.0
    assert all(r["orderings"] == [[0, 1], [1, 0]] and r["max_logprob_diff"] < 1e-5 for r in held)
    [scores] = lm.score_many([JUDGE_HELD_OUT.render(first, (0, 1)).prompt], [[c.strip() for c in first.choices]])
    assert held[0]["logprobs"] == [s.mean_logprob for s in scores]  # per token, over the held-out prompt
    assert held[0]["logprobs"] != trained[0]["logprobs"]
    with pytest.raises(InputError, match="--readout pmi reads the trained judge prompt; --template held-out takes likelihood or mean"):
        run_eval(lm, EvalConfig(dataset="ultrafeedback-pairs", split="train", data_dir=str(FIXTURES / "judge"), template="held-out",
                                readout="pmi", out=str(tmp_path / "pmi"), progress=False))
