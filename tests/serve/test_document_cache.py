"""setllm serve --cache-mb: documents read under sbp are looked up by content across requests;
the cache never changes an answer (a cold server's), and /metrics counts what it did."""

from __future__ import annotations

import random

import pytest
from serve_helpers import serving
from tiny import tiny_model, tiny_tokenizer

from setllm import SetLLM
from setllm.core import doccache

DOCS = [f"Note {i}: the {w} fox jumps over the lazy dog.\n" for i, w in enumerate(["quick", "brown", "red", "old", "small", "lazy"])]


def requests(n: int, seed: int):
    """``n`` score requests over a pool of documents, 3 a request, in random order."""
    rng = random.Random(seed)
    return [{"prompt": ["Documents:\n", {"set": rng.sample(DOCS, 3)}, "Question: which one jumps?\nAnswer:"], "options": ["fox", "dog"]}
            for _ in range(n)]


def answers(lm, bodies, **config):
    with serving(lm, **config) as client:
        got = [client.post("/v1/score", json=b).json()["scores"] for b in bodies]
        metrics = client.get("/metrics").text
    return got, metrics


def test_a_cached_server_answers_as_a_cold_one_and_counts_its_hits():
    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), "sbp")
    bodies = requests(12, 0)
    cold, cold_metrics = answers(lm, bodies)
    try:
        warm, metrics = answers(lm, bodies, cache_mb=16)
        assert [max(range(2), key=s.__getitem__) for s in warm] == [max(range(2), key=s.__getitem__) for s in cold]
        assert [x for s in warm for x in s] == pytest.approx([x for s in cold for x in s], abs=1e-4)  # rounding only
        counts = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines() if line.startswith("setllm_document_cache")}
        # 12 requests of 3 documents drawn from 6, one prefix: at most 7 pieces computed, the rest found.
        assert counts["setllm_document_cache_misses"] <= 7 and counts["setllm_document_cache_hits"] >= 12 * 4 - 7
        assert 0 < counts["setllm_document_cache_bytes"] <= counts["setllm_document_cache_max_bytes"] == 16e6
        assert "setllm_document_cache" not in cold_metrics  # off unless asked for
    finally:
        doccache._attached.pop(doccache._weights(lm.model), None)
