"""The documents of a request, as the keys :mod:`setllm.core.dockeys` gives them, read from
its route and JSON body as the server will read it (without a tokenizer: the router runs
this for every request). A body that does not parse has none; the replica answers its 4xx."""

from __future__ import annotations

import json
import warnings
from typing import Any

from ...core.dockeys import document_keys
from ...core.prompt import SetPrompt, as_prompt, parse_markup
from ...core.templates import mc_prompt


def request_documents(path: str, body: bytes) -> list[str]:
    """The keys of the documents the prompt of a ``POST path`` with ``body`` holds, in its
    order (``[]``: none, or a route or body without a one-set prompt)."""
    try:
        data = json.loads(body)
        if not isinstance(data, dict):
            return []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # markup warnings are the replica's to give
            prompts = _prompts(path, data)
    except Exception:  # noqa: BLE001 - a malformed request goes by load; the replica says what is wrong
        return []
    reading = f"{data.get('adapter') or data.get('model') or ''}\x00{data.get('variant') or ''}"
    return [k for p in prompts for k in document_keys(p, reading)]


def _prompts(path: str, data: dict[str, Any]) -> list[SetPrompt]:
    """The prompts a request reads (a completions request may send several)."""
    if path == "/v1/answer":
        from ...tasks.documents import documents_prompt

        documents = data["documents"]
        return [documents_prompt(documents, data["question"])] if isinstance(documents, list) else []
    if path in ("/v1/score", "/v1/generate"):
        prompt = data["prompt"]
        return [parse_markup(prompt) if isinstance(prompt, str) else as_prompt(prompt)]
    if path == "/v1/choose":
        return [mc_prompt(data["question"], [o.strip() for o in data["options"]], data.get("context"))]
    if path == "/v1/completions":
        prompt = data["prompt"]
        return [parse_markup(p) for p in ([prompt] if isinstance(prompt, str) else prompt) if isinstance(p, str)]
    return []
