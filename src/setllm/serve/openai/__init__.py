"""The OpenAI-compatible endpoints, shaped as vLLM's ``entrypoints/openai/``: a folder per
endpoint family (``completion/``, ``chat_completion/``, ``responses/``), each with its
protocol (request and response bodies), its serving logic and its router apart; what every
family shares beside them (:mod:`.protocol`, :mod:`.serving`), with structured outputs
(:mod:`.structured`) and tools (:mod:`.tools`), and ``GET /v1/models`` (:mod:`.models`).

A text prompt may carry setllm markup (``{{a||b}}`` makes a set); token ids are read as plain
text. Their errors are OpenAI's error object (:data:`PATHS`, :mod:`..errors`).
"""

from .chat_completion.api_router import router as chat_completion_router
from .completion.api_router import router as completion_router
from .models import router as models_router
from .responses.api_router import router as responses_router

ROUTERS = (completion_router, chat_completion_router, models_router, responses_router)  # the order a 404 lists them in (docs/serving.md shows it)
PATHS = frozenset(r.path for router in ROUTERS for r in router.routes)
