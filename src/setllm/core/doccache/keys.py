"""What names a cached document piece: explicit, short fields, the same text in any process.

A piece's keys and values depend on the weights, the adapters active over them, how the
prompt is read (variant), the dtype the forward ran in, the tokenizer that made the token ids,
and the tokens themselves (the text before the set, then the document). Each is a field of
:class:`PieceKey`, never the ``repr`` of an object: two processes that would compute the same
bits write and find the same key, and a file on disk says in plain JSON what it holds.
:data:`FORMAT` is the version of the cache's layout; a key of another version is another key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..model.fingerprint import weights_fingerprint
from ..model.owner import active_adapters, owner

FORMAT = "setllm-document-piece/2"  # /1 keyed by a tuple holding an adapter's repr and had no checksum


@dataclass(frozen=True)
class ReadingKey:
    """What a reading computes pieces under: the fields of a key that do not depend on the text."""

    weights: str  # a fingerprint of the base weights (adapters' own weights apart)
    adapters: tuple[tuple[str, str], ...]  # each active adapter: (its name, a fingerprint of its weights); () none
    variant: str
    dtype: str
    tokenizer: str  # a fingerprint of the vocabulary and special tokens
    format: str = FORMAT


@dataclass(frozen=True)
class PieceKey:
    """One piece: the tokens before its set (``prefix``), and the document's own tokens
    (``document``; None for the prefix's piece, which is keyed by the prefix alone)."""

    reading: ReadingKey
    prefix: tuple[int, ...]
    document: tuple[int, ...] | None = None

    @property
    def n_tokens(self) -> int:
        """Tokens the piece holds keys and values of."""
        return len(self.prefix if self.document is None else self.document)

    def text(self) -> str:
        """The key as JSON (sorted fields, no spaces): what a file stores and is named by."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    def digest(self) -> str:
        return hashlib.sha256(self.text().encode()).hexdigest()


def tokenizer_fingerprint(tokenizer) -> str:
    """A short hash of what turns text into ids: the vocabulary and the special tokens."""
    h = hashlib.sha256(type(tokenizer).__name__.encode())
    h.update(json.dumps(sorted(tokenizer.get_vocab().items()), separators=(",", ":")).encode())
    h.update(json.dumps(sorted(map(str, getattr(tokenizer, "all_special_tokens", []))), separators=(",", ":")).encode())
    return h.hexdigest()[:16]


def _plain_name(name: str, slot: str | None = None) -> str:
    """A parameter's name as any wrapping of the same weights names it: without PEFT's
    wrapper prefix and ``base_layer``, and without the adapter's slot (``default`` where one
    adapter was loaded, its bank name in an :class:`setllm.AdapterBank`)."""
    name = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
    return name.replace(f".{slot}.", ".") if slot else name


def reading_key(model, tokenizer, variant, adapter: str | None = None) -> ReadingKey:
    """What a piece is computed under, as fields (:class:`.keys.ReadingKey`): the base weights'
    fingerprint and each active adapter's name and fingerprint (both taken again whenever a
    parameter was changed in place, as an optimizer step does), the variant, the dtype and the
    tokenizer. Weights are hashed under their plain names, so the same weights give the same
    key loaded alone, wrapped by PEFT or in a bank; ``adapter``: the folder (or name) the one
    active adapter was loaded from, which names it (else PEFT's slot name does)."""
    state = owner(model)
    version = sum(p._version for p in model.parameters())  # torch counts in-place writes to a tensor
    if state.fingerprints is None or state.fingerprints[0] != version:
        state.fingerprints = (version, {})
    prints = state.fingerprints[1]  # None: the base weights; a name: that adapter's

    def fingerprint(name: str | None) -> str:
        if name not in prints:
            own = (lambda n: "lora_" not in n) if name is None else (lambda n: "lora_" in n and f".{name}." in n)
            plain = lambda n: _plain_name(n, name)  # noqa: E731
            prints[name] = weights_fingerprint(model, 4099 if name is None else 1, own, plain)  # an adapter is small: every value
        return prints[name]

    active = active_adapters(model)
    named = [Path(adapter).name] if adapter is not None and len(active) == 1 else active
    adapters = tuple((label, fingerprint(name)) for label, name in zip(named, active))
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    known = state.tokenizer_prints.get(tokenizer)
    if known is None:
        known = state.tokenizer_prints[tokenizer] = tokenizer_fingerprint(tokenizer)
    return ReadingKey(fingerprint(None), adapters, variant.name, dtype, known)
