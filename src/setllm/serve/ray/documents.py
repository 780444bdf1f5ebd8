"""The documents of a request, as the keys :mod:`setllm.core.doccache.dockeys` gives them, read from
its route and JSON body as the server will read it (without a tokenizer: the router runs
this for every request). A body that does not parse has none; the replica answers its 4xx.

How a route's body becomes its prompts is what its handler declares (:mod:`..declare`),
read here from the server's own routers: a route without documents goes by load, and a new
route needs nothing here."""

from __future__ import annotations

import json
import warnings

from ...core.doccache.dockeys import document_keys
from ..declare import reads
from ..routes import ROUTERS

PROMPTS = reads(ROUTERS)  # route -> the prompts its body is read as


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
