"""``setllm train --objective preference`` on tiny random models: the loss is SimPO's on
exactly the judge's ``mean`` readout, or on the summed log-likelihood ``choose`` reads options
by, rows that do not fit are skipped whole, and a few steps rank the better candidates higher.

Data: ``tests/fixtures/judge/ultrafeedback/train.jsonl`` (6 UltraFeedback pairs, see its README)
and the benchmark rows of ``tests/fixtures/train``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from tiny import saved, tiny_model, tiny_tokenizer

from setllm.api import SetLLM
from setllm.errors import InputError
from setllm.readouts import JudgeRow, candidate_scores
from setllm.training import TrainConfig, train
from setllm.training.collator import PreferenceCollator, featurize_preferences
from setllm.training.examples import Example, judge_example, load_examples
from setllm.training.trainer import (
    Preference,
    preference_loss,
    response_logits,
    response_logprob,
    response_loss,
    set_llm_preference_loss,
)

JUDGE_DATA = str(Path(__file__).parents[1] / "fixtures" / "judge")
TRAIN_DATA = str(Path(__file__).parents[1] / "fixtures" / "train")
ROW = {"instruction": "Name a fruit.", "candidates": ["a rock", "an apple", "a chair"], "label": 1}


def row_example(row: dict = ROW) -> Example:
    return judge_example(row, "literal")


def test_the_loss_is_simpo_averaged_within_then_across_rows():
    scores = torch.tensor([-1.0, -2.0, -0.5, -3.0, -2.5])  # row 0: better, 2 others; row 1: better, 1 other
    group, chosen = torch.tensor([0, 0, 0, 1, 1]), torch.tensor([True, False, False, True, False])
    beta, margin = 2.0, 1.0
    nll = lambda d: -math.log(1 / (1 + math.exp(-(beta * d - margin))))  # noqa: E731
    want = ((nll(-1.0 + 2.0) + nll(-1.0 + 0.5)) / 2 + nll(-3.0 + 2.5)) / 2
    assert preference_loss(scores, group, chosen, beta, margin).item() == pytest.approx(want, rel=1e-6)


def test_a_judge_row_carries_its_other_candidates():
    ex = row_example()
    assert ex.response == "an apple" and ex.rejected == ("a rock", "a chair")
    examples, _ = load_examples(["ultrafeedback-judge"], JUDGE_DATA)
    assert all(len(e.rejected) == 1 and e.response not in e.rejected for e in examples)


@pytest.mark.parametrize("variant", ["setmask-setpe", "causal-pe"])
def test_the_trained_score_is_the_mean_readout(variant):
    """What the loss ranks is what `setllm judge --readout mean` reads: each candidate's mean
    log-likelihood after the judge prompt, computed by the inference path."""
    lm = SetLLM(tiny_model(), tiny_tokenizer(), variant)
    ex = row_example()
    items, report = featurize_preferences(lm.codec, [ex], 512)
    assert report.kept == 1 and len(items[0]["group"]) == 3
    batch = PreferenceCollator(lm.variant.positions, lm.pad_id)(items)
    assert batch["group"].tolist() == [0, 0, 0] and batch["chosen"].tolist() == [True, False, False]
    with torch.no_grad():
        logits, _ = response_logits(lm.model, lm.variant, batch)
        trained = response_logprob(logits, batch["labels"], mean=True)
    read = candidate_scores(lm.score_many, [JudgeRow(ROW["instruction"], tuple(ROW["candidates"]))], "mean")[0]
    want = [read[1], read[0], read[2]]  # the better candidate first, then the others in order
    torch.testing.assert_close(trained, torch.tensor(want), atol=1e-4, rtol=1e-4)


def test_rows_that_do_not_fit_are_skipped_whole_and_other_data_is_refused():
    lm = SetLLM(tiny_model(), tiny_tokenizer())
    long = row_example({**ROW, "candidates": ["a rock", "an apple " * 60, "a chair"]})
    items, report = featurize_preferences(lm.codec, [row_example(), long], 128)
    assert report.kept == 1 and len(report.skipped) == 1 and "literal" in report.skipped[0]
    instructions, _ = load_examples(["ultrafeedback"], JUDGE_DATA, limit=1)
    with pytest.raises(InputError, match="--objective preference trains on rows with candidates to rank"):
        featurize_preferences(lm.codec, instructions, 512)


def pairs_ranked(lm: SetLLM, examples: list[Example]) -> tuple[float, float]:
    """(mean of s_better - s_other, the SimPO loss) over ``examples`` under the `mean` readout."""
    items, _ = featurize_preferences(lm.codec, examples, 256)
    batch = PreferenceCollator(lm.variant.positions, lm.pad_id)(items)
    with torch.no_grad():
        logits, _ = response_logits(lm.model, lm.variant, batch)
        s = response_logprob(logits, batch["labels"], mean=True)
        loss = preference_loss(s, batch["group"], batch["chosen"], 2.0, 1.0)
    return float((s[batch["chosen"]] - s[~batch["chosen"]]).mean()), float(loss)


def test_a_few_steps_rank_the_better_candidates_higher(tmp_path):
    model, tok = tiny_model(), tiny_tokenizer()
    examples, _ = load_examples(["ultrafeedback-judge"], JUDGE_DATA)
    gap_before, loss_before = pairs_ranked(SetLLM(model, tok), examples)
    cfg = TrainConfig(data="ultrafeedback-judge", data_dir=JUDGE_DATA, output_dir=str(tmp_path / "run"), objective="preference",
                      max_steps=6, per_device_train_batch_size=2, learning_rate=1e-2, lora_alpha=16, max_length=256,
                      logging_steps=1, save_steps=100, disable_tqdm=True)
    result = train(cfg, model=model, tokenizer=tok)
    gap_after, loss_after = pairs_ranked(SetLLM(model, tok), examples)
    assert result.steps == 6 and result.examples == 4  # 2 of the 6 pairs exceed the tiny context
    # measured: 0.018 -> 0.133, 1.29 -> 1.13
    assert gap_after > gap_before + 0.05 and loss_after < loss_before, (gap_before, gap_after, loss_before, loss_after)
    recorded = json.loads((tmp_path / "run" / "setllm.json").read_text())["training"]["config"]
    assert recorded["objective"] == "preference" and recorded["preference_beta"] == 2.0


@pytest.mark.parametrize("overrides, message", [
    (dict(objective="dpo"), "--objective must be one of sft, preference"),
    (dict(objective="preference", preference_beta=0.0), "--preference-beta must be positive"),
    (dict(objective="preference", preference_sft=-1.0), "--preference-margin and --preference-sft at least 0, got 2.0, 1.0 and -1.0"),
    (dict(objective="preference", preference_score="max"), "--preference-score must be one of mean, sum, got 'max'"),
])
def test_bad_preference_settings_are_clear_errors(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(data="ultrafeedback-judge", output_dir=str(tmp_path), **overrides)


def test_the_cli_refuses_data_with_nothing_to_rank_before_loading_a_model(tmp_path, capsys):
    from setllm.cli import main

    code = main(["train", "--data", "piqa,ultrafeedback", "--data-dir", TRAIN_DATA, "--limit", "2", "--objective", "preference",
                 "--model", "/nonexistent-model", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "ultrafeedback/train.jsonl:1: --objective preference trains on rows with candidates" in err, err
    assert "nonexistent" not in err


def test_a_judge_trained_to_rank_is_read_with_its_readout_by_default(tmp_path, capsys):
    """The run records ``readout: mean`` in setllm.json; loading it, `judge`, `setllm judge` and
    `eval --dataset ultrafeedback-pairs` then read with `mean` unless told otherwise."""
    from setllm.cli import main
    from setllm.evaluation import EvalConfig, run_eval

    model = tiny_model("llama", max_position_embeddings=1024)  # a context wide enough for the fixture's longest pair
    model_dir = saved(model, tmp_path / "base")
    cfg = TrainConfig(data="ultrafeedback-judge", data_dir=JUDGE_DATA, output_dir=str(tmp_path / "run"), model=model_dir,
                      objective="preference", max_steps=2, per_device_train_batch_size=2, learning_rate=1e-2, lora_alpha=16,
                      max_length=256, save_steps=100, disable_tqdm=True)
    train(cfg, model=model, tokenizer=tiny_tokenizer())
    assert json.loads((tmp_path / "run" / "setllm.json").read_text())["readout"] == "mean"
    lm = SetLLM.from_pretrained(model_dir, adapter=str(tmp_path / "run"))
    assert lm.judge_readout == "mean" and lm.with_options(batch_size=2).judge_readout == "mean"
    instruction, cands = ROW["instruction"], ROW["candidates"]
    mean, likelihood = (lm.judge(instruction, cands, readout=r).scores for r in ("mean", "likelihood"))
    assert lm.judge(instruction, cands).scores == mean != likelihood
    assert main(["judge", instruction, "--candidates", *cands, "--model", model_dir, "--adapter", str(tmp_path / "run"), "--json"]) == 0
    said = capsys.readouterr()
    assert json.loads(said.out)["scores"] == pytest.approx(mean, abs=1e-5)  # a fresh load: same computation, tolerance for threads
    assert said.err.strip().endswith("variant setmask-setpe, readout mean")
    got = run_eval(lm, EvalConfig(dataset="ultrafeedback-pairs", split="train", data_dir=JUDGE_DATA, out=str(tmp_path / "eval"), progress=False))
    told = run_eval(lm, EvalConfig(dataset="ultrafeedback-pairs", split="train", data_dir=JUDGE_DATA, out=str(tmp_path / "told"),
                                   readout="mean", progress=False))
    assert json.loads((tmp_path / "eval" / "run.json").read_text())["readout"] == "mean"
    assert got["accuracy"] == told["accuracy"]
    picks = [[{k: r[k] for k in ("id", "predictions", "logprobs")} for r in map(json.loads, (tmp_path / d / "predictions.jsonl").open())]
             for d in ("eval", "told")]
    assert picks[0] == picks[1]  # the same scores, bit for bit (the same computation)


def test_an_unknown_recorded_readout_is_a_load_error(model_dir, tmp_path):
    from setllm.errors import ModelLoadError
    from setllm.loading import AdapterInfo

    AdapterInfo(model_dir, "setmask-setpe").write(tmp_path)
    assert "readout" not in json.loads((tmp_path / "setllm.json").read_text())  # nothing recorded: nothing written
    (tmp_path / "setllm.json").write_text(json.dumps({"variant": "setmask-setpe", "readout": "vibes"}))
    with pytest.raises(ModelLoadError, match="unknown readout 'vibes'"):
        AdapterInfo.read(tmp_path)


# -- benchmark rows: rank the right option by the summed log-likelihood choose reads ----------


@pytest.mark.parametrize("task", ["piqa", "arc_challenge", "commonsense_qa", "social_iqa"])
def test_a_benchmark_row_carries_its_other_options(task):
    from setllm.tasks import TASKS
    from setllm.tasks.base import load_records

    examples, _ = load_examples([task], TRAIN_DATA)
    records, _ = load_records(TASKS[task], "train", TRAIN_DATA)
    for ex, record in zip(examples, records):
        prompt, options = TASKS[task].training_options(record)
        assert (ex.prompt, ex.response) == (prompt, options[record.label]) == TASKS[task].training_pair(record)
        assert ex.rejected == tuple(o for i, o in enumerate(options) if i != record.label) and len(ex.rejected) == len(options) - 1


@pytest.mark.parametrize("variant", ["setmask-setpe", "causal-pe"])
def test_the_summed_score_is_what_choose_reads(variant):
    """``--preference-score sum`` ranks exactly the numbers ``setllm choose`` and ``eval``
    compare: each option's summed log-likelihood (text + EOS) after the benchmark prompt."""
    lm = SetLLM(tiny_model(), tiny_tokenizer(), variant)
    examples, _ = load_examples(["commonsense_qa"], TRAIN_DATA, limit=2)
    items, report = featurize_preferences(lm.codec, examples, 512)
    assert report.kept == 2 and [len(i["group"]) for i in items] == [5, 5]
    batch = PreferenceCollator(lm.variant.positions, lm.pad_id)(items)
    with torch.no_grad():
        logits, _ = response_logits(lm.model, lm.variant, batch)
        trained = response_logprob(logits, batch["labels"])
    read = lm.score_many([ex.prompt for ex in examples], [[ex.response, *ex.rejected] for ex in examples])
    want = [s.logprob for row in read for s in row]
    torch.testing.assert_close(trained, torch.tensor(want), atol=1e-4, rtol=1e-4)


def test_the_sft_term_adds_the_cross_entropy_of_the_better_candidates():
    lm = SetLLM(tiny_model(), tiny_tokenizer())
    examples, _ = load_examples(["piqa"], TRAIN_DATA, limit=3)
    items, _ = featurize_preferences(lm.codec, examples, 512)
    batch = PreferenceCollator(lm.variant.positions, lm.pad_id)(items)
    with torch.no_grad():
        alone, _ = set_llm_preference_loss(lm.model, lm.variant, batch, Preference(1.0, 0.0, "sum"))
        both, _ = set_llm_preference_loss(lm.model, lm.variant, batch, Preference(1.0, 0.0, "sum", sft=0.5))
        logits, _ = response_logits(lm.model, lm.variant, batch)
        chosen = batch["chosen"]
        ce = response_loss(logits[chosen], batch["labels"][chosen])
    assert chosen.sum() == 3 and float(ce) > 0
    torch.testing.assert_close(both, alone + 0.5 * ce)


def test_a_few_steps_on_benchmark_rows_rank_the_right_options_higher(tmp_path):
    model, tok = tiny_model(), tiny_tokenizer()
    specs = ["piqa", "arc_challenge", "commonsense_qa", "social_iqa"]
    examples, _ = load_examples(specs, TRAIN_DATA)

    def gap(lm: SetLLM) -> float:  # mean over rows of s_right - mean of s_other, summed scores as choose reads them
        read = lm.score_many([ex.prompt for ex in examples], [[ex.response, *ex.rejected] for ex in examples])
        return sum(row[0].logprob - sum(s.logprob for s in row[1:]) / (len(row) - 1) for row in read) / len(read)

    before = gap(SetLLM(model, tok))
    cfg = TrainConfig(data=",".join(specs), data_dir=TRAIN_DATA, output_dir=str(tmp_path / "run"), objective="preference",
                      preference_score="sum", preference_beta=1.0, preference_margin=0.0, preference_sft=1.0, max_steps=6,
                      per_device_train_batch_size=4, learning_rate=1e-2, lora_alpha=16, max_length=256, logging_steps=1,
                      save_steps=100, disable_tqdm=True)
    result = train(cfg, model=model, tokenizer=tok)
    after = gap(SetLLM(model, tok))
    assert result.steps == 6 and result.examples == 24
    assert after > before + 0.2, (before, after)  # measured: -4.66 -> -4.27
    saved_info = json.loads((tmp_path / "run" / "setllm.json").read_text())
    assert saved_info["readout"] == "likelihood"  # the judge readout that sums, as this run ranked
    recorded = saved_info["training"]["config"]
    assert (recorded["preference_score"], recorded["preference_sft"]) == ("sum", 1.0)
