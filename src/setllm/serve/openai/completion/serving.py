"""``/v1/completions``: its prompts read (markup text, or token ids as plain text), generated in
one batch or streamed as ``text_completion`` chunks, with the legacy ``logprobs`` and ``echo``."""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import Response
from fastapi.responses import StreamingResponse

from ....core.text.prompt import as_prompt
from ...errors import BadRequest
from ...streaming import Started, sse
from .. import structured
from ..serving import OpenAIChunks, config_of, generator_for, name_ignored, refuse_unsupported, stream_jobs, usage_of
from .protocol import COMPLETION_UNSUPPORTED, CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse


async def create_completion(body: CompletionRequest, service, response: Response) -> CompletionResponse | StreamingResponse:
    """The completion of every prompt ``body`` lists (streamed with ``stream``)."""
    shape = structured.vllm_constraint(body)  # before the ignored fields are named: vLLM's are read
    name_ignored(body, response)
    refuse_unsupported(body, COMPLETION_UNSUPPORTED)
    if body.max_tokens == 0 and not body.echo:
        raise BadRequest("max_tokens: 0 generates nothing; it is only useful with echo: true")
    if shape is not None and (body.echo or body.logprobs is not None or body.max_tokens == 0):
        raise BadRequest("structured_outputs: not with echo, logprobs or max_tokens 0")
    prompts = prompt_list(body.prompt)
    config = config_of(body, body.max_tokens or 0) if body.max_tokens != 0 else None
    generate = generator_for(service, shape)
    if body.stream:
        service.check_prompts(len(prompts))
        jobs = [lambda sink, p=p: generate(p, config, "max_tokens", body.logprobs, body.echo, body.model, stream=sink) for p in prompts]
        return await stream_jobs(jobs, _CompletionChunks(body, service.answered_by(body.model)), response)
    outs = await service.generate_all(prompts, config, "max_tokens", body.logprobs, body.echo, body.model, using=generate)
    choices = [CompletionChoice(text=(out.prompt_text if body.echo else "") + out.text, index=i, finish_reason=out.finish_reason,
                                logprobs=_legacy_logprobs(out) if body.logprobs is not None else None) for i, out in enumerate(outs)]
    return CompletionResponse(id=f"cmpl-{uuid.uuid4().hex}", created=int(time.time()), model=service.answered_by(body.model), choices=choices,
                              usage=usage_of(outs))


def prompt_list(prompt) -> list:
    """One entry per prompt: markup text (a set prompt) or a tuple of token ids."""
    if isinstance(prompt, str):
        return [as_prompt(prompt)]
    if prompt and isinstance(prompt[0], int):
        return [tuple(prompt)]
    return [tuple(p) if isinstance(p, list) else as_prompt(p) for p in prompt]


def _legacy_logprobs(out) -> CompletionLogprobs:
    offsets, at = [], 0
    for t in out.tokens:
        offsets.append(at)
        at += len(t.text)
    return CompletionLogprobs(tokens=[t.text for t in out.tokens], token_logprobs=[t.logprob for t in out.tokens],
                              top_logprobs=[t.top for t in out.tokens], text_offset=offsets)


class _CompletionChunks(OpenAIChunks):
    """``/v1/completions``: a ``text_completion`` chunk per piece; each choice's last carries its
    ``finish_reason`` and, with ``logprobs``, every token's log-probs (computed after the text by
    the scoring driver, as for a request not streamed); with ``echo`` the prompt comes first."""

    def __init__(self, body: CompletionRequest, model: str):
        super().__init__(body, model, "cmpl-")

    def chunk(self, choices: list[dict], **more: Any) -> bytes:
        usage = {"usage": None} if self.include_usage else {}
        return sse({"id": self.id, "object": "text_completion", "created": self.created, "model": self.model, "choices": choices,
                    **usage, **more})

    def choice(self, index: int, text: str, logprobs=None, finish: str | None = None) -> bytes:
        return self.chunk([{"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish}])

    def started(self, index: int, event: Started) -> list[bytes]:
        return [self.choice(index, event.prompt_text)] if event.prompt_text else []

    def piece(self, index: int, text: str) -> bytes:
        return self.choice(index, text)

    def finished(self, index: int, out, last: str) -> list[bytes]:
        logprobs = _legacy_logprobs(out).model_dump() if self.body.logprobs is not None else None
        return [self.choice(index, last, logprobs, out.finish_reason)]
