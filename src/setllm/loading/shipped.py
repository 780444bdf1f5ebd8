"""The adapters shipped with setllm for the embedded model, and where ``adapter="auto"``
resolves to (:func:`chosen_adapter`)."""

from __future__ import annotations

from pathlib import Path

from ..core.layout.variants import VARIANTS, Variant, get_variant
from ..errors import InputError

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
    return _shipped(kind, None if variant is None else get_variant(variant))


def chosen_adapter(adapter: str, model: str | None, variant: str | None, kind: str = "choose") -> str | None:
    """The adapter to load for ``adapter`` (the option), ``model`` (None: the embedded one)
    and ``variant`` (a name :class:`setllm.LoadOptions` checked; None: none named). ``auto``:
    the one shipped for ``kind`` of task (:func:`default_adapter`), only with the embedded
    model read under an order-invariant variant: with none named, the kind's default (for
    documents the ``sbp`` one, which reads under ``sbp``); a trained variant named, the kind's
    adapter trained under one (documents: the ``setmask-setpe`` one); a training-free one
    named (``sbp``, ``canonical``), only one trained for that reading (``sbp`` documents),
    else the base model as it is; the base model is the model without it."""
    if adapter != "auto":
        return None if adapter == "none" else adapter
    read = None if variant is None else VARIANTS[variant]
    if model is not None or (read is not None and not read.invariant):
        return None
    if read is not None and read.training_free:
        return _shipped(kind, read)
    return _shipped(kind, read) or _shipped("choose", None)


def _shipped(kind: str, variant: Variant | None) -> str | None:
    if kind not in SHIPPED_ADAPTERS:
        raise InputError(f"unknown adapter kind {kind!r}; choose one of: {', '.join(SHIPPED_ADAPTERS)}")
    name = SHIPPED_ADAPTERS[kind]
    if variant is not None:
        name = READING_ADAPTERS.get((kind, variant.name if variant.training_free else "trained"), None if variant.training_free else name)
    if name is None:
        return None
    path = ADAPTERS_DIR / name
    return str(path) if (path / "adapter_config.json").exists() else None
