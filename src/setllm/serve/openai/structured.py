"""Structured outputs on the OpenAI routes: which constraint a request asks for (OpenAI's
``response_format`` on chat, ``text.format`` on ``/v1/responses``, vLLM's ``structured_outputs``
and its older ``guided_*`` fields on chat and completions), and the answer, streamed in the
pieces the plan decides. The constraint is not shown to the model (the embedded 135M model
answers worse with a JSON schema in its prompt, docs/structured.md); tools are (:mod:`.tools`).

Every surface runs the one structured reading, :meth:`setllm.SetLLM.generate_structured`; the
fields a request names and this module reads are never left to the ignored-fields header: a
request that asks for structure gets it, or a 400 that says why.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...core.forward.values import GenerationConfig
from ...core.text.prompt import Set, SetPrompt, to_markup
from ...structured import SchemaError, Spec, spec
from ...structured.plan import plan
from ..errors import BadRequest
from ..streaming import Started

# vLLM's fields: structured_outputs' keys (and the guided_* names they replaced) -> spec's argument.
VLLM_KEYS = {"json": "schema", "regex": "regex", "choice": "choice", "grammar": "grammar"}
GUIDED = {f"guided_{k}": k for k in VLLM_KEYS}
GUIDED_UNSUPPORTED = ("guided_decoding_backend", "guided_whitespace_pattern")


@dataclass
class Out:
    """A structured answer as the routes read a generation (:class:`setllm.serve.engine.Generated`)."""

    text: str
    n_tokens: int
    prompt_tokens: int
    finish_reason: str
    prompt_text: str = ""
    tokens: list = field(default_factory=list)
    tool_calls: list | None = None  # OpenAI's, where the answer is a call (:mod:`.tools`)


def chat_constraint(body) -> Spec | None:
    """The constraint of a chat completion: ``response_format`` or vLLM's fields (one of them)."""
    asked = [c for c in (_response_format(body.response_format, "response_format"), vllm_constraint(body)) if c is not None]
    if len(asked) > 1:
        raise BadRequest("response_format and structured_outputs both ask for a structure; give one")
    return asked[0] if asked else None


def responses_constraint(body) -> Spec | None:
    """The constraint of ``/v1/responses``: ``text.format`` (its fields flat, as that API has them)."""
    form = (body.text or {}).get("format")
    if form is None:
        return None
    if not isinstance(form, dict):
        raise BadRequest("text.format: an object, {\"type\": \"text\" | \"json_schema\" | \"json_object\", ...}")
    if form.get("type") == "json_schema":
        return _schema(form.get("schema"), "text.format.schema")
    return _response_format(form, "text.format")


def _response_format(form: dict | None, where: str) -> Spec | None:
    kind = (form or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        return _schema({"type": "object"}, where)
    if kind == "json_schema":
        inner = form.get("json_schema")
        if not isinstance(inner, dict) or "schema" not in inner:
            raise BadRequest(f"{where}.json_schema: an object with the schema under \"schema\" (and a \"name\")")
        return _schema(inner["schema"], f"{where}.json_schema.schema")
    raise BadRequest(f"{where}.type: one of text, json_object, json_schema, got {kind!r}")


def vllm_constraint(body) -> Spec | None:
    """vLLM's ``structured_outputs`` {json | regex | choice | grammar}, or the ``guided_*`` field of
    one of them (honoured as it was); taken out of the fields named as ignored."""
    extra = body.model_extra or {}
    for name in GUIDED_UNSUPPORTED:
        if name in extra:
            raise BadRequest(f"{name}: not supported (the grammar engine is llguidance); use structured_outputs")
    asked = {GUIDED[k]: extra.pop(k) for k in list(extra) if k in GUIDED}
    outputs = extra.pop("structured_outputs", None)
    if outputs is not None:
        if not isinstance(outputs, dict):
            raise BadRequest("structured_outputs: an object with one of json, regex, choice, grammar")
        unknown = sorted(set(outputs) - set(VLLM_KEYS) - {"json_object"})
        if unknown:
            raise BadRequest(f"structured_outputs.{unknown[0]}: not supported; it takes one of {', '.join(VLLM_KEYS)} or json_object")
        asked.update({k: v for k, v in outputs.items() if v is not None and v is not False})
    if asked.pop("json_object", None):
        asked["json"] = {"type": "object"}
    if not asked:
        return None
    if len(asked) > 1:
        raise BadRequest(f"structured_outputs: one of {', '.join(VLLM_KEYS)}, got {', '.join(sorted(asked))}")
    key, value = next(iter(asked.items()))
    if key == "json":
        return _schema(json.loads(value) if isinstance(value, str) else value, "structured_outputs.json")
    try:
        return spec(**{VLLM_KEYS[key]: value})
    except SchemaError as e:
        raise BadRequest(f"structured_outputs.{key}: {e}") from None


def _schema(value: Any, where: str) -> Spec:
    try:
        return spec(value)
    except SchemaError as e:
        raise BadRequest(f"{where}: {e}") from None


def as_content(segments: list) -> str:
    """Segments as a message's content: markup where they hold a set, else the text itself."""
    if not any(isinstance(s, Set) for s in segments):
        return "".join(segments)
    return to_markup(SetPrompt(tuple(segments)))


async def answer(service, prompt: SetPrompt | tuple, constraint: Spec, config: GenerationConfig, field: str, adapter: str | None,
                 stream: Callable[[Any], None] | None = None) -> Out:
    """The structured answer, computed on the model thread behind the service's queue
    (:meth:`setllm.serve.service.Service.call`: its limit, deadline and cancellation);
    ``stream``: a sink of its pieces (:mod:`..streaming`)."""
    service.config.check_new_tokens(config.max_new_tokens, field)  # a 400, as a plain request's
    if isinstance(prompt, tuple):
        raise BadRequest("structured outputs need a text prompt, not token ids")
    plan(constraint, service.engines.get(service.engine_key(adapter)).lm.exact)  # one the engine cannot compile: a 400, before a stream starts
    if stream is not None:
        stream(Started(""))
    out = await service.call(lambda lm, enc: lm.generate_structured(enc, constraint, config, False, stream), adapter, prompt)
    return Out(out.text, len(out.token_ids), out.prompt_tokens, out.finish_reason)
