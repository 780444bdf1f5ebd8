"""``setllm train`` on tiny random models: loss, masks, resume, saving, errors.

Data comes from ``tests/fixtures/train`` (see its README for sources).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tiny import tiny_model, tiny_tokenizer
from transformers import TrainerCallback

from setllm.api import SetLLM
from setllm.cli import main
from setllm.core.forward.runtime import attention_mask
from setllm.core.layout.variants import VARIANTS
from setllm.core.text.prompt import Set, as_prompt
from setllm.core.tokens.batch import collate
from setllm.errors import InputError
from setllm.io.records import DataError
from setllm.loading import EMBEDDED_HUB_ID
from setllm.training import TrainConfig, train
from setllm.training.collator import IGNORE, SetCollator, featurize
from setllm.training.examples import Example, load_examples
from setllm.training.export import export_adapter
from setllm.training.trainer import set_llm_loss

FIXTURES = Path(__file__).parents[1] / "fixtures" / "train"
USER_JSONL = str(FIXTURES / "prompt_response.jsonl")
MIX = f"arc_challenge,piqa,commonsense_qa,social_iqa,ultrafeedback,{USER_JSONL}"


def config(out, **overrides) -> TrainConfig:
    # alpha 16 and a large lr: a random 2-layer model needs a big push to move in 6 steps.
    base = dict(data=MIX, data_dir=str(FIXTURES), output_dir=str(out), max_steps=6, per_device_train_batch_size=4, learning_rate=1e-2,
                lora_alpha=16, max_length=256, logging_steps=1, save_steps=3, disable_tqdm=True)
    return TrainConfig(**{**base, **overrides})


def lm_for(variant="setmask-setpe", seed=0) -> SetLLM:
    return SetLLM(tiny_model(seed=seed), tiny_tokenizer(), variant)


def batch_for(lm: SetLLM, examples) -> dict:
    feats, _ = featurize(lm.codec, examples, 256)
    return SetCollator(lm.variant.positions, lm.pad_id)(feats)


PARIS = Example(as_prompt(["Question: Which city is the capital of France?\n\nChoices:\n", Set(["Budapest\n", "Paris\n", "Zurich\n"]), "Answer:"]),
                "Paris", "literal")
FRUIT = Example(as_prompt(["Pick:\n", Set(["apple\n", "rocks\n"]), "Answer:"]), "apple", "literal2")


def test_only_response_tokens_carry_loss():
    lm = lm_for()
    batch = batch_for(lm, [PARIS, FRUIT])  # different lengths: FRUIT is left-padded
    labels, ids = batch["labels"], batch["input_ids"]
    eos = lm.tokenizer.eos_token_id
    resp = lm.codec.encoder.tokenize(" Paris") + [eos]  # a space after "Answer:", then EOS
    assert labels[0, -len(resp):].tolist() == resp
    assert (labels[0, : -len(resp)] == IGNORE).all()  # the whole prompt
    n_fruit = len(lm.codec.encoder.tokenize(" apple")) + 1
    assert (labels[1, : -n_fruit] == IGNORE).all() and (labels[1, -n_fruit:] == ids[1, -n_fruit:]).all()
    assert not batch["valid"][1, 0]  # padding sits on the left and carries no label
    # The loss equals cross-entropy over exactly those tokens, from full-sequence logits.
    with torch.no_grad():
        loss, _ = set_llm_loss(lm.model, lm.variant, batch)
        manual = []
        for ex in (PARIS, FRUIT):
            r = lm.response_ids(ex.prompt, ex.response)
            full = torch.cat([torch.tensor(lm.encode(ex.prompt).input_ids), torch.tensor(r)])
            logits = lm_logits_with_eos(lm, ex, r)  # [N, V]: the inference path, one unpadded row
            manual.append(torch.nn.functional.cross_entropy(logits[-len(r) - 1 : -1], full[-len(r):], reduction="sum"))
        expected = sum(manual) / (len(resp) + n_fruit)
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)


def lm_logits_with_eos(lm: SetLLM, ex: Example, resp: list[int]) -> torch.Tensor:
    """Inference-path logits over prompt + response ids (EOS included), one unpadded row."""
    from setllm.core.forward.runtime import forward

    b = collate([lm.encode(ex.prompt)], lm.variant.positions, lm.pad_id, responses=[resp])
    return forward(lm.model, lm.variant, b.input_ids, b.position_ids, b.layout).logits[0]


def test_logits_only_for_response_changes_nothing():
    lm = lm_for()
    batch = batch_for(lm, [PARIS, FRUIT])
    with torch.no_grad():
        kept, out_kept = set_llm_loss(lm.model, lm.variant, batch, logits_only_for_response=True)
        full, out_full = set_llm_loss(lm.model, lm.variant, batch, logits_only_for_response=False)
    torch.testing.assert_close(kept, full)
    assert out_kept.logits.shape[1] < out_full.logits.shape[1] // 4  # few columns of logits, not all


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_collator_matches_inference_encoder(variant):
    """Training rows (left-padded in a batch) get the inference encoder's positions and mask,
    so the model computes the same logits for them."""
    lm = lm_for(variant)
    batch = batch_for(lm, [FRUIT, PARIS])
    for row, ex in enumerate([FRUIT, PARIS]):
        ref = collate([lm.encode(ex.prompt)], lm.variant.positions, lm.pad_id, responses=[lm.response_ids(ex.prompt, ex.response)])
        n = ref.input_ids.shape[1]
        assert batch["input_ids"][row, -n:].tolist() == ref.input_ids[0].tolist()
        assert batch["position_ids"][row, -n:].tolist() == ref.position_ids[0].tolist()
        for name in ("valid", "is_prompt", "set_ids", "element_ids"):
            assert batch[name][row, -n:].tolist() == getattr(ref.layout, name)[0].tolist()
        from setllm.training.collator import layout_of

        train_mask = attention_mask(lm.model, lm.variant, layout_of(batch), batch["input_ids"].shape[1])
        ref_mask = attention_mask(lm.model, lm.variant, ref.layout, n)
        assert torch.equal(train_mask[row, :, -n:, -n:], ref_mask[0])
        with torch.no_grad():
            got = lm_logits_batch(lm, batch)[row, -n:]
            want = lm_logits_with_eos(lm, ex, lm.response_ids(ex.prompt, ex.response))
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def lm_logits_batch(lm, batch):
    from setllm.core.forward.runtime import forward
    from setllm.training.collator import layout_of

    return forward(lm.model, lm.variant, batch["input_ids"], batch["position_ids"], layout_of(batch)).logits


def loss_on(model, tokenizer, spec: str) -> float:
    lm = SetLLM(model, tokenizer)
    examples, _ = load_examples([spec])
    with torch.no_grad():
        return float(set_llm_loss(lm.model, lm.variant, batch_for(lm, examples))[0])


def test_a_few_steps_lower_the_loss(tmp_path):
    model, tok = tiny_model(), tiny_tokenizer()
    before = loss_on(model, tok, USER_JSONL)
    result = train(config(tmp_path / "run", data=USER_JSONL, max_steps=8, learning_rate=3e-2), model=model, tokenizer=tok)
    after = loss_on(model, tok, USER_JSONL)
    assert result.steps == 8 and after < before - 0.4, (before, after)  # measured: 6.07 -> 5.33
    log = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == list(range(1, 9))
    assert all(r["tokens_per_s"] > 0 and r["tokens"] > 0 for r in log if "loss" in r)


class StopAt(TrainerCallback):
    """Simulates a kill right after the checkpoint at ``step``."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


def test_resume_equals_uninterrupted_run(tmp_path):
    train(config(tmp_path / "a"), model=tiny_model(), tokenizer=tiny_tokenizer())
    train(config(tmp_path / "b"), callbacks=[StopAt(3)], model=tiny_model(), tokenizer=tiny_tokenizer())
    assert (tmp_path / "b" / "checkpoint-3").is_dir()
    # A fresh process builds the model again: resume must not depend on the new LoRA init.
    model = tiny_model()
    torch.manual_seed(123)
    result = train(config(tmp_path / "b", resume=True), model=model, tokenizer=tiny_tokenizer())
    assert result.steps == 6
    a, b = load_file(tmp_path / "a" / "adapter_model.safetensors"), load_file(tmp_path / "b" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # The log's token count is cumulative across the restart, not reset to 0.
    tokens = [[json.loads(line).get("tokens") for line in (tmp_path / run / "train_log.jsonl").read_text().splitlines()] for run in "ab"]
    assert [t for t in tokens[1] if t] and [t for t in tokens[1] if t][-1] == [t for t in tokens[0] if t][-1]


def rows_of_varied_length(path: Path, n: int) -> str:
    """``n`` prompt/response rows of different lengths (so group_by_length has groups to make)."""
    words = ["red", "green", "blue", "cyan", "plum", "gold", "grey", "pink"]
    with path.open("w") as f:
        for i in range(n):
            items = [f"{words[(i + j) % 8]} {j}\n" for j in range(2 + i % 5)]
            f.write(json.dumps({"prompt": [f"Pick {i}:\n", {"set": items}, "Answer:"], "response": words[i % 8] * (1 + i % 3)}) + "\n")
    return str(path)


@pytest.mark.parametrize("strategy", ["group_by_length", "random"])
def test_resume_mid_second_epoch_equals_uninterrupted_run(tmp_path, strategy):
    """Every epoch's data order is restored, not only the first's: killed after the checkpoint
    at step 12 (8 steps an epoch: the middle of the second), the resumed run ends with the
    uninterrupted run's adapter, bit for bit."""
    data = rows_of_varied_length(tmp_path / "rows.jsonl", 64)
    kw = dict(data=data, max_steps=20, per_device_train_batch_size=8, save_steps=4, save_total_limit=None, logging_steps=4,
              train_sampling_strategy=strategy)
    train(config(tmp_path / "a", **kw), model=tiny_model(), tokenizer=tiny_tokenizer())
    train(config(tmp_path / "b", **kw), callbacks=[StopAt(12)], model=tiny_model(), tokenizer=tiny_tokenizer())
    torch.manual_seed(123)  # a fresh process: another global RNG state
    train(config(tmp_path / "b", resume=True, **kw), model=tiny_model(), tokenizer=tiny_tokenizer())
    a, b = load_file(tmp_path / "a" / "adapter_model.safetensors"), load_file(tmp_path / "b" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_resume_keeps_counting_tokens_when_nothing_was_logged_since_the_checkpoint(tmp_path):
    sparse = dict(logging_steps=5, save_steps=2)  # a kill after step 4: the checkpoint's count is the only record
    train(config(tmp_path / "a", **sparse), model=tiny_model(), tokenizer=tiny_tokenizer())
    train(config(tmp_path / "b", **sparse), callbacks=[StopAt(4)], model=tiny_model(), tokenizer=tiny_tokenizer())
    assert not [line for line in (tmp_path / "b" / "train_log.jsonl").read_text().splitlines() if '"tokens"' in line]
    result = train(config(tmp_path / "b", resume=True, **sparse), model=tiny_model(), tokenizer=tiny_tokenizer())
    logged = [[json.loads(line)["tokens"] for line in (tmp_path / run / "train_log.jsonl").read_text().splitlines() if '"tokens"' in line]
              for run in "ab"]
    assert logged[1] == logged[0] and result.tokens == json.loads((tmp_path / "a" / "setllm.json").read_text())["training"]["tokens"]


def test_gradient_accumulation_matches_the_big_batch(tmp_path):
    """2 x 2 accumulated = one batch of 4: the loss is divided by the response tokens of the
    whole accumulated batch, so every token weighs the same either way."""
    train(config(tmp_path / "big", max_steps=3, per_device_train_batch_size=4), model=tiny_model(), tokenizer=tiny_tokenizer())
    train(config(tmp_path / "acc", max_steps=3, per_device_train_batch_size=2, gradient_accumulation_steps=2), model=tiny_model(), tokenizer=tiny_tokenizer())
    big, acc = load_file(tmp_path / "big" / "adapter_model.safetensors"), load_file(tmp_path / "acc" / "adapter_model.safetensors")
    for key in big:
        torch.testing.assert_close(acc[key], big[key], atol=1e-5, rtol=1e-4)


def test_saved_adapter_reloads_with_its_variant(tmp_path):
    base = tmp_path / "base"
    tiny_model().save_pretrained(base)
    tiny_tokenizer().save_pretrained(base)
    model, tok = tiny_model(), tiny_tokenizer()
    cfg = config(tmp_path / "run", model=str(base), variant="prefix-setpe", max_steps=3)
    train(cfg, model=model, tokenizer=tok)
    meta = json.loads((tmp_path / "run" / "setllm.json").read_text())
    assert meta["variant"] == "prefix-setpe" and meta["base_model"] == str(base) and meta["template"] == "modified"
    assert (tmp_path / "run" / "adapter_model.safetensors").exists() and not (tmp_path / "run" / "training_args.bin").exists()
    model.eval()
    with torch.no_grad():
        want = SetLLM(model, tok, "prefix-setpe").logits(PARIS.prompt, "Paris")
    reloaded = SetLLM.from_pretrained(str(base), adapter=str(tmp_path / "run"))
    assert reloaded.variant.name == "prefix-setpe"  # from setllm.json, not the default
    assert hasattr(reloaded.model, "peft_config")  # LoRA kept beside the weights, as it was trained (every surface reads it so)
    torch.testing.assert_close(reloaded.logits(PARIS.prompt, "Paris"), want, atol=1e-5, rtol=1e-5)
    from peft import PeftModel  # plain PEFT loads the same weights

    plain = PeftModel.from_pretrained(tiny_model(), str(tmp_path / "run"))
    with torch.no_grad():
        torch.testing.assert_close(SetLLM(plain, tok, "prefix-setpe").logits(PARIS.prompt, "Paris"), want, atol=1e-5, rtol=1e-5)
    # The shipped form: three files, bf16 weights, same variant, logits equal to bf16 rounding.
    shipped = export_adapter(tmp_path / "run", tmp_path / "shipped")
    assert sorted(p.name for p in shipped.iterdir()) == ["adapter_config.json", "adapter_model.safetensors", "setllm.json"]
    assert {t.dtype for t in load_file(shipped / "adapter_model.safetensors").values()} == {torch.bfloat16}
    lm = SetLLM.from_pretrained(str(base), adapter=str(shipped))
    assert lm.variant.name == "prefix-setpe"
    torch.testing.assert_close(lm.logits(PARIS.prompt, "Paris"), want, atol=2e-2, rtol=0)
    # Scaled exports (WiSE-FT): S=0 is the base model bit for bit (the adapter's delta is exactly
    # zero), S=0.5 halves every B matrix and records the scale; outside [0, 1] is refused.
    none = export_adapter(tmp_path / "run", tmp_path / "s0", dtype="float32", scale=0.0)
    base_only = SetLLM.from_pretrained(str(base), variant="prefix-setpe")
    assert torch.equal(SetLLM.from_pretrained(str(base), adapter=str(none)).logits(PARIS.prompt, "Paris"), base_only.logits(PARIS.prompt, "Paris"))
    half = export_adapter(tmp_path / "run", tmp_path / "s05", dtype="float32", scale=0.5)
    trained, halved = load_file(tmp_path / "run" / "adapter_model.safetensors"), load_file(half / "adapter_model.safetensors")
    assert all(torch.equal(halved[k], v * 0.5 if "lora_B" in k else v) for k, v in trained.items())
    assert json.loads((half / "setllm.json").read_text())["delta_scale"] == 0.5
    assert "delta_scale" not in json.loads((shipped / "setllm.json").read_text())
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(InputError, match=r"--scale must be in \[0, 1\]"):
            export_adapter(tmp_path / "run", tmp_path / "bad", scale=bad)


def test_an_adapter_trained_under_sbp_can_be_named(tmp_path):
    """SBP reads the base model by default, but its finetuned reading (Brown & McIlroy-Young 2025) trains as any variant."""
    base = tmp_path / "base"
    tiny_model().save_pretrained(base)
    tiny_tokenizer().save_pretrained(base)
    model, tok = tiny_model(), tiny_tokenizer()
    assert train(config(tmp_path / "run", model=str(base), variant="sbp", max_steps=2), model=model, tokenizer=tok).steps == 2
    assert json.loads((tmp_path / "run" / "setllm.json").read_text())["variant"] == "sbp"
    model.eval()
    with torch.no_grad():
        want = SetLLM(model, tok, "sbp").logits(PARIS.prompt, "Paris")
    reloaded = SetLLM.from_pretrained(str(base), adapter=str(tmp_path / "run"))
    assert reloaded.variant.name == "sbp" and reloaded.exact
    torch.testing.assert_close(reloaded.logits(PARIS.prompt, "Paris"), want, atol=1e-5, rtol=1e-5)
    assert SetLLM.from_pretrained(str(base), variant="sbp").origin.adapter is None  # not named: the base model


def test_trained_metadata_is_restored_and_an_explicit_mismatch_warns(tmp_path):
    """setllm.json records what the model was trained as (variant, template, EOS, chat);
    loading restores all of it, and reading it otherwise is allowed, with a warning."""
    from setllm.errors import SetLLMWarning

    base = tmp_path / "base"
    tiny_model().save_pretrained(base)
    tiny_tokenizer().save_pretrained(base)
    train(config(tmp_path / "run", model=str(base), variant="prefix-setpe", chat=True, max_steps=2), model=tiny_model(), tokenizer=tiny_tokenizer())
    meta = json.loads((tmp_path / "run" / "setllm.json").read_text())
    assert {k: meta[k] for k in ("variant", "template", "eos", "chat")} == {"variant": "prefix-setpe", "template": "modified", "eos": True, "chat": True}
    with warnings.catch_warnings():
        warnings.simplefilter("error", SetLLMWarning)  # restoring what was recorded warns about nothing
        lm = SetLLM.from_pretrained(str(base), adapter=str(tmp_path / "run"))
    assert (lm.variant.name, lm.chat, lm.options.eos) == ("prefix-setpe", True, True)
    with pytest.warns(SetLLMWarning, match="trained with variant=prefix-setpe; reading it with variant=setmask-setpe"):
        other = SetLLM.from_pretrained(str(base), adapter=str(tmp_path / "run"), variant="setmask-setpe")
    assert other.variant.name == "setmask-setpe" and other.chat
    with pytest.warns(SetLLMWarning, match="trained with eos=True; reading it with eos=False"):
        assert not SetLLM.from_pretrained(str(base), adapter=str(tmp_path / "run"), eos=False).options.eos


def test_full_finetune_saves_a_loadable_model(tmp_path):
    model, tok = tiny_model(), tiny_tokenizer()
    train(config(tmp_path / "full", full_finetune=True, max_steps=2, variant="prefix-setpe"), model=model, tokenizer=tok)
    saved = tmp_path / "full"
    assert (saved / "model.safetensors").exists() and (saved / "tokenizer.json").exists()
    assert json.loads((saved / "setllm.json").read_text())["training"]["config"]["full_finetune"] is True
    model.eval()
    with torch.no_grad():
        want = SetLLM(model, tok, "prefix-setpe").logits(PARIS.prompt, "Paris")
    reloaded = SetLLM.from_pretrained(str(saved))
    assert reloaded.variant.name == "prefix-setpe"  # from the model dir's setllm.json
    torch.testing.assert_close(reloaded.logits(PARIS.prompt, "Paris"), want, atol=1e-5, rtol=1e-5)


def test_stage_two_continues_the_adapter(tmp_path):
    train(config(tmp_path / "ultra", data="ultrafeedback", max_steps=2), model=tiny_model(), tokenizer=tiny_tokenizer())
    stage1 = load_file(tmp_path / "ultra" / "adapter_model.safetensors")
    assert json.loads((tmp_path / "ultra" / "adapter_config.json").read_text())["base_model_name_or_path"] == EMBEDDED_HUB_ID
    # A tiny lr: stage 2 must start from stage 1's weights (a fresh LoRA B would be zero).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(config(tmp_path / "arc", data="arc_challenge", init_adapter=str(tmp_path / "ultra"), max_steps=2, learning_rate=1e-6),
              model=tiny_model(), tokenizer=tiny_tokenizer())
    # PEFT does not look the adapter's portable base up on the hub at each save ...
    assert not [str(w.message) for w in caught if "Could not find a config file" in str(w.message)]
    # ... and the saved adapter still names it.
    assert json.loads((tmp_path / "arc" / "adapter_config.json").read_text())["base_model_name_or_path"] == EMBEDDED_HUB_ID
    stage2 = load_file(tmp_path / "arc" / "adapter_model.safetensors")
    assert stage1.keys() == stage2.keys()
    lora_b = [k for k in stage1 if "lora_B" in k]
    assert lora_b and all(stage1[k].abs().max() > 1e-3 for k in lora_b)
    for key in stage1:
        torch.testing.assert_close(stage2[key], stage1[key], atol=1e-4, rtol=0)
    assert any(not torch.equal(stage1[k], stage2[k]) for k in stage1)  # and it did train
    recorded = json.loads((tmp_path / "arc" / "setllm.json").read_text())["training"]
    assert recorded["config"]["init_adapter"] == str(tmp_path / "ultra")
    # The stage it continued is recorded whole: the file says what the adapter is, not only its last stage.
    assert recorded["init_training"] == json.loads((tmp_path / "ultra" / "setllm.json").read_text())["training"]
    assert recorded["init_training"]["data"] == ["ultrafeedback"] and "init_training" not in recorded["init_training"]


def test_benchmark_examples_use_the_evaluation_template():
    """Training renders each benchmark exactly as ``setllm eval --template modified`` asks."""
    from setllm.tasks import get_task

    examples, _ = load_examples(["social_iqa:1", "arc_challenge:1"], str(FIXTURES))
    siqa, arc = examples
    assert siqa.prompt.segments[0].startswith("Question: Given the context, answer correctly the question.\nContext: Cameron")
    assert siqa.response == "like attending" and siqa.prompt.sets[0].elements[0] == "like attending\n"
    record = json.loads((FIXTURES / "arc_challenge" / "train.jsonl").read_text().splitlines()[0])
    from setllm.io.records import parse_record

    rendered = get_task("arc_challenge").modified.render(parse_record(record, "x"), tuple(range(len(record["choices"]))))
    assert arc.prompt == rendered.prompt and arc.response == record["choices"][record["label"]]


def test_overlong_policy_is_counted():
    lm = lm_for()
    long = Example(as_prompt(["Question: " + "apple banana " * 10 + "\nAnswer:"]), "cherry date " * 40, "long")
    feats, report = featurize(lm.codec, [PARIS, long], max_length=120, overlong="truncate", min_response_tokens=4)
    assert report.truncated == 1 and report.kept == 2 and len(feats[1]["input_ids"]) == 120
    feats, report = featurize(lm.codec, [PARIS, long], max_length=120, overlong="skip")
    assert report.kept == 1 and len(report.skipped) == 1 and "long:" in report.skipped[0]


def test_bad_records_name_file_and_line():
    with pytest.raises(DataError, match=r"bad\.jsonl:2: prompt\[1\]: empty set"):
        load_examples([str(FIXTURES / "bad.jsonl")])
    examples, report = load_examples([str(FIXTURES / "bad.jsonl")], skip_bad=True)
    assert len(examples) == 2 and len(report.skipped[str(FIXTURES / "bad.jsonl")]) == 3
    assert "3 bad records skipped" in report.lines()[0]
    with pytest.raises(DataError, match="unknown data spec 'mmlu'"):
        load_examples(["mmlu"])


@pytest.mark.parametrize("overrides, message", [
    (dict(data=""), "no training data"),
    (dict(learning_rate=0), "--lr must be in"),
    (dict(per_device_train_batch_size=0), "--batch-size must be at least 1"),
    (dict(variant="setmask"), "unknown variant"),
    (dict(init_adapter="/nonexistent"), "no adapter_config.json"),
    (dict(overlong="cut"), "--overlong must be one of"),
])
def test_bad_config_is_a_clear_error(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        config(tmp_path, **overrides)


def test_cli_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "c.yaml"
    bad.write_text("data: arc_challenge\nout: x\nlearning_rte: 0.1\n")
    assert main(["train", "--config", str(bad)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {bad}: unknown config keys ['learning_rte']; keys are the flag names (see --help)"
    typo = tmp_path / "t.yaml"
    typo.write_text("data: arc_challenge\nout: x\nlr: fast\n")  # a wrongly typed value fails like a wrong flag
    assert main(["train", "--config", str(typo)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: argument --learning_rate") and "fast" in err[0]
    broken = tmp_path / "b.yaml"
    broken.write_text("data: [unclosed\n")
    assert main(["train", "--config", str(broken)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {broken}: not valid YAML")
    assert main(["train", "--data", str(FIXTURES / "bad.jsonl"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "bad.jsonl:2" in err[0]


def test_resume_needs_a_checkpoint_and_fresh_runs_refuse_old_ones(tmp_path):
    with pytest.raises(ValueError, match="no checkpoint-"):
        train(config(tmp_path / "none", resume=True), model=tiny_model(), tokenizer=tiny_tokenizer())
    (tmp_path / "old" / "checkpoint-3").mkdir(parents=True)
    with pytest.raises(ValueError, match="--resume to continue"):
        train(config(tmp_path / "old"), model=tiny_model(), tokenizer=tiny_tokenizer())



def test_resuming_a_finished_run_trains_nothing(model_dir, tmp_path, capsys):
    """A complete run resumed with its own settings says so and leaves its adapter alone; one
    killed after its last checkpoint, before the final save, only saves: never a step past
    --max-steps (the Trainer checks it only after a step)."""
    out = tmp_path / "run"
    argv = ["train", "--data", "piqa", "--data-dir", str(FIXTURES), "--model", model_dir, "--max-steps", "2", "--batch-size", "2",
            "--save-steps", "1", "--no-progress", "--out", str(out)]

    def run(*extra) -> tuple[dict, str]:
        assert main([*argv, *extra]) == 0
        std = capsys.readouterr()
        return json.loads(std.out.strip().splitlines()[-1]), std.err

    first, _ = run()
    adapter = (out / "adapter_model.safetensors").read_bytes()
    again, err = run("--resume")
    assert again == {**first, "runtime_s": 0.0} and again["steps"] == 2
    assert f"{out} is complete (2 steps, checkpoint-2); nothing to train" in err
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert (out / "adapter_model.safetensors").read_bytes() == adapter
    # Killed between checkpoint-2 and the final save: resuming writes checkpoint-2's adapter.
    (out / "setllm.json").unlink()
    (out / "adapter_model.safetensors").unlink()
    assert run("--resume")[0]["steps"] == 2
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    saved, last = load_file(out / "adapter_model.safetensors"), load_file(out / "checkpoint-2" / "adapter_model.safetensors")
    assert saved.keys() == last.keys() and all(torch.equal(saved[k], last[k]) for k in saved)
    assert json.loads((out / "setllm.json").read_text())["training"]["steps"] == 2


def test_resume_refuses_other_settings_and_overwrite_starts_clean(tmp_path):
    out = tmp_path / "run"
    train(config(out), callbacks=[StopAt(3)], model=tiny_model(), tokenizer=tiny_tokenizer())
    with pytest.raises(ValueError, match=r"--resume: .* other settings \(learning_rate: 0.01 -> 0.02\)"):
        train(config(out, resume=True, learning_rate=2e-2), model=tiny_model(), tokenizer=tiny_tokenizer())
    with pytest.raises(ValueError, match=r"other settings \(data: "):
        train(config(out, resume=True, data="arc_challenge"), model=tiny_model(), tokenizer=tiny_tokenizer())
    (out / "notes.txt").write_text("mine")  # not the run's: --overwrite leaves it
    result = train(config(out, overwrite=True, max_steps=2, save_steps=100), model=tiny_model(), tokenizer=tiny_tokenizer())
    assert result.steps == 2 and (out / "notes.txt").read_text() == "mine"
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-2"]  # the old run's checkpoint-3 is gone
    steps = [json.loads(line)["step"] for line in (out / "train_log.jsonl").read_text().splitlines() if "loss" in json.loads(line)]
    assert steps == [1, 2]  # the old run's log is gone, not continued
    assert json.loads((out / "run.json").read_text())["max_steps"] == 2


def test_a_resumed_log_has_each_step_once_and_short_runs_report_their_loss(tmp_path):
    out = tmp_path / "run"

    # Killed after logging step 4; the newest checkpoint is step 3, so step 4 runs again.
    train(config(out), callbacks=[StopAt(4)], model=tiny_model(), tokenizer=tiny_tokenizer())
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3"]
    train(config(out, resume=True), model=tiny_model(), tokenizer=tiny_tokenizer())
    steps = [json.loads(line)["step"] for line in (out / "train_log.jsonl").read_text().splitlines() if "loss" in json.loads(line)]
    assert steps == [1, 2, 3, 4, 5, 6]
    short = train(config(tmp_path / "short", max_steps=2, logging_steps=10), model=tiny_model(), tokenizer=tiny_tokenizer())
    assert short.final_loss is not None and short.final_loss > 0
    assert json.loads((tmp_path / "short" / "setllm.json").read_text())["training"]["final_loss"] == short.final_loss


def test_out_is_checked_and_locked(tmp_path):
    import fcntl

    from setllm.io import rundir

    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    if not os.access(ro, os.W_OK):  # root can write anywhere
        with pytest.raises(ValueError, match="not writable"):
            train(config(ro / "x"), model=tiny_model(), tokenizer=tiny_tokenizer())
    out = tmp_path / "busy"
    out.mkdir()
    with (out / rundir.LOCK_FILE).open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        code = ("import sys; from pathlib import Path; from setllm.io import rundir\n"
                f"try:\n    with rundir.locked(Path({str(out)!r})): print('entered')\nexcept Exception as e: print(e)")
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "another setllm process is writing there" in res.stdout


def test_a_run_stopped_by_bad_data_leaves_no_out_it_created(tmp_path):
    """Bad data is found after --out is locked; a folder holding only a stale .lock would
    look like a run to resume, so one the run created goes again. One that existed stays."""
    bad = dict(data=str(FIXTURES / "bad.jsonl"))
    with pytest.raises(DataError, match=r"bad\.jsonl:2"):
        train(config(tmp_path / "new" / "run", **bad), model=tiny_model(), tokenizer=tiny_tokenizer())
    assert not (tmp_path / "new" / "run").exists() and (tmp_path / "new").is_dir()
    (tmp_path / "mine").mkdir()
    with pytest.raises(DataError):
        train(config(tmp_path / "mine", **bad), model=tiny_model(), tokenizer=tiny_tokenizer())
    assert (tmp_path / "mine").is_dir()


def test_the_shipped_recipes_parse_as_the_shipped_adapter_records_them(tmp_path):
    """`research/default_adapter.sh build` runs the two shipped YAML recipes; each parses into
    the config the shipped adapter's setllm.json records for its stage (the run-local fields
    aside: out, init_adapter)."""
    from setllm.cli import build_parser
    from setllm.cli.common import apply_config_file, config_from_args

    root = Path(__file__).parents[2]
    adapter = root / "src" / "setllm" / "adapters" / "smollm2-135m-setllm"
    recorded = json.loads((adapter / "setllm.json").read_text())["training"]
    for name, stage in (("smollm2-135m-setllm.yaml", recorded["init_training"]), ("smollm2-135m-setllm-rank.yaml", recorded)):
        _, parser = build_parser("train")
        apply_config_file(parser, str(root / "src" / "setllm" / "adapters" / name))
        args = parser.parse_args(["--init-adapter", str(adapter), "--out", str(tmp_path / name)])
        got = config_from_args(TrainConfig, args).recorded()
        old_names = {"lr": "learning_rate", "batch_size": "per_device_train_batch_size"}  # stage 1 was recorded by an older setllm
        want = {old_names.get(k, k): v for k, v in stage["config"].items()}
        keys = ("data", "objective", "preference_score", "preference_beta", "preference_margin", "preference_sft", "sample_seed",
                "learning_rate", "seed", "lora_r", "lora_alpha", "max_length", "per_device_train_batch_size", "data_dir")
        assert {k: got[k] for k in keys if k in want} == {k: want[k] for k in keys if k in want}, name
        assert len([k for k in keys if k in want]) >= 9, name  # 9 of stage 1 (no preference fields), 14 of stage 2
