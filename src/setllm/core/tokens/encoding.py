"""Tokenize a set prompt into ids, per-token set/element ids and positions.

Every text segment and every set element is tokenized on its own, without special tokens:
an element must get the same tokens wherever it sits in the set, or permuting the set would
change the input. The BOS token, if the tokenizer uses one, is added once at the start.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...errors import InputError, SetLLMWarning
from ..layout.positions import NOT_IN_SET, sbp_positions, setpe_positions
from ..layout.variants import PositionKind
from ..text.prompt import PromptLike, Set, SetPrompt, as_prompt

_SENTINEL = "\u2063SETLLM_USER_CONTENT\u2063"


@dataclass
class EncodedPrompt:
    """A tokenized prompt. All lists have one entry per token.

    Attributes:
        input_ids: token ids.
        set_ids: index of the set a token belongs to (0, 1, ... in prompt order), or -1.
        element_ids: index of the element within its set, or -1 outside sets.
    """

    input_ids: list[int]
    set_ids: list[int]
    element_ids: list[int]
    prompt: SetPrompt | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.input_ids)

    @classmethod
    def plain(cls, ids: Sequence[int]) -> EncodedPrompt:
        """Token ids read as plain text (no sets)."""
        return cls(list(ids), [NOT_IN_SET] * len(ids), [NOT_IN_SET] * len(ids))

    def positions(self, scheme: PositionKind) -> tuple[list[int], int]:
        """Position ids under ``scheme`` and the position the response starts at."""
        n = len(self.input_ids)
        if scheme == "pe":
            return list(range(n)), n
        if scheme == "nope":
            return [0] * n, 0
        if scheme == "setpe":
            return setpe_positions(self.set_ids, self.element_ids)
        if scheme == "sbp":
            return sbp_positions(self.set_ids, self.element_ids)
        raise ValueError(f"unknown position scheme {scheme!r}")


class PromptEncoder:
    """Turns set prompts into :class:`EncodedPrompt` for one tokenizer.

    Args:
        tokenizer: a Hugging Face tokenizer.
        chat: render the tokenizer's chat template around the prompt (as the user turn);
            sets stay sets inside it.
        system: optional system message for chat mode.
    """

    def __init__(self, tokenizer, chat: bool = False, system: str | None = None):
        self.tokenizer = tokenizer
        self.chat = chat
        self.system = system
        self._first, self._rest = _segment_tokenizers(tokenizer)
        self.bos = _bos_prefix(tokenizer)
        if chat and not getattr(tokenizer, "chat_template", None):
            raise InputError("chat mode needs a tokenizer with a chat template; this one has none")

    def tokenize(self, text: str, first: bool = False) -> list[int]:
        """Token ids of one segment, no special tokens added.

        SentencePiece tokenizers that prepend a space would give every separately tokenized
        segment a spurious leading '▁'; only the very first segment gets it, as in joined text.
        """
        if not text:
            return []
        return self._first(text) if first else self._rest(text)

    def encode(self, prompt: PromptLike) -> EncodedPrompt:
        prompt = as_prompt(prompt)
        _warn_on_boundaries(prompt)
        segments: list = list(prompt.segments)
        bos = list(self.bos)
        if self.chat:
            before, after = self._chat_frame()
            segments = [before, *segments, after]
            if before.startswith(self.tokenizer.bos_token or "\0"):
                bos = []  # the template writes BOS itself
        ids, set_ids, elem_ids = list(bos), [NOT_IN_SET] * len(bos), [NOT_IN_SET] * len(bos)
        set_index = 0
        for seg in segments:
            first = len(ids) == len(bos)
            if isinstance(seg, Set):
                for j, element in enumerate(seg.elements):
                    toks = self.tokenize(element, first)
                    ids += toks
                    set_ids += [set_index] * len(toks)
                    elem_ids += [j] * len(toks)
                set_index += 1
            else:
                toks = self.tokenize(seg, first)
                ids += toks
                set_ids += [NOT_IN_SET] * len(toks)
                elem_ids += [NOT_IN_SET] * len(toks)
        return EncodedPrompt(ids, set_ids, elem_ids, prompt)

    def _chat_frame(self) -> tuple[str, str]:
        messages = [{"role": "user", "content": _SENTINEL}]
        if self.system:
            messages.insert(0, {"role": "system", "content": self.system})
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        before, sep, after = text.partition(_SENTINEL)
        if not sep:
            raise InputError("the chat template does not contain the user message verbatim; chat mode cannot keep sets intact")
        return before, after


def _bos_prefix(tokenizer) -> list[int]:
    """The special tokens the tokenizer puts in front of text (usually BOS, or nothing)."""
    with_special = tokenizer("x").input_ids
    without = tokenizer("x", add_special_tokens=False).input_ids
    n = len(with_special) - len(without)
    return list(with_special[:n]) if n > 0 and with_special[n:][: len(without)] == without else []


def _segment_tokenizers(tokenizer):
    """Two encode functions: one for the first segment, one for all others."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        fn = lambda t: tokenizer(t, add_special_tokens=False).input_ids  # noqa: E731
        return fn, fn
    first = lambda t: backend.encode(t, add_special_tokens=False).ids  # noqa: E731
    spec = json.loads(backend.to_str())
    if not _disable_prefix_space(spec):
        return first, first
    from tokenizers import Tokenizer

    no_prefix = Tokenizer.from_str(json.dumps(spec))
    return first, lambda t: no_prefix.encode(t, add_special_tokens=False).ids


def _disable_prefix_space(spec: dict) -> bool:
    """Turn off SentencePiece's dummy prefix in a tokenizer.json spec; True if one was on."""
    changed = False
    for part in _walk(spec.get("pre_tokenizer")):
        if part.get("type") == "Metaspace" and part.get("prepend_scheme", "always") != "never":
            part["prepend_scheme"] = "never"
            changed = True
    normalizer = spec.get("normalizer")
    if normalizer and normalizer.get("type") == "Prepend":
        spec["normalizer"] = None
        changed = True
    elif normalizer and normalizer.get("type") == "Sequence":
        kept = [n for n in normalizer["normalizers"] if n.get("type") != "Prepend"]
        changed |= len(kept) != len(normalizer["normalizers"])
        normalizer["normalizers"] = kept
    return changed


def _walk(node):
    if isinstance(node, dict):
        yield node
        for key in ("pretokenizers", "normalizers"):
            for child in node.get(key) or []:
                yield from _walk(child)


def _warn_on_boundaries(prompt: SetPrompt) -> None:
    """Warn if a segment ends with whitespace that joined text would merge forward (the last
    one too: the response is joined to it). Every such prompt warns; the warnings filters
    say how often it is shown (Python's default: once per calling line; the CLI: once), so a
    server can tell each request that has the problem (setllm.serve.warned)."""
    for seg in prompt.segments:
        parts = [seg] if isinstance(seg, str) else list(seg.elements)
        if any(p.endswith((" ", "\t", "\n\n")) for p in parts):
            warnings.warn(
                "a prompt segment ends with a space or several newlines; tokenized on its own it "
                "differs from the joined text. Put that whitespace at the start of the next segment.",
                SetLLMWarning, stacklevel=3,
            )
            return
