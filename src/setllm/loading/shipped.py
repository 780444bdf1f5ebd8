"""The adapters shipped with setllm for the embedded model, and the rule that tells the
embedded model from any other: where ``adapter="auto"`` resolves to."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from .sources import DEFAULT_MODEL, canonical_name

ADAPTERS_DIR = Path(__file__).parents[1] / "adapters"
# One adapter per kind of task it was trained for.
SHIPPED_ADAPTERS = {"choose": "smollm2-135m-setllm", "judge": "smollm2-135m-judge", "documents": "smollm2-135m-documents"}
DEFAULT_ADAPTER = ADAPTERS_DIR / SHIPPED_ADAPTERS["choose"]
# Adapters for a training-free reading, which otherwise reads the base model as it is, where one
# was trained for it and measured as good as the kind's own: (kind, variant) -> folder. sbp, the
# reading whose documents are cached, has one for documents (docs/documents.md).
READING_ADAPTERS = {("documents", "sbp"): "smollm2-135m-documents-sbp"}


def embedded_or(model: str | None) -> str | None:
    """``model``, or None where it names the embedded model (its name, or its GGUF file by path)."""
    model = canonical_name(model)
    return None if model == DEFAULT_MODEL else model


def default_adapter(kind: str = "choose", variant: str | None = None) -> str | None:
    """The Set-LLM adapter shipped for the embedded model, if this install has it:
    ``"choose"`` (choose, score, generate, eval of the benchmarks; what ``adapter="auto"``
    loads), ``"judge"`` (trained on judge examples; the default of ``setllm judge``) or
    ``"documents"`` (trained on documents read as a set, for :meth:`SetLLM.answer`; the
    default of ``setllm eval --dataset documents``). With a training-free ``variant``: the
    one trained for that reading (:data:`READING_ADAPTERS`), or None (the base model as it is)."""
    if kind not in SHIPPED_ADAPTERS:
        raise InputError(f"unknown adapter kind {kind!r}; choose one of: {', '.join(SHIPPED_ADAPTERS)}")
    name = SHIPPED_ADAPTERS[kind] if variant is None else READING_ADAPTERS.get((kind, variant))
    if name is None:
        return None
    path = ADAPTERS_DIR / name
    return str(path) if (path / "adapter_config.json").exists() else None
