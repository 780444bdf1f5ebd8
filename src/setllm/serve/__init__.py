"""``setllm serve``: an order-invariant model behind HTTP (FastAPI + uvicorn), batched and
bounded. See docs/serving.md.

``ServeConfig`` imports nothing heavy (the CLI builds its flags from it); ``create_app``
imports FastAPI on first use.
"""

from __future__ import annotations

from typing import Any

from .config import ServeConfig

__all__ = ["ServeConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
