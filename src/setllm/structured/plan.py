"""What a structured answer is made of, decided from its constraint once: a :class:`Plan` of
steps, each text written as is (:class:`Text`), a finite set of values decided by scoring
(:class:`Pick`), an array of such values decided item by item, its end included, by scoring
(:class:`Items`), an array of objects whose every item is written by the steps of one object
(:class:`Objects`), or a piece generated under a grammar (:class:`Free`).

Why a plan and not one grammar for the whole answer: wherever a schema allows a finite set of
values (``enum``, ``const``, a boolean, a ``Literal``, a ``choice`` list) the value must not
be sampled token by token, since a model reading the list in order prefers its first value.
Such a place is a :class:`Pick`: every allowed value is scored as the continuation there, each
alone after the same text (the scoring driver gives each the same bits whatever else it scores),
so the best cannot depend on the order the schema lists them in. An object's keys are known
text; under exact mode they are written sorted, so the properties' order cannot change a byte
either. An array of such objects is decided the same way: at each place the end and the
next item's opening are scored, so an enum inside an item is a :class:`Pick` too. What is left
(strings, numbers, other arrays, anything a grammar must decide) is a
:class:`Free` piece whose grammar ends with the text written after it, so the model itself ends
a number or a string where the schema lets it.

Torch-free: a request's plan is made (and its schema refused, with the path of what is wrong)
before any model work. llguidance checks every grammar here.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Union

from . import engine
from .spec import MAX_DEPTH, SchemaError, Spec, at

JSON_SEPARATORS = (",", ":")  # compact, as OpenAI writes JSON: no text the plan writes ends in a space (BPE would merge it with what follows)
ROOT = "__root__"  # where a $ref into the root goes when a piece carries the root's definitions
_BEYOND_WALK = ("anyOf", "oneOf", "allOf", "not", "if", "patternProperties", "dependentRequired", "dependentSchemas",
                "propertyNames", "minProperties", "maxProperties", "unevaluatedProperties", "dependencies")


@dataclass(frozen=True)
class Text:
    """Text written as is (a key, a brace)."""

    text: str


@dataclass(frozen=True)
class Pick:
    """A finite set of values, each as its JSON text (or a ``choice``'s text), sorted: the
    best-scoring one is written. ``last``: it ends the answer (scored with EOS after it, as
    :meth:`setllm.SetLLM.choose` scores an option)."""

    values: tuple[str, ...]
    path: str
    last: bool = False


@dataclass(frozen=True)
class Items:
    """An array whose items come from one finite set of values (sorted JSON texts), written
    ``[`` first: at each place the end (``]``, where ``min_items`` allow it) and every value
    still allowed (after ``,`` past the first) are scored as the continuation, and the best is
    written, until the end wins or ``max_items`` are written (None: until the tokens run out).
    ``unique``: a value written is not offered again."""

    values: tuple[str, ...]
    path: str
    min_items: int = 0
    max_items: int | None = None
    unique: bool = False


@dataclass(frozen=True)
class Free:
    """A piece generated under an llguidance grammar, the text after it included."""

    grammar: str
    path: str


@dataclass(frozen=True)
class Objects:
    """An array of objects, written ``[`` first: at each place the end (``]``, where
    ``min_items`` allow it) and the next item's opening (``item[0]``, the ``{`` and its first key,
    after ``,`` past the first) are scored as the continuation, as :class:`Items` scores its
    places; where the opening wins, the item's other steps write the rest of it. Until the end
    wins or ``max_items`` are written (None: until the tokens run out)."""

    item: tuple[Step, ...]  # an object's steps: a Text first, then its values' steps
    path: str
    min_items: int = 0
    max_items: int | None = None


Step = Union[Text, Pick, Items, Objects, Free]
# What an array may carry and still be written by Items or Objects (the rest: a grammar's).
_ITEMS_KEYS = {"type", "items", "minItems", "maxItems", "uniqueItems", "description", "title"}


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    json: bool  # the answer is JSON (parsed and validated after), else text


def plan(spec: Spec, exact: bool) -> Plan:
    """The plan of ``spec`` (made once per process per spec and reading: a bounded cache)."""
    return _plan(spec.kind, spec.key, exact)


@functools.lru_cache(maxsize=256)
def _plan(kind: str, key: str, exact: bool) -> Plan:
    value = json.loads(key)
    if kind == "choice":
        return Plan((Pick(tuple(sorted(value)), "choice", last=True),), False)
    if kind in ("regex", "grammar"):
        grammar = engine.from_regex(value) if kind == "regex" else engine.from_lark(value)
        engine.check(grammar, kind)
        return Plan((Free(grammar, kind),), False)
    steps = _merge(list(_walk(value, value, "schema", 0, (), exact)))
    return Plan(tuple(steps), True)


def _walk(schema: Any, root: dict, path: str, depth: int, stack: tuple[str, ...], exact: bool) -> Iterator[Step]:
    """The steps that write one value of ``schema``; ``stack``: the $refs being expanded."""
    if depth > MAX_DEPTH:
        raise SchemaError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    if (ref := _only_ref(schema, stack)) is not None:
        yield from _walk(_resolve(root, ref, path), root, path, depth + 1, (*stack, ref), exact)
        return
    values = finite(schema, root, path, stack)
    if values is not None:
        yield Text(values[0]) if len(values) == 1 else Pick(values, path)
    elif (items := _finite_items(schema, root, path, stack)) is not None:
        yield items
    elif (objects := _object_items(schema, root, path, depth, stack, exact)) is not None:
        yield objects
    elif _walkable(schema):
        yield from _object(schema, root, path, depth, stack, exact)
    else:
        yield _Open(carried(schema, root), path)


def _finite_items(schema: Any, root: dict, path: str, stack: tuple[str, ...]) -> Items | None:
    """An array of one finite set of values (an enum's, a Literal's, booleans), as :class:`Items`."""
    if not isinstance(schema, dict) or schema.get("type") != "array" or not set(schema) <= _ITEMS_KEYS:
        return None
    values = finite(schema.get("items"), root, f"{path}.items", stack) if isinstance(schema.get("items"), dict) else None
    if values is None:
        return None
    unique = schema.get("uniqueItems") is True
    return Items(values, path, *_bounds(schema, path, len(values) if unique else None), unique)


def _object_items(schema: Any, root: dict, path: str, depth: int, stack: tuple[str, ...], exact: bool) -> Objects | None:
    """An array of objects whose keys are known, as :class:`Objects`: each item planned as an
    object is (keys as text, finite values picked, the rest free)."""
    if not isinstance(schema, dict) or schema.get("type") != "array" or not set(schema) <= _ITEMS_KEYS:
        return None
    item, item_stack = _through_refs(schema.get("items"), root, f"{path}.items", stack)
    if not _walkable(item):
        return None
    if schema.get("uniqueItems") is True:  # an item's free strings are written before any could be compared
        raise SchemaError(f"{path}.uniqueItems: not supported over objects (only over an enum's, a const's or booleans' values)")
    steps = _merge(list(_object(item, root, f"{path}.items", depth + 1, item_stack, exact)))
    return Objects(tuple(steps), path, *_bounds(schema, path))


def _only_ref(schema: Any, stack: tuple[str, ...]) -> str | None:
    """The $ref that is all ``schema`` says (but for its description), where it is not being expanded already."""
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    return ref if ref is not None and ref not in stack and set(schema) <= {"$ref", "description", "title"} else None


def _through_refs(schema: Any, root: dict, path: str, stack: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
    """``schema`` past the $refs that are all it says, and the $refs followed."""
    while (ref := _only_ref(schema, stack)) is not None:
        schema, stack = _resolve(root, ref, path), (*stack, ref)
    return schema, stack


def _bounds(schema: dict, path: str, most: int | None = None) -> tuple[int, int | None]:
    """An array's minItems and maxItems (at most ``most``: as many as there are values to write)."""
    lo, hi = schema.get("minItems", 0), schema.get("maxItems")
    if most is not None:
        hi = most if hi is None else min(hi, most)
    if hi is not None and lo > hi:
        raise SchemaError(f"{path}: no array satisfies it (minItems {lo} is more than it can hold)")
    return lo, hi


def _walkable(schema: Any) -> bool:
    """An object whose keys are known: written key by key."""
    if not isinstance(schema, dict) or schema.get("type") != "object" or not isinstance(schema.get("properties"), dict):
        return False
    if any(k in schema and not (k == "unevaluatedProperties" and schema[k] is False) for k in _BEYOND_WALK):
        return False
    return set(schema.get("required", [])) <= set(schema["properties"])


def _object(schema: dict, root: dict, path: str, depth: int, stack: tuple[str, ...], exact: bool) -> Iterator[Step]:
    props = {k: v for k, v in schema["properties"].items() if v is not False}  # a property that can hold nothing is left out
    keys = sorted(props) if exact else list(props)
    yield Text("{")
    for i, key in enumerate(keys):
        yield Text((JSON_SEPARATORS[0] if i else "") + json.dumps(key, ensure_ascii=False) + JSON_SEPARATORS[1])
        yield from _walk(props[key], root, f"{path}.properties.{key}", depth + 1, stack, exact)
    yield Text("}")


def finite(schema: Any, root: dict, path: str, stack: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The JSON texts of every value ``schema`` allows where they are few and known (``const``,
    ``enum``, a boolean, null, a union of those), sorted; else None."""
    values = _finite_values(schema, root, path, stack)
    if values is None:
        return None
    texts = sorted({json.dumps(v, ensure_ascii=False, separators=JSON_SEPARATORS) for v in values if _valid(v, schema, root)})
    if not texts:
        raise SchemaError(f"{path}: no value satisfies it (its enum or const disagrees with the rest of it)")
    return tuple(texts)


def _finite_values(schema: Any, root: dict, path: str, stack: tuple[str, ...]) -> list | None:
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return [schema["const"]]
    if "enum" in schema:
        return list(schema["enum"])
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if kinds and set(kinds) <= {"boolean", "null"}:
        return [v for k in kinds for v in ((True, False) if k == "boolean" else (None,))]
    ref = schema.get("$ref")
    if ref is not None and ref not in stack:
        return _finite_values(_resolve(root, ref, path), root, path, (*stack, ref))
    for union in ("anyOf", "oneOf"):
        if isinstance(schema.get(union), list):
            branches = [_finite_values(b, root, f"{path}.{union}[{i}]", stack) for i, b in enumerate(schema[union])]
            return None if any(b is None for b in branches) else [v for b in branches for v in b]
    return None


def _valid(value: Any, schema: dict, root: dict) -> bool:
    """Whether ``value`` satisfies ``schema`` (its $refs read in ``root``)."""
    import jsonschema

    return jsonschema.Draft202012Validator(carried(schema, root)).is_valid(value)


def _resolve(root: dict, ref: str, path: str) -> Any:
    """A local ``$ref`` (``#`` or ``#/a/b``) read in ``root``."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise SchemaError(f"{path}.$ref: only references inside the schema (#/...) are supported, got {ref!r}")
    node: Any = root
    for part in filter(None, ref[1:].split("/")):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise SchemaError(f"{path}.$ref: {ref!r} points at nothing in the schema")
    return node


def carried(schema: Any, root: dict) -> Any:
    """``schema`` as a schema of its own: the root's definitions carried along, and a $ref
    that pointed into the root's other parts pointing into a copy of the root beside them."""
    if schema is root or not isinstance(schema, dict):
        return schema
    out = _rerooted(copy.deepcopy(schema))
    defs = {k: _rerooted(copy.deepcopy(v)) for k, v in root.get("$defs", {}).items()}
    if f"#/$defs/{ROOT}" in json.dumps([out, defs]):
        defs[ROOT] = _rerooted(copy.deepcopy(root))
    if defs:
        out["$defs"] = {**defs, **out.get("$defs", {})}
    if "definitions" in root:
        out.setdefault("definitions", root["definitions"])
    return out


def _rerooted(node: Any) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#") and not ref.startswith(("#/$defs/", "#/definitions/")):
            node["$ref"] = f"#/$defs/{ROOT}" + ref[1:]
        for v in node.values():
            _rerooted(v)
    elif isinstance(node, list):
        for v in node:
            _rerooted(v)
    return node


@dataclass(frozen=True)
class _Open:
    """A value left to a grammar, before :func:`_merge` joins it to the text after it."""

    schema: Any
    path: str


def _merge(steps: list) -> list[Step]:
    """Neighbouring texts joined; each open value a :class:`Free` whose grammar ends with the
    text after it (then not written apart)."""
    out: list[Step] = []
    i = 0
    while i < len(steps):
        step = steps[i]
        if isinstance(step, _Open):
            after = steps[i + 1].text if i + 1 < len(steps) and isinstance(steps[i + 1], Text) else ""
            if after:
                i += 1
            out.append(Free(_free_grammar(step, after), step.path))
        elif isinstance(step, Text) and out and isinstance(out[-1], Text):
            out[-1] = Text(out[-1].text + step.text)
        else:
            out.append(step)
        i += 1
    return out


def _free_grammar(step: _Open, after: str) -> str:
    grammar = engine.from_schema(step.schema, after)
    engine.check(grammar, step.path)
    return grammar


__all__ = ["Free", "Items", "Objects", "Pick", "Plan", "Step", "Text", "at", "finite", "plan"]
