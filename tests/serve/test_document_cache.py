"""setllm serve --cache-mb: documents read under sbp are looked up by content across requests,
by default; the cache never changes a bit of an answer (a cold server's), and /metrics counts
what it did."""

from __future__ import annotations

import random

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
    cold, cold_metrics = answers(lm, bodies, cache_mb=0)
    try:
        warm, metrics = answers(lm, bodies, cache_mb=16)
        assert warm == cold  # the same computation, cache or not: the same bits
        counts = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines() if line.startswith("setllm_document_cache")}
        # 12 requests of 3 documents drawn from 6, one prefix: at most 7 pieces computed, the rest found.
        assert counts["setllm_document_cache_misses"] <= 7 and counts["setllm_document_cache_hits"] >= 12 * 4 - 7
        assert 0 < counts["setllm_document_cache_bytes"] <= counts["setllm_document_cache_max_bytes"] == 16e6
        assert "setllm_document_cache" not in cold_metrics  # 0: off
        _, default_metrics = answers(SetLLM(tiny_model("llama"), tiny_tokenizer(), "sbp"), bodies[:2])
        default = {line.split()[0]: float(line.split()[1]) for line in default_metrics.splitlines() if line.startswith("setllm_document_cache")}
        assert default["setllm_document_cache_max_bytes"] == doccache.DEFAULT_MB * 1e6  # on without being asked
        assert default["setllm_document_cache_misses"] > 0
    finally:
        doccache._attached.pop(doccache._weights(lm.model), None)


def test_a_negative_cache_size_is_refused_in_one_line(capsys):
    from setllm.cli.serve import main

    assert main(["--variant", "sbp", "--cache-mb", "-5", "--model", "/nonexistent"]) == 2
    assert capsys.readouterr().err == "error: --cache-mb must be a number of megabytes >= 0 (0: off), got -5.0\n"


def test_a_cache_the_served_reading_cannot_use_is_said_at_start_up_not_at_a_request(monkeypatch, capsys):
    import warnings

    import setllm.cli.serve as cli
    from setllm.serve import server

    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")
    monkeypatch.setattr(cli, "served_models", lambda args: (lm, None, {}))
    monkeypatch.setattr(server, "open_socket", lambda host, port: None)
    monkeypatch.setattr(server, "serve", lambda app, config, sock: None)
    try:
        assert cli.main(["--cache-mb", "256", "--no-batch-check", "--adapter", "none"]) == 0
        err = capsys.readouterr().err
        assert [line for line in err.splitlines() if line.startswith("warning: --cache-mb")] == [
            "warning: --cache-mb 256: documents are read afresh: variant 'setmask-setpe' lets a document see text it cannot be "
            "cached without (only 'sbp' reads documents apart); only requests read under 'sbp' use the cache"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            answers(lm, requests(2, 0), cache_mb=256)
        assert not [w for w in caught if "afresh" in str(w.message)]
    finally:
        doccache._attached.pop(doccache._weights(lm.model), None)
