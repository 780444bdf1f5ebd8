"""One lock per loaded model, for what views of its weights cannot share: a bank's active adapter.

A computation never changes the model: setllm's linear layers and attention are installed
once, when a model is wrapped, and each call selects them through context of its own
(:mod:`setllm.core.model.install`), so views of one model (``with_variant``/``with_options``
views) run on several threads at once. An :class:`setllm.AdapterBank` view switches the
shared model's active adapter, which every forward reads: it holds this lock from the switch
to the end of its computation (``AdapterBank.using``), so bank views take turns.

The lock is re-entrant: a bank view's computation may take it again on its own thread.
"""

from __future__ import annotations

import threading

from .core.model.owner import owner


def model_lock(model) -> threading.RLock:
    """The lock of ``model``'s weights: the same object for a PEFT wrapper and the model it
    wraps (they share every layer), kept by their owner (:mod:`setllm.core.model.owner`)."""
    return owner(model).lock
