"""Structured outputs: answers under a JSON schema, a regular expression, a ``choice`` list or
a Lark grammar, with every finite set of values decided by scoring, order-free
(:mod:`.plan`), through the project's own decoding loop (:mod:`.decode`)."""

from .spec import AnswerError, SchemaError, Spec, spec

__all__ = ["AnswerError", "SchemaError", "Spec", "spec"]
