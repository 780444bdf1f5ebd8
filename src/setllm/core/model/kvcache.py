"""The KV cache of a forward: a new one, one holding given keys and values, the one a forward
returned, the keyword it goes by in the supported transformers releases, and cutting it back
to its first tokens."""

from __future__ import annotations

from functools import cache as _once


def new_cache():
    # No config: a config-built cache keeps only window-1 tokens for sliding-window models.
    from transformers import DynamicCache

    return DynamicCache()


def holding(layers):
    """A new KV cache holding ``layers`` (``(k, v)`` per layer) as they are, no copy made
    (``update`` on an empty cache would copy each, concatenated to an empty tensor). A forward
    on it concatenates its own keys into new tensors: ``layers`` are never written."""
    cache = new_cache()
    for i, (k, v) in enumerate(layers):
        cache.update(k[:, :, :0], v[:, :, :0], i)
        cache.layers[i].keys, cache.layers[i].values = k, v
    return cache


def truncate_cache(cache, n: int) -> None:
    """Keep the first ``n`` tokens of every layer of ``cache`` (``crop``'s argument changed
    meaning across transformers releases)."""
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys[:, :, :n], layer.values[:, :, :n]


def output_cache(out):
    """The KV cache a forward returned (``cache`` from transformers 5.24, ``past_key_values`` before)."""
    return out.cache if "cache" in out else out.past_key_values


@_once
def cache_kwarg() -> str:
    # transformers 5.24 renamed ``past_key_values`` to ``cache`` and warns on the old name;
    # asking by version keeps every supported release quiet.
    import transformers
    from packaging.version import Version

    return "cache" if Version(transformers.__version__) >= Version("5.24.0.dev0") else "past_key_values"

