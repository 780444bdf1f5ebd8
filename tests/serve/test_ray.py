"""`setllm serve --replicas 2` on a local Ray instance (one for the whole module, on the CPU):
every answer equals the single server's bit for bit, errors included; a set of documents
goes to the replica that holds it, in any order; /metrics shows each replica's cache and the
router's decisions; SIGTERM drains as the single server does. About 45 s, most of it Ray's start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("ray.serve")

from fastapi.testclient import TestClient  # noqa: E402
from server_process import listening_url  # noqa: E402

from setllm.serve.ray.ingress import REPLICA_HEADER, stat_total  # noqa: E402

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
DOCS = ["Paris is in France.", "Rome is in Italy.", "Bern is in Switzerland.", "Oslo is in Norway.", "Lima is in Peru."]
START_S = 150
N_RUNNING = 24  # generations running when the stop comes
SRC = str(Path(__file__).resolve().parents[2] / "src")


def flags(model_dir: str, adapter: str) -> list[str]:
    return ["--model", model_dir, "--adapter", "none", "--adapter", f"extra={adapter}", "--variant", "sbp", "--cache-mb", "10",
            "--no-batch-check", "--api-key", KEY, "--max-batch-size", "2"]  # batches, small enough that a stop finds requests still running


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """The tiny llama with room for the tools a chat shows the model (1024 positions, not 256)."""
    from tiny import save_model_dir

    return save_model_dir(tmp_path_factory.mktemp("tiny-llama"), max_position_embeddings=1024)


@pytest.fixture(scope="module")
def adapter(model_dir, tmp_path_factory):
    from tiny import tiny_adapter

    return tiny_adapter(model_dir, tmp_path_factory.mktemp("adapter") / "extra", seed=3, variant="sbp")


@pytest.fixture(scope="module")
def ray_server(model_dir, adapter):
    """``(process, url)``: `setllm serve --replicas 2` on a free loopback port."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "SETLLM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([SRC, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}
    proc = subprocess.Popen([sys.executable, "-m", "setllm", "serve", "--port", "0", "--replicas", "2", *flags(model_dir, adapter)],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    try:
        yield proc, listening_url(proc, time.monotonic() + START_S)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def one_server(model_dir, adapter):
    """The single server of the same flags, in-process."""
    from setllm.cli import build_parser
    from setllm.cli.common import config_from_args
    from setllm.cli.serve import replica_app
    from setllm.serve import ServeConfig

    _, parser = build_parser("serve")
    args = parser.parse_args(flags(model_dir, adapter))
    with TestClient(replica_app(args, config_from_args(ServeConfig, args)), raise_server_exceptions=False) as client:
        yield client


REQUESTS = [
    ("POST", "/v1/answer", {"documents": DOCS, "question": "Where is Rome?", "max_new_tokens": 4}),
    ("POST", "/v1/answer", {"documents": DOCS[::-1], "question": "Where is Rome?", "max_new_tokens": 4}),
    ("POST", "/v1/score", {"prompt": "Read:\n{{" + "||".join(DOCS) + "}} Which one?", "options": [" Paris", " Rome"]}),
    ("POST", "/v1/score", {"prompt": "Read:\n{{" + "||".join(DOCS[1:]) + "}} Which one?"}),
    ("POST", "/v1/choose", {"question": "Which city?", "options": ["Paris", "Rome", "Bern"]}),
    ("POST", "/v1/generate", {"prompt": "Read:\n{{" + "||".join(DOCS[:3]) + "}} Say:", "max_new_tokens": 5}),
    ("POST", "/v1/answer", {"documents": DOCS[::-1], "question": "Where is Rome?", "max_new_tokens": 4, "adapter": "extra"}),
    ("POST", "/v1/score", {"prompt": "Read:\n{{" + "||".join(DOCS) + "}} Which one?", "options": [" Paris"], "adapter": "base"}),
    ("POST", "/v1/judge", {"instruction": "Name a city.", "candidates": ["Paris", "a dog"]}),
    ("GET", "/v1/models", None),
    ("POST", "/v1/choose", {"question": "Which city?"}),  # 422
    ("POST", "/v1/choose", {"question": "Which?", "options": ["a", "b"], "adapter": "nope"}),  # 404
    ("POST", "/v1/generate", {"prompt": "x", "max_new_tokens": 100000}),  # 400 (--max-generate-tokens)
]


def ask(client, method: str, path: str, body, headers=AUTH):
    return client.request(method, path, json=body, headers=headers) if body is not None else client.request(method, path, headers=headers)


def test_every_answer_equals_the_single_servers_bit_for_bit(ray_server, one_server):
    _, url = ray_server
    with httpx.Client(base_url=url, timeout=60) as ray:
        for method, path, body in REQUESTS * 2:  # the second time from the replicas' caches
            got, want = ask(ray, method, path, body), ask(one_server, method, path, body)
            assert (got.status_code, got.json()) == (want.status_code, want.json()), path
            assert got.headers.get(REPLICA_HEADER)
        for path, body in [("/v1/completions", {"prompt": "Read: {{a||b}} Then", "max_tokens": 3, "logprobs": 2, "temperature": 0}),
                           ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "seed": 7})]:
            got, want = ray.post(path, json=body, headers=AUTH).json(), one_server.post(path, json=body, headers=AUTH).json()
            assert got["choices"] == want["choices"] and got["usage"] == want["usage"]
        assert ray.post("/v1/choose", content=b"{oops", headers={**AUTH, "content-type": "application/json"}).json() == \
            one_server.post("/v1/choose", content=b"{oops", headers={**AUTH, "content-type": "application/json"}).json()
        for path in ("/v1/models", "/metrics"):  # the key is asked for, as by the single server
            assert ray.get(path).status_code == one_server.get(path).status_code == 401
        assert ray.get("/health").json()["status"] == "ok" and ray.get("/").status_code == one_server.get("/").status_code == 200


def test_a_set_of_documents_goes_where_it_was_read_in_any_order(ray_server):
    _, url = ray_server
    others = [f"Town {i} is on river {i}." for i in range(5)]
    with httpx.Client(base_url=url, timeout=60) as ray:
        def answer(documents, question):
            r = ray.post("/v1/answer", json={"documents": documents, "question": question, "max_new_tokens": 1}, headers=AUTH)
            assert r.status_code == 200
            return r.headers[REPLICA_HEADER]

        before = ray.get("/metrics", headers=AUTH).text
        where = {answer(others, "First?")}
        orders = [others[::-1], others[2:] + others[:2], [others[i] for i in (3, 0, 4, 1, 2)]]
        where |= {answer(order, f"Question {i}?") for i, order in enumerate(orders)}
        assert len(where) == 1  # every order of the set: the replica that read it
        after = ray.get("/metrics", headers=AUTH).text
    affinity = 'setllm_router_decisions_total{reason="affinity"}'
    assert stat_total(after, "setllm_router_decisions_total") - stat_total(before, "setllm_router_decisions_total") == 4
    assert _value(after, affinity) - _value(before, affinity) >= 3
    assert stat_total(after, "setllm_document_cache_hits") - stat_total(before, "setllm_document_cache_hits") >= 5 * 3
    assert f'setllm_document_cache_hits{{replica="{where.pop()}"}}' in after


def _value(text: str, series: str) -> float:
    return next((float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(series + " ")), 0.0)


STREAMED = [("/v1/completions", {"prompt": "Read: {{a||b}} Then", "max_tokens": 6, "temperature": 0, "logprobs": 1},
             lambda d: d["choices"][0]["text"] if d.get("choices") else "", lambda w: w["choices"][0]["text"]),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "seed": 7},
             lambda d: d["choices"][0]["delta"].get("content", "") if d.get("choices") else "", lambda w: w["choices"][0]["message"]["content"]),
            ("/v1/responses", {"input": "Hi", "max_output_tokens": 6, "temperature": 0},
             lambda d: d.get("delta", "") if d["type"] == "response.output_text.delta" else "", lambda w: w["output"][0]["content"][0]["text"]),
            ("/v1/generate", {"prompt": "Read:\n{{" + "||".join(DOCS[:3]) + "}} Say:", "max_new_tokens": 5},
             lambda d: d["text"] if "model" not in d else "", lambda w: w["text"])]


@pytest.mark.slow
def test_streams_through_the_replicas_join_to_the_single_servers_answers(ray_server, one_server):
    """Each streaming route through the ingress, piece by piece from a replica: the pieces join to
    the single server's answer not streamed, bit for bit."""
    _, url = ray_server
    for path, body, piece, text in STREAMED:
        want = one_server.post(path, json=body, headers=AUTH).json()
        with httpx.stream("POST", url + path, json={**body, "stream": True}, headers=AUTH, timeout=60) as r:
            assert r.status_code == 200 and r.headers[REPLICA_HEADER] and r.headers["content-type"].startswith("text/event-stream"), path
            data = [line[len("data: "):] for line in r.iter_lines() if line.startswith("data: ")]
        events = [json.loads(d) for d in data if d != "[DONE]"]
        assert "".join(piece(e) for e in events) == text(want), path
        assert (data[-1] == "[DONE]") == (path != "/v1/responses"), path


LABELS = ["positive", "negative", "neutral"]
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}},
                                                                        "required": ["unit"]}}} for name in ("find", "add", "ask")]
ORDERS = [(0, 1, 2), (2, 1, 0), (1, 2, 0)]  # each set as listed, reversed, rotated
FRESH = {"id", "created"}  # new on every answer (the answer's, each tool call's)
CHAT = [{"role": "user", "content": "The soup was cold. Sentiment?"}]


def structured_answers(client) -> list[tuple[str, int, dict]]:
    """A json_schema enum on chat, a vLLM choice list on completions and a required tool call
    on chat, each set in every order of :data:`ORDERS`, through the openai SDK: ``(path, status,
    answer less its fresh ids)``."""
    out = []
    for order in ORDERS:
        labels, tools = [LABELS[i] for i in order], [TOOLS[i] for i in order]
        schema = {"type": "object", "properties": {"label": {"enum": labels}}, "required": ["label"], "additionalProperties": False}
        for path, call in [
            ("schema", lambda: client.chat.completions.with_raw_response.create(
                model="setllm", messages=CHAT, max_tokens=16, temperature=0,
                response_format={"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema, "strict": True}})),
            ("choice", lambda: client.completions.with_raw_response.create(
                model="setllm", prompt="The soup was cold. Sentiment:", max_tokens=8, extra_body={"structured_outputs": {"choice": labels}})),
            ("tools", lambda: client.chat.completions.with_raw_response.create(
                model="setllm", messages=CHAT, tools=tools, tool_choice="required", max_tokens=40, temperature=0))]:
            r = call().http_response
            out.append((path, r.status_code, _without(r.json(), FRESH)))
    return out


def _without(value, keys: set[str]):
    if isinstance(value, dict):
        return {k: _without(v, keys) for k, v in value.items() if k not in keys}
    return [_without(v, keys) for v in value] if isinstance(value, list) else value


def test_structured_outputs_and_tools_through_the_replicas_are_the_single_servers_and_order_free(ray_server, one_server):
    openai = pytest.importorskip("openai")
    pytest.importorskip("llguidance")
    _, url = ray_server
    ray = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=60)
    got = structured_answers(ray)
    assert {status for _, status, _ in got} == {200}
    assert got == structured_answers(openai.OpenAI(base_url="http://testserver/v1", api_key=KEY, http_client=one_server, max_retries=0))
    by_path = {path: [(status, answer) for p, status, answer in got if p == path] for path in ("schema", "choice", "tools")}
    assert all(len({json.dumps(a) for a in answers}) == 1 for answers in by_path.values()), "an order of the set changed the answer"
    (_, schema), (_, choice), (_, tools) = (answers[0] for answers in by_path.values())
    assert json.loads(schema["choices"][0]["message"]["content"])["label"] in LABELS and choice["choices"][0]["text"] in LABELS
    call = tools["choices"][0]["message"]["tool_calls"][0]["function"]
    assert tools["choices"][0]["finish_reason"] == "tool_calls" and call["name"] in {"find", "add", "ask"}
    assert json.loads(call["arguments"])["unit"] in ("c", "f")
    streamed = ray.chat.completions.create(model="setllm", messages=CHAT, tools=TOOLS, tool_choice="required", max_tokens=40, temperature=0, stream=True)
    pieces = [d.function for c in streamed if c.choices and c.choices[0].delta.tool_calls for d in c.choices[0].delta.tool_calls]
    assert ("".join(p.name or "" for p in pieces), "".join(p.arguments or "" for p in pieces)) == (call["name"], call["arguments"])


def test_langchain_openai_agents_and_dspy_through_the_replicas(ray_server):
    """The client paths of test_structured_clients.py and test_dspy_client.py, through
    `--replicas 2`: LangChain's ``with_structured_output`` (json_schema and function calling) and
    ``bind_tools``, openai-agents' ``output_type`` (run and streamed) and function tool, on chat
    and Responses, and a DSPy ``Literal`` output field."""
    pytest.importorskip("llguidance")
    from test_structured_clients import langchain_structured_output, langchain_tools, openai_agents_run

    _, url = ray_server
    langchain_structured_output(url, KEY)
    langchain_tools(url, KEY)
    openai_agents_run(url, KEY)
    from test_dspy_client import literal_answers  # last: it skips where dspy is not installed

    literal_answers(url, KEY)


LONG = 500  # tokens: about 1.5 s a generation alone on this CPU, so N_LEFT of them hold both replicas for many seconds
N_LEFT = 24  # long requests whose clients leave (half streamed), four at a time across the replicas
LEFT_BY_S = 1.5  # every one of those clients has closed its socket by then
FREE_WITHIN_S = 4.0  # the replicas' work for them has stopped by then: a few forwards, not the ~10 s it would run on


def leave_early(url: str, streamed: bool) -> bool:
    """A long generation whose client closes its socket: a stream after its first piece, an
    answer not streamed when its read times out. Whether a piece of the answer came."""
    body = {"prompt": "Say:", "max_tokens" if streamed else "max_new_tokens": LONG, "stream": streamed}
    try:
        with httpx.stream("POST", url + ("/v1/completions" if streamed else "/v1/generate"), json=body, headers=AUTH, timeout=LEFT_BY_S) as r:
            return bool(next(r.iter_raw(), b""))
    except httpx.TimeoutException:
        return False


def replica_loads(url: str, seen: dict[str, tuple[float, float]]) -> None:
    """One quick request (it goes to a replica, whose counts come back with its answer), then the
    (in flight, queued) of each replica that answered, as ``/metrics`` shows them, into ``seen``."""
    name = httpx.get(url + "/v1/models", headers=AUTH, timeout=10).headers[REPLICA_HEADER]
    text = httpx.get(url + "/metrics", headers=AUTH, timeout=10).text
    seen[name] = (_value(text, f'setllm_requests_in_flight{{replica="{name}"}}'), _value(text, f'setllm_queue_depth{{replica="{name}"}}'))


def test_clients_that_leave_free_the_replicas_within_a_few_forwards(ray_server):
    """Through the ingress, a client's leaving cancels its replica's work (Ray cancels the
    ingress's call to the replica, the replica's app stops the generation at its next token
    or drops it from the queue), streamed or not: soon after, both replicas are idle, long
    before the generations would have ended."""
    _, url = ray_server
    got = []
    clients = [threading.Thread(target=lambda s=i % 2 == 0: got.append(leave_early(url, s))) for i in range(N_LEFT)]
    for c in clients:
        c.start()
    for c in clients:
        c.join(timeout=30)
    left, seen = time.monotonic(), {}
    assert len(got) == N_LEFT and any(got)  # some streams were running when their clients left
    while len(seen) < 2 or any(any(load) for load in seen.values()):
        assert time.monotonic() < left + FREE_WITHIN_S, f"replicas still busy (in flight, queued): {seen}"
        replica_loads(url, seen)
        time.sleep(0.05)


def test_sigterm_finishes_accepted_requests_turns_new_ones_away_and_stops(ray_server):
    proc, url = ray_server
    results = []

    def generate():
        r = httpx.post(f"{url}/v1/generate", json={"prompt": "Say:", "max_new_tokens": 150}, headers=AUTH, timeout=60)
        results.append((r.status_code, bool(r.json().get("text"))))

    workers = [threading.Thread(target=generate) for _ in range(N_RUNNING)]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 20
    # every request accepted (in flight or answered) before the signal: one arriving after it gets its 503, rightly
    while _value(httpx.get(f"{url}/metrics", headers=AUTH).text, "setllm_endpoint_requests_in_flight") + len(results) < N_RUNNING:
        assert time.monotonic() < deadline, "the requests never started"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    while httpx.get(f"{url}/health", timeout=10).status_code == 200:  # until the drain begins
        assert time.monotonic() < deadline, "the drain never began"
        time.sleep(0.01)
    late = httpx.post(f"{url}/v1/choose", json={"question": "Which?", "options": ["a", "b"]}, headers=AUTH, timeout=10)
    assert late.status_code == 503 and late.json() == {"error": "server is shutting down"}
    for w in workers:
        w.join(timeout=60)
    assert results == [(200, True)] * N_RUNNING  # every accepted request was answered
    proc.wait(timeout=60)
    rest = proc.stderr.read()
    assert proc.returncode == 0, rest
    assert "setllm serve: stopping; finishing" in rest and rest.rstrip().endswith("setllm serve: stopped")
    with pytest.raises(httpx.TransportError):
        httpx.get(url + "/health", timeout=2)
