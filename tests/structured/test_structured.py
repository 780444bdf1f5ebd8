"""Structured outputs on a tiny random model: every answer parses and validates, a finite set of
values is decided by scoring (so permuting an enum, a choice list or the properties changes no
byte), bad constraints are one error naming the path, and a plan is compiled once."""

from __future__ import annotations

import json
import random
from typing import Literal

import jsonschema
import pytest
from pydantic import BaseModel
from tiny import tiny_model, tiny_tokenizer

from setllm import SetLLM
from setllm.structured import AnswerError, SchemaError, plan, spec

pytest.importorskip("llguidance")

LABELS = ["apple", "banana", "cherry", "date"]
SCHEMA = {"type": "object", "properties": {
    "fruit": {"enum": LABELS},
    "ripe": {"type": "boolean"},
    "note": {"type": "string", "maxLength": 4},
    "count": {"type": "integer", "minimum": 0, "maximum": 9},
    "kind": {"const": "fruit"},
}, "required": ["fruit", "ripe", "note", "count", "kind"], "additionalProperties": False}
PROMPT = "Question: Which fruit is yellow?\nAnswer:"


@pytest.fixture(scope="module")
def lm():
    return SetLLM(tiny_model("llama", max_position_embeddings=1024), tiny_tokenizer(), "setmask-setpe")  # room for the schema shown


def permuted(schema: dict, seed: int) -> dict:
    """The schema with its properties and its enum listed in another order."""
    rng = random.Random(seed)
    props = list(schema["properties"].items())
    rng.shuffle(props)
    props = dict(props)
    props["fruit"] = {"enum": rng.sample(LABELS, len(LABELS))}
    return {**schema, "properties": props}


def test_permuting_enum_and_properties_changes_no_byte(lm):
    answers = [lm.generate_structured(PROMPT, spec(permuted(SCHEMA, seed)), max_new_tokens=96, show=True) for seed in range(3)]
    assert answers[0].finish_reason == "stop"
    jsonschema.validate(json.loads(answers[0].text), SCHEMA)
    assert all(a.text == answers[0].text and a.token_ids == answers[0].token_ids for a in answers)


@pytest.mark.parametrize("bounds", [{}, {"uniqueItems": True}, {"minItems": 2, "maxItems": 3}], ids=["open", "unique", "two-to-three"])
def test_an_array_of_enum_values_is_decided_by_scoring_in_any_order(lm, bounds):
    """Each place of the array a pick of the end and the values allowed: valid, and the same
    bytes whatever order the enum lists its values in."""
    def schema(seed: int) -> dict:
        return {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": random.Random(seed).sample(LABELS, 4)}, **bounds}},
                "required": ["tags"]}

    [items] = [s for s in plan.plan(spec(schema(0)), lm.exact).steps if isinstance(s, plan.Items)]
    assert items.values == tuple(json.dumps(v) for v in sorted(LABELS))
    answers = [lm.generate_structured(PROMPT, spec(schema(seed)), max_new_tokens=64, show=True) for seed in range(3)]
    assert answers[0].finish_reason == "stop"
    jsonschema.validate(json.loads(answers[0].text), schema(0))
    assert all(a.text == answers[0].text and a.token_ids == answers[0].token_ids for a in answers)


def test_an_array_of_enum_values_that_cannot_be_filled_is_refused():
    with pytest.raises(SchemaError, match="minItems 3"):
        plan.plan(spec({"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": True, "minItems": 3}), True)


def labelled(seed: int, bounds: dict) -> dict:
    """An array of objects, each a label from an enum and a short free note, with the enum and
    the item's properties listed in the order ``seed`` draws."""
    rng = random.Random(seed)
    props = [("label", {"enum": rng.sample(LABELS, len(LABELS))}), ("why", {"type": "string", "maxLength": 2}), ("sure", {"type": "boolean"})]
    rng.shuffle(props)
    item = {"type": "object", "properties": dict(props), "required": ["label", "why", "sure"], "additionalProperties": False}
    return {"type": "object", "properties": {"rows": {"type": "array", "items": item, **bounds}}, "required": ["rows"]}


def test_an_enum_inside_the_objects_of_an_array_is_a_pick():
    """Each item planned as an object is: its keys text, its enum and boolean scored, its string free."""
    [rows] = [s for s in plan.plan(spec(labelled(0, {})), True).steps if isinstance(s, plan.Objects)]
    assert rows.item[0] == plan.Text('{"label":')  # keys sorted: the opening is the same whatever the order
    picks = {s.path: s.values for s in rows.item if isinstance(s, plan.Pick)}
    assert picks == {"schema.properties.rows.items.properties.label": tuple(json.dumps(v) for v in sorted(LABELS)),
                     "schema.properties.rows.items.properties.sure": ("false", "true")}
    assert [type(s) for s in rows.item].count(plan.Free) == 1


@pytest.mark.parametrize("bounds", [{}, {"minItems": 1}, {"minItems": 2, "maxItems": 3}, {"minItems": 2, "maxItems": 2}],
                         ids=["open", "one-or-more", "two-to-three", "two"])
def test_an_array_of_objects_is_decided_by_scoring_in_any_order(lm, bounds):
    """At each place the end or the next item is scored, and each item's enum: valid, and the
    same bytes whatever order the enum and the item's properties are listed in."""
    answers = [lm.generate_structured(PROMPT, spec(labelled(seed, bounds)), max_new_tokens=160, show=True) for seed in range(3)]
    assert answers[0].finish_reason == "stop"
    jsonschema.validate(json.loads(answers[0].text), labelled(0, bounds))
    assert all(a.text == answers[0].text and a.token_ids == answers[0].token_ids for a in answers)


def test_arrays_of_objects_nest(lm):
    """An item that holds an array of objects: the inner places decided as the outer are."""
    def schema(seed: int) -> dict:
        inner = {"type": "object", "properties": {"tag": {"enum": random.Random(seed).sample(LABELS, 4)}}, "required": ["tag"]}
        outer = {"type": "object", "properties": {"parts": {"type": "array", "items": inner, "minItems": 1, "maxItems": 2}}, "required": ["parts"]}
        return {"type": "array", "items": outer, "minItems": 2, "maxItems": 2}

    [rows] = plan.plan(spec(schema(0)), True).steps
    assert any(isinstance(s, plan.Objects) for s in rows.item)
    answers = [lm.generate_structured(PROMPT, spec(schema(seed)), max_new_tokens=96) for seed in range(3)]
    assert answers[0].finish_reason == "stop"
    jsonschema.validate(json.loads(answers[0].text), schema(0))
    assert all(a.token_ids == answers[0].token_ids for a in answers)


def test_a_pydantic_list_of_objects_parses():
    class Row(BaseModel):
        label: Literal["yes", "no"]
        n: int

    class Table(BaseModel):
        rows: list[Row]

    [rows] = [s for s in plan.plan(spec(Table), True).steps if isinstance(s, plan.Objects)]  # items a $ref into $defs
    assert plan.Pick(('"no"', '"yes"'), "schema.properties.rows.items.properties.label") in rows.item


def test_an_array_of_objects_cut_by_the_tokens_is_the_whole_answer_cut(lm):
    schema = labelled(0, {"minItems": 2, "maxItems": 2})
    whole = lm.generate_structured(PROMPT, spec(schema), max_new_tokens=160)
    assert whole.finish_reason == "stop"
    for budget in (1, 12, len(whole.token_ids) - 1):
        cut = lm.generate_structured(PROMPT, spec(schema), max_new_tokens=budget)
        assert cut.finish_reason == "length" and cut.token_ids == whole.token_ids[:budget]


@pytest.mark.parametrize("bad, words", [
    ({"type": "array", "items": {"type": "object", "properties": {"a": {"enum": [1, 2]}}}, "uniqueItems": True}, "schema.uniqueItems: not supported"),
    ({"type": "object", "properties": {"t": {"type": "array", "items": {"type": "object", "properties": {}}, "minItems": 3, "maxItems": 2}}},
     "schema.properties.t: no array satisfies it"),
])
def test_an_array_of_objects_it_cannot_write_is_refused(bad, words):
    with pytest.raises(SchemaError) as e:
        plan.plan(spec(bad), True)
    assert str(e.value).startswith(words)


def test_the_schema_shown_reads_the_same_in_any_order(lm):
    """The schema before the prompt: its enum a set, its keys sorted; the model reads the same tokens."""
    from setllm.core.text.prompt import as_prompt
    from setllm.structured.shown import with_shown

    reads = {tuple(lm.encode(with_shown(as_prompt(PROMPT), spec(permuted(SCHEMA, seed)), lm.exact)).input_ids) for seed in range(3)}
    assert len(reads) == 1


def test_permuting_a_choice_list_changes_no_byte(lm):
    texts = {lm.generate(PROMPT, choice=random.Random(seed).sample(LABELS, 4), show_schema=True) for seed in range(4)}
    assert len(texts) == 1 and texts <= set(LABELS)


def test_the_pick_is_the_best_scored_value(lm):
    """A root choice writes the value the scoring driver scores highest after the same prompt."""
    prompt = lm.encode(PROMPT)
    request = lm.encoded_request(prompt, [lm.tokenizer.encode(v, add_special_tokens=False) + [lm.tokenizer.eos_token_id] for v in LABELS])
    [scores] = lm.score_encoded([request])
    best = max(range(len(LABELS)), key=lambda i: (scores[i].logprob, [-ord(c) for c in LABELS[i]]))
    assert lm.generate(PROMPT, choice=LABELS) == LABELS[best]


SCHEMAS = [
    {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 3},
    {"type": "object", "properties": {"a": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 5}, {"type": "null"}]},
                                      "b": {"$ref": "#/$defs/B"}}, "required": ["a", "b"], "$defs": {"B": {"enum": [1, "x", None]}}},
    {"type": "object", "properties": {"child": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 3},
                                                                               "flag": {"type": ["boolean", "null"]}},
                                                "required": ["name", "flag"]}}, "required": ["child"]},
    {"type": "object", "properties": {"n": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["n"], "additionalProperties": False},
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=["array", "refs-union", "nested", "number"])
def test_answers_validate(lm, schema):
    out = lm.generate_structured(PROMPT, spec(schema), max_new_tokens=64)
    if out.finish_reason == "stop":
        jsonschema.validate(json.loads(out.text), schema)
    else:  # a random model may write a long number: then it says so, never a wrong answer
        assert len(out.token_ids) == 64


def test_pydantic_model_and_regex(lm):
    class Verdict(BaseModel):
        label: Literal["yes", "no"]
        sure: bool

    out = lm.generate(PROMPT, schema=Verdict, max_new_tokens=48)
    assert isinstance(out, Verdict)
    text = lm.generate(PROMPT, regex="[ab]{2,3}", max_new_tokens=8)
    assert 2 <= len(text) <= 3 and set(text) <= {"a", "b"}


def test_length_is_said(lm):
    with pytest.raises(AnswerError, match="max_new_tokens ran out"):
        lm.generate(PROMPT, schema=SCHEMA, max_new_tokens=3)
    out = lm.generate_structured(PROMPT, spec(SCHEMA), max_new_tokens=3)
    assert out.finish_reason == "length" and len(out.token_ids) == 3


@pytest.mark.parametrize("bad, where", [
    ({"type": "strin"}, "schema.type"),
    ({"type": "object", "properties": {"a": {"enum": []}}}, "schema.properties.a: no value"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}, "schema.properties.a.$ref"),
    ({"type": "object", "properties": {"a": {"$ref": "https://example.org/s.json"}}}, "schema.properties.a.$ref"),
    ({"type": "object", "properties": {"a": {"const": 1, "type": "string"}}}, "schema.properties.a"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "(unclosed"}}}, "schema.properties.a"),
    ({"a": json.loads("[" * 40 + "]" * 40)}, "schema.a[0]"),
    ({"description": "x" * 70000}, "schema: 70"),
])
def test_bad_schema_is_one_error_naming_the_path(lm, bad, where):
    with pytest.raises(SchemaError) as e:
        lm.generate(PROMPT, schema=bad)
    assert str(e.value).startswith(where) and "\n" not in str(e.value)


def test_bad_choice_regex_and_grammar():
    for kwargs, words in [({"choice": ["a", "a"]}, "distinct"), ({"choice": "ab"}, "list"), ({"regex": "[a-"}, "regex: the grammar engine"),
                          ({"grammar": "start: nothing"}, "grammar: the grammar engine"), ({}, "give one of")]:
        with pytest.raises((SchemaError, ValueError), match=words):
            plan.plan(spec(**kwargs), True)


def test_a_plan_is_compiled_once():
    schema = {"type": "object", "properties": {"z": {"type": "integer"}}, "required": ["z"]}
    plan.plan(spec(schema), True)
    hits = plan._plan.cache_info().hits
    plan.plan(spec(json.loads(json.dumps(schema))), True)
    assert plan._plan.cache_info().hits == hits + 1
    assert plan._plan.cache_info().maxsize is not None  # bounded


TOOLS = [{"type": "function", "function": {"name": n, "description": f"The {n} of a fruit.", "parameters": {
    "type": "object", "properties": {"fruit": {"enum": LABELS}, "fresh": {"type": "boolean"}}, "required": ["fruit", "fresh"]}}}
    for n in ("colour", "price", "weight")]


def test_a_tool_call_is_order_free(lm):
    calls = [lm.call_tool(PROMPT, random.Random(seed).sample(TOOLS, 3), "required", max_new_tokens=64) for seed in range(3)]
    assert len({(c.name, c.arguments, tuple(c.answer.token_ids)) for c in calls}) == 1
    assert set(json.loads(calls[0].arguments)) == {"fruit", "fresh"}
    named = lm.call_tool(PROMPT, TOOLS, "weight", max_new_tokens=64)
    assert named.name == "weight" and named.answer.text == f'{{"name":"weight","arguments":{named.arguments}}}'


def test_every_token_of_a_call_counts_against_max_new_tokens(lm):
    whole = lm.call_tool(PROMPT, TOOLS, "required", max_new_tokens=64)
    assert whole.answer.finish_reason == "stop" and len(whole.answer.token_ids) <= 64
    for budget in (1, 5, 12, len(whole.answer.token_ids) - 1):  # the head alone is more than the first two (the tiny tokenizer's bytes)
        cut = lm.call_tool(PROMPT, TOOLS, "required", max_new_tokens=budget)
        assert cut.name == whole.name and cut.answer.finish_reason == "length" and len(cut.answer.token_ids) <= budget
        assert whole.answer.token_ids[: len(cut.answer.token_ids)] == cut.answer.token_ids  # the same call, cut
    exact = lm.call_tool(PROMPT, TOOLS, "required", max_new_tokens=len(whole.answer.token_ids))
    assert exact.answer == whole.answer  # a budget that holds the call exactly writes it whole


def _schemas():
    """A bounded family of schemas: objects of enums, consts, booleans, bounded numbers and
    strings, nullable values, arrays and nested objects."""
    from hypothesis import strategies as st

    words = st.sampled_from(["a", "bb", "c d", "é", "x\"y", "1"])
    leaf = st.one_of(
        st.lists(words, min_size=1, max_size=4, unique=True).map(lambda v: {"enum": v}),
        st.sampled_from([{"type": "boolean"}, {"type": "null"}, {"const": 3}, {"type": ["boolean", "null"]},
                         {"type": "integer", "minimum": 0, "maximum": 9}, {"type": "string", "maxLength": 3},
                         {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 3}, {"type": "null"}]}]),
    )

    def objects(children):
        return st.dictionaries(st.sampled_from(["k", "name", "z", "Ω", "b c"]), children, min_size=1, max_size=3).map(
            lambda props: {"type": "object", "properties": props, "required": sorted(props), "additionalProperties": False})

    value = st.recursive(leaf, lambda c: st.one_of(objects(c), c.map(lambda items: {"type": "array", "items": items, "maxItems": 2})),
                         max_leaves=5)
    return objects(value)


def test_fuzzed_schemas_answer_valid_json(lm):
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(_schemas())
    def check(schema):
        out = lm.generate_structured(PROMPT, spec(schema), max_new_tokens=96)
        if out.finish_reason == "stop":  # else the tokens ran out, and it says so
            jsonschema.validate(json.loads(out.text), schema)
        else:
            assert len(out.token_ids) == 96

    check()
