"""Judge readouts (:mod:`setllm.readouts`): each is what its definition says, computed
independently here, and under an invariant variant none can see the candidates' order."""

from __future__ import annotations

import itertools
import json

import pytest
from tiny import run_cli, tiny_model, tiny_tokenizer

from setllm import SetLLM, readouts
from setllm.errors import InputError
from setllm.tasks.judge import judge_prompt

INSTRUCTION = "Say hello to a friend."
CANDIDATES = ["Hello there, my friend!", "Go away.", ""]


@pytest.fixture(scope="module")
def lm():
    return SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")


@pytest.mark.parametrize("readout", list(readouts.READOUTS))
def test_no_readout_sees_the_order_of_the_candidates(lm, readout):
    seen = set()
    for order in itertools.permutations(CANDIDATES):
        v = lm.judge(INSTRUCTION, list(order), readout=readout)
        seen.add((order[v.best], tuple(sorted(zip(order, v.scores)))))
    assert len(seen) == 1  # one best, and each candidate's score to the bit, in all 6 orders


def test_each_readout_is_its_definition(lm):
    row = readouts.JudgeRow(INSTRUCTION, tuple(CANDIDATES))
    # A judge scores an empty candidate (EOS alone), which a user's score refuses: blank=True.
    [judged] = lm._score_many([judge_prompt(INSTRUCTION, CANDIDATES)], [CANDIDATES], None, blank=True)
    [alone] = lm._score_many([readouts.alone_prompt(row)], [CANDIDATES], None, blank=True)
    assert lm.judge(INSTRUCTION, CANDIDATES, readout="likelihood").scores == [s.logprob for s in judged]
    assert lm.judge(INSTRUCTION, CANDIDATES, readout="mean").scores == [s.mean_logprob for s in judged]
    assert lm.judge(INSTRUCTION, CANDIDATES, readout="pmi").scores == [a.logprob - b.logprob for a, b in zip(judged, alone)]
    yes_no = [lm.score(readouts.verdict_prompt(row, i), ["Yes", "No"]) for i in range(3)]
    assert lm.judge(INSTRUCTION, CANDIDATES, readout="verdict").scores == [y.logprob - n.logprob for y, n in yes_no]
    # The reference of pmi shows no candidate; the verdict prompt names its candidate after the set.
    assert "Response:" in readouts.alone_prompt(row).text() and not readouts.alone_prompt(row).sets
    assert readouts.verdict_prompt(row, 1).text().endswith("Candidate: Go away.\nIs this the best response? Answer Yes or No.\nAnswer:")


def test_an_unknown_readout_is_named(lm):
    with pytest.raises(InputError, match="unknown readout 'vibes'; choose one of: likelihood, mean, pmi, verdict"):
        lm.judge(INSTRUCTION, CANDIDATES, readout="vibes")


def test_a_resumed_file_job_never_keeps_verdicts_of_another_readout(model_dir, tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": str(i), "instruction": INSTRUCTION, "candidates": CANDIDATES[:2]}) + "\n" for i in range(2)))
    out = tmp_path / "out.jsonl"
    flags = ["--input", str(rows), "--output", str(out), "--model", model_dir, "--no-progress"]
    assert run_cli(capsys, "judge", *flags, "--readout", "mean")[0] == 0
    code, _, err = run_cli(capsys, "judge", *flags, "--readout", "pmi")
    assert code == 2 and "out.jsonl" in err  # answers of the other readout: refused, not resumed
    assert run_cli(capsys, "judge", *flags, "--readout", "pmi", "--overwrite")[0] == 0
    assert run_cli(capsys, "judge", *flags, "--readout", "pmi")[2].strip().endswith("0 judged, 2 already in " + str(out))


def test_eval_takes_a_readout_for_judge_data_only(tmp_path, capsys):
    code, _, err = run_cli(capsys, "eval", "--dataset", "arc_challenge", "--readout", "pmi", "--out", str(tmp_path / "x"))
    assert code == 2 and "--readout is for the judge datasets" in err
