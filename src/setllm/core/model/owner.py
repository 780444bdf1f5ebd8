"""One owner per wrapped model: everything setllm keeps about a model's weights, in one object
made once and found from any view of them.

A PEFT wrapper, the transformers model inside it and every :class:`setllm.SetLLM` view share
one set of weights, so what setllm keeps about them (the lock a bank's adapter switch holds, the
CUDA graphs, the attention choice, the weights' fingerprints, the document cache) belongs to
the weights, not to a view or to a module-level table: :func:`owner` finds it on the model
that holds the weights (:func:`weights`, the one rule for "which object is the weights"), and
it goes when the model goes.
"""

from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

_ATTRIBUTE = "_setllm_owner"
_guard = threading.Lock()  # two threads wrapping one model make one owner
UNSET: Any = object()  # a document cache never attached (on by default under sbp), as against None: switched off


def weights(model):
    """The object that holds ``model``'s weights: the transformers model inside a PEFT wrapper
    (or inside anything with ``get_base_model``), else ``model`` itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


@dataclass(eq=False)
class Owner:
    """What setllm keeps about one model's weights."""

    lock: threading.RLock = field(default_factory=threading.RLock)  # what views cannot share: a bank's active adapter
    installed: bool = False  # setllm's linear layers and attention are on the model (core.model.install)
    auto_attention: bool = False  # loaded with attn="auto": long prompts on flex attention (core.forward.runtime)
    graphs: Any = None  # the scoring forwards' CUDA graphs, or None: off (core.forward.graphs)
    documents: Any = UNSET  # the document cache (core.doccache): a DocumentCache, None (off) or UNSET
    reads_through: Owner | None = None  # whose document cache this one reads through (doccache.share)
    fingerprints: tuple[int, dict] | None = None  # (the weights' version, fingerprints taken at it)
    tokenizer_prints: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)

    def documents_owner(self) -> Owner:
        """The owner whose document cache these weights read through: their own, or the one
        :func:`setllm.core.doccache.share` named (followed to its end)."""
        return self if self.reads_through is None else self.reads_through.documents_owner()


def owner(model) -> Owner:
    """The :class:`Owner` of ``model``'s weights, made on first use."""
    base = weights(model)
    found = base.__dict__.get(_ATTRIBUTE)
    if found is None:
        with _guard:
            found = base.__dict__.get(_ATTRIBUTE)
            if found is None:
                found = Owner()
                object.__setattr__(base, _ATTRIBUTE, found)  # a plain attribute: not a submodule, parameter or buffer
    return found


def active_adapters(model) -> tuple[str, ...]:
    """The names of the LoRA adapters a forward of ``model`` runs now (none where they are
    off, as :class:`setllm.AdapterBank` reads the base model)."""
    if "peft" not in sys.modules:  # no PEFT layer can exist before peft is imported; importing it costs a first question 0.1 s
        return ()
    from peft.tuners.tuners_utils import BaseTunerLayer

    layer = next((m for m in model.modules() if isinstance(m, BaseTunerLayer)), None)
    return () if layer is None or layer.disable_adapters else tuple(layer.active_adapters)
