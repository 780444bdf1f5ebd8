"""The adapters shipped with setllm for the embedded model, and the rule that tells the
embedded model from any other: where ``adapter="auto"`` resolves to."""

from __future__ import annotations

from pathlib import Path

from ..core.layout.variants import Variant, get_variant
from ..errors import InputError
from .sources import DEFAULT_MODEL, canonical_name

ADAPTERS_DIR = Path(__file__).parents[1] / "adapters"
# The adapter each kind of task reads with by default. Documents are read under sbp with the
# adapter trained for it: it answers the held-out key-value lists at least as well as the
# setmask-setpe documents adapter (92/92 against 84/85, 85/85 against 84/82) and its documents
# are cached across questions (docs/documents.md); that adapter's setllm.json says sbp.
SHIPPED_ADAPTERS = {"choose": "smollm2-135m-setllm", "judge": "smollm2-135m-judge", "documents": "smollm2-135m-documents-sbp"}
DEFAULT_ADAPTER = ADAPTERS_DIR / SHIPPED_ADAPTERS["choose"]
# The adapter of a kind for a variant asked for by name, where it is not the kind's default:
# (kind, variant) -> folder. Documents under setmask-setpe (or another trained invariant
# variant): the setmask-setpe documents adapter; sbp: the default one. A training-free
# variant with none here reads the base model as it is.
READING_ADAPTERS = {("documents", "sbp"): "smollm2-135m-documents-sbp", ("documents", "trained"): "smollm2-135m-documents"}


def embedded_or(model: str | None) -> str | None:
    """``model``, or None where it names the embedded model (its name, or its GGUF file by path)."""
    model = canonical_name(model)
    return None if model == DEFAULT_MODEL else model


def default_adapter(kind: str = "choose", variant: str | Variant | None = None) -> str | None:
    """The Set-LLM adapter shipped for the embedded model, if this install has it:
    ``"choose"`` (choose, score, generate, eval of the benchmarks; what ``adapter="auto"``
    loads), ``"judge"`` (trained on judge examples; the default of ``setllm judge``) or
    ``"documents"`` (trained on documents read as a set under ``sbp``, for
    :meth:`SetLLM.answer`; the default of ``setllm answer`` and ``setllm eval --dataset
    documents``). With a ``variant`` named: the one trained for that reading
    (:data:`READING_ADAPTERS`: a training-free variant's own, or ``"trained"`` for the
    trained invariant variants), else the kind's default under a trained variant and None
    (the base model as it is) under a training-free one."""
    if kind not in SHIPPED_ADAPTERS:
        raise InputError(f"unknown adapter kind {kind!r}; choose one of: {', '.join(SHIPPED_ADAPTERS)}")
    name = SHIPPED_ADAPTERS[kind]
    if variant is not None:
        variant = get_variant(variant)
        name = READING_ADAPTERS.get((kind, variant.name if variant.training_free else "trained"), None if variant.training_free else name)
    if name is None:
        return None
    path = ADAPTERS_DIR / name
    return str(path) if (path / "adapter_config.json").exists() else None
