"""A content key per document of a prompt, by text: what :mod:`.doccache` would find cached,
known without a tokenizer or torch (a request router computes it for every request).

The cache keys a piece by the tokens of the text before its set and of the element, each
tokenized alone; under one model equal texts give equal tokens, so equal keys here mean the
same cached piece. Order plays no part: a set's documents in any order give the same keys.
"""

from __future__ import annotations

from hashlib import blake2b

from ..text.prompt import SetPrompt


def document_keys(prompt: SetPrompt, reading: str = "") -> list[str]:
    """A key for each element of ``prompt``'s one set, in the prompt's order, or ``[]`` where
    the prompt has none or several sets (the cache reads those as before, keeping nothing).
    ``reading``: what else the cache keys by that the text does not say, e.g. the adapter
    and variant a request names."""
    sets = [i for i, s in enumerate(prompt.segments) if not isinstance(s, str)]
    if len(sets) != 1:
        return []
    head = f"{reading}\x00{''.join(prompt.segments[: sets[0]])}\x00"
    return [blake2b((head + element).encode(), digest_size=12).hexdigest() for element in prompt.segments[sets[0]].elements]
