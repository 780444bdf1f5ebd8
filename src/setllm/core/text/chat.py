"""Chat messages as a set prompt: each message's content may carry set markup
(``{{a||b}}``, :mod:`setllm.core.text.prompt`), and the tokenizer's chat template is rendered around
the contents with every set kept whole, so the template's own text never falls inside a set.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ...errors import InputError
from .prompt import Set, SetPrompt, as_prompt, parse_markup

_OPEN, _CLOSE = "\ue000", "\ue001"  # private-use characters: a placeholder no template writes
_PLACEHOLDER = re.compile(f"{_OPEN}(\\d+){_CLOSE}")


def chat_prompt(tokenizer, messages: Sequence[dict], strip_bos: bool = False) -> SetPrompt:
    """``messages`` (``{"role", "content"}``) in the tokenizer's chat template, ready for the
    assistant's turn. ``strip_bos``: drop a BOS the template writes (the encoder adds its own)."""
    if not getattr(tokenizer, "chat_template", None):
        raise InputError("this model's tokenizer has no chat template; use /v1/completions")
    sets: list[Set] = []
    plain = []
    for i, message in enumerate(messages):
        content = message["content"]
        if _OPEN in content or _CLOSE in content:
            raise InputError(f"messages[{i}].content: holds the private-use characters U+E000/U+E001 setllm marks sets with")
        segments = parse_markup(content).segments if "{{" in content else [content]
        text = ""
        for seg in segments:
            if isinstance(seg, Set):
                text += f"{_OPEN}{len(sets)}{_CLOSE}"
                sets.append(seg)
            else:
                text += seg
        plain.append({"role": message["role"], "content": text})
    rendered = tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=True)
    bos = tokenizer.bos_token or ""
    if strip_bos and bos and rendered.startswith(bos):
        rendered = rendered[len(bos):]
    parts = _PLACEHOLDER.split(rendered)
    found = [int(x) for x in parts[1::2]]
    if sorted(found) != list(range(len(sets))):
        raise InputError("the chat template does not copy message contents verbatim; sets cannot be kept intact in it")
    segments = [sets[int(p)] if i % 2 else p for i, p in enumerate(parts) if i % 2 or p]
    return as_prompt(segments)
