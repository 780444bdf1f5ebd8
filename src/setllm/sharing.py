"""One lock per loaded model, shared by every view of its weights.

A computation changes the shared model while it runs: scoring swaps every linear layer's
forward (:func:`setllm.core.runtime.fixed_row_linears`) and the attention implementation
(:func:`setllm.core.runtime.attention_implementation`), and an :class:`setllm.AdapterBank`
view switches the active adapter. Two threads running on one model at once would mix those
switches. Every view of a model (``with_variant``/``with_options`` views, the views of one
bank) takes the same lock around each computation (``SetLLM._running``), so calls from
several threads take turns and each gets what it would get alone.

The lock is re-entrant: a bank view takes it once in ``SetLLM._running`` and again in
``AdapterBank.using``, on one thread, without deadlock.
"""

from __future__ import annotations

import threading
import weakref

_locks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_guard = threading.Lock()


def model_lock(model) -> threading.RLock:
    """The lock of ``model``'s weights: the same object for a PEFT wrapper and the model it
    wraps (they share every layer), made on first use and dropped with the model."""
    key = model.get_base_model() if hasattr(model, "get_base_model") else model
    with _guard:
        lock = _locks.get(key)
        if lock is None:
            lock = _locks[key] = threading.RLock()
        return lock
