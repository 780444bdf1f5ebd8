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
        doccache.forget(lm.model)


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
        doccache.forget(lm.model)


def test_a_server_sharing_a_folder_refuses_a_damaged_file_and_answers_as_cold(tmp_path, caplog):
    """One server writes the folder; a bit of one document's data is flipped; a second server on
    the folder answers exactly as the first did, counts the refusal and names the file."""
    import logging
    import warnings

    from setllm.core.doccache import tier as doctier

    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), "sbp")
    bodies = requests(4, 1)
    try:
        with serving(lm, cache_mb=16, cache_dir=str(tmp_path)) as client:
            probed = set(tmp_path.glob(f"*{doctier.SUFFIX}"))  # what the batching check read
            want = [client.post("/v1/score", json=b).json()["scores"] for b in bodies]
        victim = max(set(tmp_path.glob(f"*{doctier.SUFFIX}")) - probed, key=lambda p: p.stat().st_size)  # a document of the requests
        data = victim.read_bytes()
        at = (8 + int.from_bytes(data[:8], "little") + len(data)) // 2
        victim.write_bytes(data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :])
        doccache.forget(lm.model)  # a second server's process: a cache of its own, the same folder
        with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
            warnings.simplefilter("always")
            got, metrics = answers(lm, bodies, cache_mb=16, cache_dir=str(tmp_path))
        assert got == want
        counts = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines() if line.startswith("setllm_document_cache")}
        assert counts["setllm_document_cache_disk_refused"] == 1
        said = [str(w.message) for w in caught] + [r.getMessage() for r in caplog.records]
        assert any(f"refused {victim.name} " in m and "damaged" in m for m in said) and not any(str(tmp_path) in m for m in said)  # no folder
        assert victim.read_bytes() == data  # computed again, the same bits, and the file replaced
    finally:
        doccache.forget(lm.model)


def test_the_start_up_lines_name_the_answer_reading_and_where_its_documents_are_kept(tmp_path):
    from setllm.serve.app import create_app
    from setllm.serve.config import ServeConfig
    from setllm.serve.server import documents_line

    def line(lm, **config):
        try:
            return documents_line(create_app(lm, ServeConfig(batch_check=False, **config)).state.service)
        finally:
            doccache.forget(lm.model)

    sbp = SetLLM(tiny_model("llama"), tiny_tokenizer(), "sbp")
    assert line(sbp) == "setllm serve: /v1/answer: adapter none, variant sbp; document cache 512 MB in memory"
    assert line(sbp, cache_mb=16, cache_dir=str(tmp_path), cache_dir_mb=100) == (
        f"setllm serve: /v1/answer: adapter none, variant sbp; document cache 16 MB in memory, up to 100 MB on disk in {tmp_path}")
    assert line(sbp, cache_mb=0) == "setllm serve: /v1/answer: adapter none, variant sbp; document cache off (--cache-mb 0)"
    assert line(SetLLM(tiny_model("llama"), tiny_tokenizer())) == (
        "setllm serve: /v1/answer: adapter none, variant setmask-setpe; documents read afresh (the setmask-setpe reading lets each see the question)")
