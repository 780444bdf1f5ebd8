"""The documents of a request, as the keys :mod:`setllm.core.dockeys` gives them, read from
its route and JSON body as the server will read it (without a tokenizer: the router runs
this for every request). A body that does not parse has none; the replica answers its 4xx.

:data:`PROMPTS` declares, per route, the prompts its body is read as, each built by what the
route itself calls (the verbs of :mod:`setllm.verbs`, the service's :func:`parse_prompt`),
never a copy of them. A route not named here goes by load; a new route that reads documents
is one line here, and ``tests/serve/test_ray_routes.py`` fails until it has that line (or is
named in :data:`BY_LOAD`)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from typing import Any

from ... import verbs
from ...core.dockeys import document_keys
from ...core.prompt import SetPrompt, parse_markup
from ..service import parse_prompt


def _completions(data: dict[str, Any]) -> list[SetPrompt]:
    prompt = data["prompt"]  # one text or several, each read as markup (token ids: none)
    return [parse_markup(p) for p in ([prompt] if isinstance(prompt, str) else prompt) if isinstance(p, str)]


PROMPTS: dict[str, Callable[[dict[str, Any]], list[SetPrompt]]] = {  # route -> the prompts its body is read as
    "/v1/answer": lambda d: [verbs.answer(d["documents"], d["question"]).prompt],
    "/v1/choose": lambda d: [verbs.choose(d["question"], d["options"], d.get("context")).prompt],
    "/v1/score": lambda d: [parse_prompt(d["prompt"])],
    "/v1/generate": lambda d: [parse_prompt(d["prompt"])],
    "/v1/completions": _completions,
}
# Routes whose requests go by load: their prompts hold no documents a cache keeps (a judge's
# candidates are responses, read after the instruction; chat messages and responses' input are
# text, no set).
BY_LOAD = ("/v1/judge", "/v1/chat/completions", "/v1/responses")


def request_documents(path: str, body: bytes) -> list[str]:
    """The keys of the documents the prompt of a ``POST path`` with ``body`` holds, in its
    order (``[]``: none, or a route or body without a one-set prompt)."""
    read = PROMPTS.get(path)
    if read is None:
        return []
    try:
        data = json.loads(body)
        if not isinstance(data, dict):
            return []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # markup warnings are the replica's to give
            prompts = read(data)
    except Exception:  # noqa: BLE001 - a malformed request goes by load; the replica says what is wrong
        return []
    reading = f"{data.get('adapter') or data.get('model') or ''}\x00{data.get('variant') or ''}"
    return [k for p in prompts for k in document_keys(p, reading)]
