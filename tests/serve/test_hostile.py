"""`setllm serve` under hostile and careless clients, over real HTTP on a loopback port: every
input dimension bounded with a 4xx before model work (bodies however sent, prompts, set
elements, stop strings, unknown fields, request heads), work that stops when nobody awaits
it, and Host names checked on a keyless loopback server."""

from __future__ import annotations

import json
import socket
import time
import urllib.parse

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from serve_helpers import running
from tiny import tiny_model, tiny_tokenizer

from setllm import SetLLM
from setllm.core.forward.values import GenerationConfig
from setllm.core.text.prompt import as_prompt
from setllm.serve import ServeConfig, guard, server
from setllm.serve.engine import Engine, GenerateJob, ScoreJob
from setllm.serve.errors import Timeout
from setllm.serve.streaming import _begins, _borders

CHOOSE = {"question": "Which city?", "options": ["Paris", "Rome"]}


@pytest.fixture(scope="module")
def served(lm):
    """One keyless loopback server for the module, its head and body timeouts short."""
    patch = pytest.MonkeyPatch()
    patch.setattr(server, "HEADER_TIMEOUT_S", 0.5)
    patch.setattr(guard, "BODY_TIMEOUT_S", 0.5)
    with running(lm, batch_check=False, timeout_s=20) as (srv, _, url):
        yield srv, url
    patch.undo()


@pytest.fixture
def url(served):
    return served[1]


def _chunks(total: int, size: int = 1 << 16):
    for _ in range(total // size):
        yield b" " * size


def test_a_chunked_body_past_the_bound_is_413_before_it_is_read_whole(url):
    r = httpx.post(f"{url}/v1/choose", content=_chunks(10 << 20), headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 413 and r.json() == {"error": f"request body is over {guard.MAX_BODY_BYTES} bytes; at most {guard.MAX_BODY_BYTES}"}
    body = json.dumps(CHOOSE).encode()
    r = httpx.post(f"{url}/v1/choose", content=iter([body[:10], body[10:]]), headers={"content-type": "application/json"})
    assert r.status_code == 200  # a chunked body within the bound is read as any other


def test_unknown_field_names_are_escaped_and_bounded_never_a_5xx(url):
    base = {"prompt": "Hi", "max_tokens": 1}
    odd = {"\u2603": 1, "a\r\nb": 2, "x,y": 3}
    r = httpx.post(f"{url}/v1/completions", json={**base, **odd})
    assert r.status_code == 200, r.text
    names = [urllib.parse.unquote(n) for n in r.headers["setllm-ignored-fields"].split(",")]
    assert sorted(names) == sorted(odd)  # percent-encoded: every name comes back as it was sent
    many = {f"field_{i:03d}_" + "z" * 20: i for i in range(60)}
    r = httpx.post(f"{url}/v1/completions", json={**base, **many})
    header = r.headers["setllm-ignored-fields"]
    assert r.status_code == 200 and len(header) <= 1024 and header.endswith(" more") and "field_000_" in header
    r = httpx.post(f"{url}/v1/completions", json={**base, **{f"f{i}": i for i in range(5000)}})
    assert r.status_code == 400 and r.json()["error"]["message"] == "body: 5000 unknown fields; at most 64 per request"


@pytest.mark.parametrize("path, body, status, message", [
    ("/v1/completions", {"prompt": ["Hi"] * 17, "max_tokens": 1}, 400, "prompt: at most 16 prompts per request (--max-prompts), got 17"),
    ("/v1/completions", {"prompt": ["Hi"] * 17, "max_tokens": 1, "stream": True}, 400, "prompt: at most 16 prompts per request"),
    ("/v1/generate", {"prompt": "Q: {{" + "||".join(f"e{i}" for i in range(300)) + "}} A:", "max_new_tokens": 1}, 400,
     "prompt: at most 256 set elements per prompt (--max-set-elements), got 300"),
    ("/v1/completions", {"prompt": "Hi", "stop": "x" * 1_000_000}, 422, "stop: a stop string has at most 256 characters, got 1000000"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "stop": ["."] * 17}, 422, "stop: at most 16 stop strings, got 17"),
    ("/v1/generate", {"prompt": "Hi", "stop": ["x" * 257]}, 422, "stop[0]: String should have at most 256 characters"),
])
def test_each_input_dimension_is_bounded_with_a_4xx(url, path, body, status, message):
    started = time.monotonic()
    r = httpx.post(f"{url}{path}", json=body, timeout=30)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert (error["message"] if isinstance(error, dict) else error).startswith(message)
    assert time.monotonic() - started < 5  # refused before any model work


def test_a_client_that_leaves_frees_the_model_thread(url, lm):
    """A non-streamed 200-token generation whose client gave up: the model stops within a
    forward, and the next request is answered at once (not after the abandoned one)."""
    handle = lm.model.register_forward_pre_hook(lambda *_: time.sleep(0.05))
    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{url}/v1/generate", json={"prompt": "Say:", "max_new_tokens": 200}, timeout=0.5)
        left = time.monotonic()
        while "setllm_batch_running 1" in httpx.get(f"{url}/metrics").text.splitlines():
            assert time.monotonic() - left < 2, "the abandoned generation held the model"
            time.sleep(0.02)
    finally:
        handle.remove()
    assert httpx.post(f"{url}/v1/choose", json=CHOOSE, timeout=5).status_code == 200


def test_a_stream_whose_client_leaves_while_it_waits_in_the_queue_is_dropped(url, lm):
    """A streamed request queued behind a running generation, whose client leaves before its
    first event: its job leaves the queue at once, not when the running batch ends (then to run
    a generation nobody reads)."""
    import threading

    handle = lm.model.register_forward_pre_hook(lambda *_: time.sleep(0.05))
    first = threading.Thread(target=lambda: _leave_after(url, {"prompt": "Say:", "max_new_tokens": 200}, 3.0))
    try:
        first.start()
        deadline = time.monotonic() + 5
        while "setllm_batch_running 1" not in httpx.get(f"{url}/metrics").text.splitlines():
            assert time.monotonic() < deadline, "the first generation never started"
            time.sleep(0.02)
        _leave_after(url, {"prompt": "Say:", "max_new_tokens": 200, "stream": True}, 0.5)
        left = time.monotonic()
        while "setllm_queue_depth 0" not in httpx.get(f"{url}/metrics").text.splitlines():
            assert time.monotonic() - left < 1.5, "the stream nobody reads stayed queued"
            time.sleep(0.02)
    finally:
        first.join(timeout=10)
        handle.remove()


def _leave_after(url: str, body: dict, seconds: float) -> None:
    """A /v1/generate whose client closes its socket after ``seconds`` without an answer."""
    with pytest.raises(httpx.ReadTimeout), httpx.stream("POST", f"{url}/v1/generate", json=body, timeout=seconds) as r:
        r.read()


def test_a_forward_stops_within_a_layer_once_nobody_awaits_it():
    """The deadline is read before each decoder layer: a prefill stops inside its forward."""
    lm = SetLLM(tiny_model("llama", num_hidden_layers=6), tiny_tokenizer(), "setmask-setpe")
    layers, reason = [], Timeout("request took longer than 1 s (--timeout-s)")
    for layer in lm.model.model.layers:
        layer.register_forward_pre_hook(lambda *_: layers.append(1))

    class Item:
        notes = None

        def __init__(self, job, live_layers):
            self.job, self.live_layers = job, live_layers

        def stop_reason(self):
            return reason if len(layers) > self.live_layers else None

    prompt = as_prompt("Q: {{a||b||c}} A:")
    for job in (ScoreJob(prompt, ("a", "b")), GenerateJob(prompt, GenerationConfig(max_new_tokens=4))):
        layers.clear()
        assert Engine(lm).run([Item(job, live_layers=2)]) == [reason]
        assert len(layers) == 3  # the third layer saw the stop: the forward went no further
    layers.clear()
    assert Engine(lm).run([Item(ScoreJob(prompt, ("a", "b")), live_layers=10**6)])[0].logprobs  # unbothered, it answers


def test_host_names_on_a_keyless_loopback_server(url):
    port = urllib.parse.urlsplit(url).port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST"):
        assert httpx.post(f"{url}/v1/choose", json=CHOOSE, headers={"host": host}).status_code == 200, host
    for path in ("/v1/choose", "/v1/chat/completions"):
        r = httpx.post(f"{url}{path}", json=CHOOSE, headers={"host": "rebound.example:80"})
        error = r.json()["error"] if r.status_code != 200 else r.text
        assert r.status_code == 400 and "answers requests for 127.0.0.1, ::1, localhost only (--allowed-hosts)" in str(error)
    assert ServeConfig(api_key="k").hosts is None and ServeConfig(host="0.0.0.0").hosts is None  # a key, or the network: any name
    assert ServeConfig(allowed_hosts="api.example, [::1]").hosts == {"api.example", "::1"} and ServeConfig(allowed_hosts="*").hosts is None


def test_head_health_and_half_sent_requests(url):
    r = httpx.head(f"{url}/health")
    assert r.status_code == 200 and r.content == b""
    r = httpx.get(f"{url}/health", headers={"x-big": "a" * guard.MAX_HEADER_BYTES})  # a whole head at once: h11 lets it through
    assert r.status_code == 431 and r.json()["error"].startswith("request headers are ")
    address = urllib.parse.urlsplit(url)
    with socket.create_connection((address.hostname, address.port), timeout=5) as half:  # a request head never finished
        half.sendall(b"POST /v1/choose HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started = time.monotonic()
        assert half.recv(1024) == b"" and time.monotonic() - started < 3  # closed by the server
    with socket.create_connection((address.hostname, address.port), timeout=5) as slow:  # a body never finished
        slow.sendall(b"POST /v1/choose HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{")
        answer = b""
        while chunk := slow.recv(4096):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408 ") and b"the request body was not sent within 0.5 s" in answer
    assert httpx.post(f"{url}/v1/choose", json=CHOOSE).status_code == 200


@given(st.text("ab", max_size=12), st.text("ab", min_size=1, max_size=7))
def test_the_stop_prefix_check_is_the_plain_loops_answer(text, stop):
    if stop in text:  # a whole stop string is cut before this check runs
        return
    plain = max((k for k in range(1, len(stop)) if text.endswith(stop[:k])), default=0)
    assert _begins(text, stop, _borders(stop)) == plain


def test_the_stop_prefix_check_is_linear():
    stop, text = "a" * 20_000 + "b", "x" + "a" * 20_000
    started = time.monotonic()
    assert _begins(text, stop, _borders(stop)) == 20_000
    assert time.monotonic() - started < 0.5  # the plain loop compares 2e8 characters here
