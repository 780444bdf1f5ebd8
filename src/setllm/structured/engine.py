"""The grammar engine: llguidance (chosen over xgrammar by a measurement on the embedded
tokenizer, docs/structured.md: a schema compiles in about 1 ms, lazily, against 0.6 to 32 ms;
its wheel has no dependencies, where xgrammar's pulls triton). Grammars are llguidance's
text form, made from a JSON schema, a regular expression or a Lark grammar; a :class:`Guide`
masks the logits of one decoding to the tokens the grammar allows.

Shapes: V the model's vocabulary (its logits' width, which may exceed the tokenizer's).
"""

from __future__ import annotations

import json
import weakref
from typing import Any

from .spec import SchemaError

INSTALL = "structured outputs need llguidance: pip install 'setllm[structured]' (llguidance==1.9.1)"
# Compact JSON, as the plan's own text writes it: no free whitespace (a model could pad forever).
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}


def _llg():
    try:
        import llguidance
    except ImportError:
        raise SchemaError(INSTALL) from None
    return llguidance


def from_schema(schema: Any, after: str = "") -> str:
    """A grammar of one JSON value of ``schema``, then the text ``after`` (the model writes it
    too, so that it ends a number or a string where the schema lets it)."""
    llg = _llg()
    if not after:
        return llg.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
    # Lark's %json takes the schema inline, with the compile options under "x-guidance".
    value = json.dumps({**schema, "x-guidance": JSON_OPTIONS} if isinstance(schema, dict) else schema)
    return llg.LLMatcher.grammar_from_lark(f"start: value AFTER\nvalue: %json {value}\nAFTER: {json.dumps(after)}\n")


def from_regex(regex: str) -> str:
    return _llg().LLMatcher.grammar_from_regex(regex)


def from_lark(lark: str) -> str:
    return _llg().LLMatcher.grammar_from_lark(lark)


def check(grammar: str, path: str) -> None:
    """Refuse a grammar llguidance cannot compile, naming ``path``."""
    problem = _llg().LLMatcher.validate_grammar(grammar)
    if problem:
        raise SchemaError(f"{path}: the grammar engine cannot compile it: {problem.strip().splitlines()[0]}")


_TOKENIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def tokenizer(hf_tokenizer, vocab: int):
    """llguidance's view of a Hugging Face tokenizer for a vocabulary of ``vocab`` logits,
    made once per tokenizer (about a second)."""
    per = _TOKENIZERS.setdefault(hf_tokenizer, {})
    if vocab not in per:
        import llguidance.hf

        per[vocab] = llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=vocab)
    return per[vocab]


class Guide:
    """One decoding under ``grammar``: :meth:`mask` before each sample, :meth:`accept` after
    (the processor :func:`setllm.core.forward.generation.decode_after_prefill` takes)."""

    def __init__(self, hf_tokenizer, vocab: int, grammar: str):
        import torch

        llg = _llg()
        self.matcher = llg.LLMatcher(tokenizer(hf_tokenizer, vocab), grammar, log_level=0)
        self.vocab = vocab
        self.bits = torch.full((1, (vocab + 31) // 32), -1, dtype=torch.int32)
        self.shifts = torch.arange(32, dtype=torch.int32)

    def mask(self, logits):
        """``logits [1, V]`` with every token the grammar forbids at -inf."""
        import llguidance.torch

        llguidance.torch.fill_next_token_bitmask(self.matcher, self.bits)
        allowed = ((self.bits[:, :, None] >> self.shifts) & 1).reshape(1, -1)[:, : self.vocab].bool()
        return logits.masked_fill(~allowed.to(logits.device), float("-inf"))

    def accept(self, token: int) -> None:
        if not self.matcher.consume_token(token):
            raise RuntimeError(f"the grammar engine refused a token it allowed: {self.matcher.get_error()}")
