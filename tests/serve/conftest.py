"""Fixtures of the server tests: tiny random models."""

from __future__ import annotations

import pytest
from tiny import tiny_model, tiny_tokenizer

from setllm import SetLLM


@pytest.fixture(autouse=True)
def batch_check_cache(tmp_path, monkeypatch):
    """Each test checks batching afresh: a verdict remembered from another test's (patched)
    model must not decide this one's."""
    from setllm.serve import batch_check

    monkeypatch.setattr(batch_check, "cache_dir", lambda: tmp_path / "setllm-cache")
    return tmp_path / "setllm-cache" / batch_check.CACHE_FILE


@pytest.fixture(scope="module")
def lm():
    return SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")


@pytest.fixture(scope="module")
def wide_lm():
    """128 wide: wide enough that a naive batch (padding, 1-3 row matrix products) changes
    low bits of scores on a typical CPU BLAS; the server's batches must not."""
    model = tiny_model("llama", hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32)
    return SetLLM(model, tiny_tokenizer(), "setmask-setpe")
