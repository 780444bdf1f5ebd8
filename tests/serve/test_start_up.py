"""Start-up does only what the first request needs: the server answers before the batching
check has run (it runs in the background, then is remembered for the machine), a second copy
of the model for the judge route loads with the first judge request, and a stop signal
during start-up ends the process within seconds."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from fastapi.testclient import TestClient
from serve_helpers import running, settled, slow_forwards

from setllm.loading import Origin
from setllm.serve import ServeConfig, batch_check, create_app
from setllm.serve.batch_check import CHECKING
from setllm.serve.service import DeferredModel

CHOOSE = {"question": "Which city is the capital of France?", "options": ["Paris", "Rome", "Zurich"]}
JUDGE = {"instruction": "Name a colour.", "candidates": ["red", "a dog"]}


def _started(app) -> TestClient:
    return TestClient(app, raise_server_exceptions=False)


def test_the_server_answers_while_it_checks_batching_then_remembers_the_verdict(lm, batch_check_cache, monkeypatch):
    with slow_forwards(lm, 0.2), _started(create_app(lm, ServeConfig())) as client:  # a check that takes a while
        first = client.get("/health").json()["batching"]
        answered = client.post("/v1/choose", json=CHOOSE)
        client.portal.call(settled, client.app.state.service)
        checked = client.get("/health").json()["batching"]
    assert first == CHECKING and answered.status_code == 200 and checked == "on"
    assert list(json.loads(batch_check_cache.read_text()).values()) == [True]

    def never(*_):
        raise AssertionError("the verdict is remembered: no check runs again")

    monkeypatch.setattr(batch_check, "engine_steps", never)
    with _started(create_app(lm, ServeConfig())) as client:
        assert client.get("/health").json()["batching"] == "on"


def test_a_failed_check_is_remembered_and_batches_identical_requests_only(lm, batch_check_cache, monkeypatch):
    monkeypatch.setattr(batch_check, "engine_steps", lambda engine, n: [lambda: True, lambda: False])
    with _started(create_app(lm, ServeConfig())) as client:
        client.portal.call(settled, client.app.state.service)
        after_check = client.get("/health").json()["batching"]
    assert after_check.startswith("identical requests only: a batch of different questions changed low bits")
    assert list(json.loads(batch_check_cache.read_text()).values()) == [False]
    monkeypatch.setattr(batch_check, "engine_steps", lambda engine, n: [lambda: True])  # would pass: not asked again
    with _started(create_app(lm, ServeConfig())) as client:
        assert client.get("/health").json()["batching"] == after_check


def test_the_check_key_changes_with_what_decides_the_kernels(lm, wide_lm):
    from setllm.serve.batch_check import check_key

    assert check_key(lm, 8) == check_key(lm, 8)
    assert len({check_key(lm, 8), check_key(lm, 4), check_key(wide_lm, 8), check_key(lm.with_variant("causal-pe"), 8)}) == 4


def test_a_stop_during_the_check_does_not_wait_for_it(lm, batch_check_cache):
    with slow_forwards(lm, 0.3), running(lm, settle=False) as (server, thread, url):  # the check: 4 steps of >= 0.3 s each
        time.sleep(0.1)
        stopped = time.monotonic()
        server.handle_exit(signal.SIGTERM, None)
        thread.join(timeout=10)
        took = time.monotonic() - stopped
    assert not thread.is_alive() and took < 2.0, took
    assert not batch_check_cache.exists()  # no verdict from half a check


def test_the_judge_copy_loads_with_the_first_judge_request(lm):
    loads = []

    def load():
        loads.append(1)
        return lm

    deferred = DeferredModel(Origin("judge-model", "judge-adapter"), load)
    with _started(create_app(lm, ServeConfig(), judge_lm=deferred)) as client:
        client.portal.call(settled, client.app.state.service)
        health = client.get("/health").json()
        client.post("/v1/choose", json=CHOOSE)
        before_judging = len(loads)
        judged = [client.post("/v1/judge", json=JUDGE).json() for _ in range(2)]
    assert health["judge_adapter"] == "judge-adapter" and before_judging == 0 and len(loads) == 1
    assert [j["adapter"] for j in judged] == ["judge-adapter"] * 2  # the answer names the reading: the judge copy's
    with _started(create_app(lm, ServeConfig())) as client:  # the same weights, loaded up front
        assert [{**j, "adapter": None} for j in judged] == [client.post("/v1/judge", json=JUDGE).json()] * 2


def test_a_judge_copy_that_fails_to_load_fails_its_requests_only(lm):
    def load():
        raise OSError("disk gone")

    with _started(create_app(lm, ServeConfig(), judge_lm=DeferredModel(Origin("m", "a"), load))) as client:
        judged = client.post("/v1/judge", json=JUDGE)
        chosen = client.post("/v1/choose", json=CHOOSE)
    assert judged.status_code == 500 and judged.json() == {"error": "the judge model failed to load (disk gone)"}
    assert chosen.status_code == 200


@pytest.mark.slow
@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, {-signal.SIGTERM}), (signal.SIGINT, {130, -signal.SIGINT})])
def test_a_signal_while_the_model_loads_ends_the_process_at_once(sig, status, tmp_path):
    """The embedded model takes seconds to load: a signal then ends the process as it
    would any program, within seconds: SIGTERM kills it (143 in a shell); Ctrl-C exits 130
    (while torch is being imported the interpreter may end by the signal itself: also 130
    in a shell)."""
    proc = subprocess.Popen([sys.executable, "-m", "setllm", "serve", "--port", "0"], stderr=subprocess.PIPE, text=True)
    time.sleep(2.5)  # past the imports, into the model's loading (it listens after ~6 s here)
    assert proc.poll() is None
    sent = time.monotonic()
    proc.send_signal(sig)
    proc.wait(timeout=30)
    said = proc.stderr.read()
    assert time.monotonic() - sent < 5 and proc.returncode in status, said
    assert "listening" not in said  # the signal came during start-up


@pytest.mark.slow
def test_sigterm_while_the_check_runs_drains_and_exits_cleanly():
    """A first start on a machine checks batching in the background (the embedded model: each
    step takes a while); a SIGTERM then waits for the step on the model thread (a process that
    exits inside a forward aborts) and exits 0 within seconds."""
    from setllm.loading.convert import cache_dir
    from setllm.serve.batch_check import CACHE_FILE

    (cache_dir() / CACHE_FILE).unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "setllm", "serve", "--port", "0"], stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "batching identical requests only, until" in line:  # listening, the check not done
            break
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    proc.wait(timeout=30)
    assert time.monotonic() - sent < 5 and proc.returncode == 0, rest
    assert rest.rstrip().endswith("setllm serve: stopped")


def test_the_batching_check_leaves_no_pieces_in_the_document_cache(batch_check_cache, tmp_path):
    """Under sbp the probes' options are read as documents: the check reads them apart, so
    neither the memory store nor a --cache-dir (which replicas share) keeps them."""
    from tiny import tiny_model, tiny_tokenizer

    from setllm import SetLLM

    folder = tmp_path / "pieces"
    sbp = SetLLM(tiny_model("llama"), tiny_tokenizer(), "sbp")
    with _started(create_app(sbp, ServeConfig(cache_dir=str(folder)))) as client:
        client.portal.call(settled, client.app.state.service)
        assert client.get("/health").json()["batching"] == "on"  # the check ran, through the sbp reading
        stats = client.app.state.service.documents.stats()
        answered = client.post("/v1/choose", json=CHOOSE)
    assert answered.status_code == 200
    assert (stats.entries, stats.misses, stats.disk_writes) == (0, 0, 0)
    assert sorted(folder.glob("*.safetensors"))  # a user's question does leave its pieces
