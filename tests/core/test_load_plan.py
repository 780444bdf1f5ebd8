"""Resolve, then build (setllm.loading.plan): a load is decided once, without torch, and every
loader builds from that plan: each setllm.json is read once per load, nothing reads files
after it (``answers_with`` included), and ``--dry-run`` prints the plan and loads nothing."""

from __future__ import annotations

import builtins
import dataclasses
import io
import json
import pickle
import subprocess
import sys

import pytest
from tiny import run_cli, tiny_adapter

from setllm import AdapterBank, LoadOptions, SetLLM
from setllm.errors import SetLLMWarning
from setllm.loading.plan import DOCUMENTS, plan_load
from setllm.loading.record import METADATA_FILE


@pytest.fixture(scope="module")
def adapters(model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("plan-adapters")
    return {"main": tiny_adapter(model_dir, root / "main", 1, template="modified"),
            "docs": tiny_adapter(model_dir, root / "docs", 2, variant="sbp")}


@pytest.fixture
def reads(monkeypatch):
    """Every opening of a setllm.json from now on, by path (``open`` and ``Path.open`` alike)."""
    seen: list[str] = []

    def counting(real):
        def opened(file, *a, **kw):
            if str(file).endswith(METADATA_FILE):
                seen.append(str(file))
            return real(file, *a, **kw)
        return opened

    monkeypatch.setattr(io, "open", counting(io.open))
    monkeypatch.setattr(builtins, "open", counting(builtins.open))
    return seen


def test_a_load_reads_its_setllm_json_once(model_dir, adapters, reads):
    lm = SetLLM.from_pretrained(model_dir, adapters["main"])
    assert reads == [f"{adapters['main']}/{METADATA_FILE}"]
    assert lm.variant.name == "setmask-setpe" and lm.origin.trained_as.template == "modified"
    reads.clear()
    bank = AdapterBank.from_pretrained(model_dir, adapters)
    assert sorted(reads) == sorted(f"{p}/{METADATA_FILE}" for p in adapters.values())  # once each, the views included
    assert bank["docs"].variant.name == "sbp" and reads and len(reads) == 2


def test_the_documents_reading_is_planned_with_the_load_and_read_from_no_file(model_dir, adapters, reads, monkeypatch):
    """``answer``'s documents reading comes from the same plan; ``answers_with`` is a field of it, not a read."""
    options = LoadOptions(model_dir, adapters["main"])
    plan = dataclasses.replace(plan_load(options), documents=plan_load(dataclasses.replace(options, adapter=adapters["docs"]), DOCUMENTS))
    lm = SetLLM.build(plan)
    reads.clear()
    assert lm.answers_with == plan.documents.origin and lm.answers_with.adapter == adapters["docs"]
    assert lm.answers_with.trained_as.variant == "sbp" and reads == []
    assert lm.with_variant("sbp").answers_with is None  # a view read otherwise answers as it is


def test_the_plan_says_where_the_variant_came_from():
    plan = plan_load(LoadOptions())
    assert (plan.reading.variant, plan.reading.variant_from) == ("setmask-setpe", METADATA_FILE)
    assert plan.documents is not None and (plan.documents.reading.variant, plan.documents.reading.variant_from) == ("sbp", METADATA_FILE)
    asked = plan_load(LoadOptions(variant="prefix-setpe"))
    assert asked.reading.variant_from == "asked" and asked.cautions  # against the record: said when the model loads, not by a plan
    assert plan_load(LoadOptions(adapter="none")).reading.variant_from == "default"
    assert plan_load(LoadOptions(), DOCUMENTS).documents is None  # it reads documents itself
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.adapter = None
    assert pickle.loads(pickle.dumps(plan)) == plan  # it travels with the flags to Ray replicas, which build from it


def test_planning_needs_no_torch():
    code = ("import sys; from setllm import LoadOptions; from setllm.loading.plan import plan_load; "
            "p = plan_load(LoadOptions()); p.answer_fingerprint(); p.describe(); "
            "print([m for m in ('torch', 'transformers') if m in sys.modules])")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


def test_dry_run_prints_the_plan_and_loads_nothing(model_dir, adapters, capsys, monkeypatch):
    import setllm.loading.model as model

    monkeypatch.setattr(model, "_load", lambda *a, **k: pytest.fail("--dry-run loaded a model"))
    code, out, _ = run_cli(capsys, "choose", "Which?", "--options", "a", "b", "--model", model_dir, "--adapter", adapters["main"], "--dry-run")
    assert code == 0 and f"adapter: {adapters['main']}" in out and f"variant: setmask-setpe (from {METADATA_FILE})" in out
    assert json.loads(out.split("record: ")[1].splitlines()[0])["template"] == "modified"
    code, out, _ = run_cli(capsys, "serve", "--model", model_dir, "--adapter", f"a={adapters['main']}", "--adapter", f"b={adapters['docs']}",
                           "--dry-run")
    assert code == 0 and f"served adapter b: {adapters['docs']}" in out and "default reading: none" in out  # neither named the default


def test_a_bank_view_read_against_its_record_says_so(model_dir, adapters):
    bank = AdapterBank.from_pretrained(model_dir, adapters, variant="prefix-setpe")
    with pytest.warns(SetLLMWarning, match="trained with variant=sbp; reading it with variant=prefix-setpe"):
        assert bank["docs"].variant.name == "prefix-setpe"
