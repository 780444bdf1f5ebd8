"""What every OpenAI route does the same way: name the fields it ignored, refuse the values it
cannot honour, read the sampling fields as a :class:`GenerationConfig`, pick how it generates
(plain, or under a structured-output constraint; on the chat routes with the tools offered),
count the usage, and stream (server-sent events, :mod:`..streaming`) with one ``id`` for every chunk.
"""

from __future__ import annotations

import functools
import time
import urllib.parse
import uuid
import warnings
from typing import Any

from fastapi import Response

from ...core.forward.values import GenerationConfig
from ...errors import SetLLMWarning
from ..errors import BadRequest, meant, printable
from ..streaming import DONE, Chunks, streamed
from . import structured, tools
from .protocol import IGNORED_HEADER, IGNORED_HEADER_BYTES, MAX_UNKNOWN_FIELDS, OpenAIRequest, Usage


def name_ignored(body: OpenAIRequest, response: Response) -> None:
    """Name the fields this server ignored in :data:`IGNORED_HEADER` (none: no header), each
    percent-encoded (a JSON name may hold any character; a header only some), comma-separated,
    at most :data:`IGNORED_HEADER_BYTES` (then ``+N more``); a name close to a field this
    route takes (``max_token``) is also a ``setllm-warning``."""
    names = sorted(body.model_extra or ())
    if len(names) > MAX_UNKNOWN_FIELDS:
        raise BadRequest(f"body: {len(names)} unknown fields; at most {MAX_UNKNOWN_FIELDS} per request")
    if not names:
        return
    response.headers[IGNORED_HEADER] = _listed([urllib.parse.quote(n, safe="") for n in names], IGNORED_HEADER_BYTES)
    for name in names:
        if close := meant(name, type(body).model_fields):
            warnings.warn(f"{printable(name)}: not a field of this route, ignored; did you mean {close!r}?", SetLLMWarning, stacklevel=2)


def _listed(names: list[str], limit: int) -> str:
    """``names`` comma-separated, the first that fit in ``limit`` bytes, then ``+N more``."""
    text, shown = "", 0
    for name in names:
        if len(text) + len(name) + 1 > limit - 16:
            return f"{text},+{len(names) - shown} more"
        text, shown = f"{text},{name}" if text else name, shown + 1
    return text


def refuse_unsupported(body, fields: dict) -> None:
    """A 400 for the first field of ``fields`` (a protocol's ``*UNSUPPORTED``) set to a value not honoured."""
    for name, (ok, why) in fields.items():
        value = getattr(body, name)
        if value == ok or (name == "logit_bias" and not value) or (name == "best_of" and value == 1):
            continue
        raise BadRequest(f"{name}: {why}")


def config_of(body, max_tokens: int) -> GenerationConfig:
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    return GenerationConfig(max_new_tokens=max_tokens, temperature=body.temperature, top_p=body.top_p, seed=body.seed, stop=stop)


def generator_for(service, shape):
    """How a route generates: the service's batched generation, or the structured answer under
    ``shape`` (not shown to the model: the embedded 135M model answers worse with a JSON schema
    in its prompt, docs/structured.md)."""
    if shape is None:
        return service.generate
    return lambda prompt, config, field, logprobs=None, echo=False, adapter=None, stream=None: structured.answer(
        service, prompt, shape, config, field, adapter, stream)


def chat_reading(service, body, messages: list[dict], shape):
    """A chat route's prompt and how it generates (:func:`generator_for`): the tools the request
    offers shown before ``messages`` as one set, and then a call decided (or, under ``auto`` and
    ``none``, the text answer) by :func:`.tools.answer`."""
    offer = tools.offered(body)
    shown = [tools.shown_message(offer, service.lm.exact)] if offer is not None else []
    prompt = service.chat([*shown, *tools.as_template(messages)], body.model)
    generate = generator_for(service, shape)
    if offer is not None:
        generate = functools.partial(tools.answer, service, offer=offer, text=generate)
    return prompt, generate


def usage_of(outs) -> Usage:
    prompt, completion = sum(o.prompt_tokens for o in outs), sum(o.n_tokens for o in outs)
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


class OpenAIChunks(Chunks):
    """An OpenAI route's stream: one ``id`` and ``created`` for every chunk; with
    ``stream_options.include_usage`` a last chunk holds the usage (``choices: []``, and
    ``usage: null`` in every other chunk), then ``data: [DONE]``."""

    def __init__(self, body: OpenAIRequest, model: str, prefix: str):
        self.body, self.model = body, model
        self.id, self.created = f"{prefix}{uuid.uuid4().hex}", int(time.time())
        self.include_usage = body.stream_options is not None and body.stream_options.include_usage

    def tail(self, outs: list) -> list[bytes]:
        usage = [self.chunk([], usage=usage_of(outs).model_dump())] if self.include_usage else []
        return [*usage, DONE]

    def chunk(self, choices: list[dict], **more: Any) -> bytes:
        raise NotImplementedError


def stream_jobs(jobs: list, chunks: Chunks, response: Response):
    """:func:`..streaming.streamed`, naming the ignored fields as an answer not streamed does."""
    return streamed(jobs, chunks, {k: v for k, v in response.headers.items() if k == IGNORED_HEADER})
