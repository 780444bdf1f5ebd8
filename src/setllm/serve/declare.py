"""What the body of a POST route holds for the document cache, declared on its handler, under
its ``@router.post``: the set prompts the handler reads the body as (:func:`prompts`, built by
what the handler itself calls: the verbs of :mod:`setllm.verbs`, :func:`setllm.core.text.prompt.as_prompt`),
or no documents a cache keeps (:data:`no_documents`).

The single server has no use for it; ``--replicas`` reads it to send a request to the replica
that holds its documents (:mod:`.ray.documents`), for every request, from the JSON body alone
(no model, no tokenizer). So neither this module nor the route modules import torch.
``tests/serve/test_ray_routes.py`` names a POST route that declares neither."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ..core.text.prompt import SetPrompt

Read = Callable[[dict[str, Any]], list[SetPrompt]]  # a body (parsed JSON) -> the set prompts it is read as
Handler = TypeVar("Handler", bound=Callable[..., Any])
ATTRIBUTE = "setllm_prompts"  # where a handler carries its declaration (None: no documents)


def prompts(read: Read | None) -> Callable[[Handler], Handler]:
    """Declares that the handler reads its body as the prompts ``read(body)`` gives (None: as
    :data:`no_documents`). ``read`` may raise on a body the handler refuses: it holds none."""

    def declare(handler: Handler) -> Handler:
        setattr(handler, ATTRIBUTE, read)
        return handler

    return declare


# The handler's prompt holds no documents a cache keeps (``--replicas`` sends it by load).
no_documents = prompts(None)


def reads(routers: Iterable) -> dict[str, Read]:
    """How each POST route of ``routers`` reads its body's prompts, by path (no documents: left out)."""
    routes = [r for router in routers for r in router.routes if "POST" in getattr(r, "methods", ())]
    return {r.path: getattr(r.endpoint, ATTRIBUTE) for r in routes if getattr(r.endpoint, ATTRIBUTE, None)}
