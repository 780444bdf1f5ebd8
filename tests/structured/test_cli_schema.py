"""``setllm generate --schema FILE`` / ``--choice``: a bad constraint is one line before the model
loads, an answer validates, and the order of an enum or a choice list changes no byte."""

from __future__ import annotations

import json

import jsonschema
import pytest
from tiny import run_cli, tiny_model, tiny_tokenizer

from setllm import SetLLM

pytest.importorskip("llguidance")

SCHEMA = {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome", "Budapest"]}, "sure": {"type": "boolean"}},
          "required": ["city", "sure"]}


@pytest.fixture(scope="module")
def tiny_lm():
    return SetLLM(tiny_model("llama", max_position_embeddings=1024), tiny_tokenizer(), "setmask-setpe")


@pytest.fixture
def loads(monkeypatch, tiny_lm):
    """The CLI's model: the tiny one, counted."""
    from setllm.cli import infer

    loaded = []
    monkeypatch.setattr(infer, "load_setllm", lambda args: loaded.append(1) or tiny_lm)
    monkeypatch.setattr(infer, "announce", lambda lm, args: None)
    return loaded


def test_a_bad_schema_is_one_line_before_loading(capsys, tmp_path, loads):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"type": "object", "properties": {"city": {"type": "town"}}}))
    code, _, err = run_cli(capsys, "generate", "--prompt", "Capital?", "--schema", str(bad))
    assert code == 2 and err.startswith("error: --schema: schema.properties.city.type: ") and err.count("\n") == 1
    code, _, err = run_cli(capsys, "generate", "--prompt", "Capital?", "--regex", "[a-")
    assert code == 2 and err.startswith("error: --regex: regex: the grammar engine cannot compile it")
    assert not loads


def test_schema_and_choice_answers_are_order_free(capsys, tmp_path, loads):
    outs = []
    for order in (["Paris", "Rome", "Budapest"], ["Budapest", "Paris", "Rome"]):
        path = tmp_path / "schema.json"
        path.write_text(json.dumps({**SCHEMA, "properties": {"sure": SCHEMA["properties"]["sure"], "city": {"enum": order}}}))
        code, out, _ = run_cli(capsys, "generate", "--prompt", "Capital of France?", "--schema", str(path), "--max-new-tokens", "64", "--show-schema")
        assert code == 0
        jsonschema.validate(json.loads(out), SCHEMA)
        outs.append(out)
        code, out, _ = run_cli(capsys, "generate", "--prompt", "Capital of France?", "--choice", *order)
        assert code == 0 and out.strip() in order
        outs.append(out)
    assert outs[0] == outs[2] and outs[1] == outs[3]
