"""A structured-output request's constraint, checked: a JSON schema (a dict, or a pydantic
model class), a regular expression, a ``choice`` list or a Lark grammar (:func:`spec`); the
bounds on a schema; and the parsed value of an answer (:meth:`Spec.parse`). Torch-free: the
library, the CLI and the server build a :class:`Spec` the same way and refuse the same input
with the same words (:class:`SchemaError`, one line naming the path in the schema)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError

MAX_SCHEMA_BYTES = 65536  # a schema's JSON text: more is refused before any work
MAX_NESTING = 32  # levels of objects and lists in a schema's own text
MAX_DEPTH = 16  # levels of values an answer nests (objects in objects, $refs followed)
MAX_CHOICES = 256  # values of one choice list or enum: each is a scored option


class SchemaError(InputError):
    """A constraint that cannot be used; the message names where in it (``schema.properties.x``)."""


class AnswerError(InputError):
    """The answer could not be completed as the constraint asks (the tokens ran out first)."""

    def __init__(self, message: str, text: str):
        super().__init__(message)
        self.text = text


@dataclass(frozen=True)
class Spec:
    """A checked constraint. ``kind``: ``json`` (a JSON schema), ``regex``, ``choice`` or
    ``grammar`` (Lark, as llguidance reads it); ``key``: its JSON text (the cache key of its
    plan); ``model``: the pydantic class an answer is parsed into, if one was given."""

    kind: str
    key: str
    model: Any = field(default=None, compare=False)

    @property
    def value(self) -> Any:
        return json.loads(self.key)

    def parse(self, text: str) -> Any:
        """The answer's value: a JSON answer parsed and validated against the schema (into the
        pydantic model, if one was given); any other answer as its text."""
        if self.kind != "json":
            return text
        if self.model is not None:
            return self.model.model_validate_json(text)
        import jsonschema

        value = json.loads(text)
        jsonschema.validate(value, self.value)
        return value


def spec(schema: Any = None, *, regex: str | None = None, choice: Any = None, grammar: str | None = None, where: str = "schema") -> Spec:
    """The one constraint of a request, checked (at most one of them may be given)."""
    given = [(n, v) for n, v in (("schema", schema), ("regex", regex), ("choice", choice), ("grammar", grammar)) if v is not None]
    if len(given) != 1:
        raise InputError(f"give one of schema, regex, choice or grammar, got {', '.join(n for n, _ in given) or 'none'}")
    kind, value = given[0]
    if kind == "choice":
        return Spec("choice", json.dumps(_choices(value, "choice")))
    if kind in ("regex", "grammar"):
        if not isinstance(value, str) or not value:
            raise SchemaError(f"{kind} must be non-empty text, got {type(value).__name__}")
        return Spec(kind, json.dumps(value))
    model = value if isinstance(value, type) and hasattr(value, "model_json_schema") else None
    if model is not None:
        value = model.model_json_schema()
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise SchemaError(f"{where} must be a JSON schema (an object) or a pydantic model class, got {type(value).__name__}")
    text = json.dumps(value, ensure_ascii=False)
    if len(text.encode()) > MAX_SCHEMA_BYTES:
        raise SchemaError(f"{where}: {len(text.encode())} bytes of JSON; at most {MAX_SCHEMA_BYTES} are read")
    check_schema(value, where)
    return Spec("json", text, model)


def _choices(value: Any, where: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise SchemaError(f"{where} must be a list of non-empty strings")
    if not 1 <= len(set(value)) <= MAX_CHOICES or len(set(value)) != len(value):
        raise SchemaError(f"{where}: 1 to {MAX_CHOICES} distinct strings, got {len(value)} ({len(set(value))} distinct)")
    return list(value)


def check_schema(schema: dict, where: str = "schema") -> None:
    """Refuse a schema that is not one (by its own meta-schema, Draft 2020-12 if it names
    none), nests deeper than :data:`MAX_NESTING` or lists more than :data:`MAX_CHOICES`
    values in an enum; the error names the path."""
    import jsonschema

    _check_nesting(schema, where, 0)
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        raise SchemaError(f"{at(where, e.path)}: {e.message}") from None


def _check_nesting(node: Any, path: str, depth: int) -> None:
    if depth > MAX_NESTING:
        raise SchemaError(f"{path}: nested deeper than {MAX_NESTING} levels")
    if isinstance(node, dict):
        if isinstance(node.get("enum"), list) and len(node["enum"]) > MAX_CHOICES:
            raise SchemaError(f"{path}.enum: at most {MAX_CHOICES} values, got {len(node['enum'])}")
        for k, v in node.items():
            _check_nesting(v, f"{path}.{k}", depth + 1)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _check_nesting(v, f"{path}[{i}]", depth + 1)


def at(where: str, parts) -> str:
    """A path in a schema as the errors name it: ``schema.properties.label.enum[0]``."""
    return where + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)
