"""The ingress of `--replicas` without starting Ray: it forwards a request with its documents,
says which replica answered, shows every replica's counts at /metrics (behind the key), turns
requests away while draining, sends a request whose replica died to another one (a stream too,
before its first byte went out), answers 503 when every try failed, and answers every open
request with the single server's JSON 503 on a forced stop."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from starlette.requests import Request
from starlette.testclient import TestClient

from setllm.serve import ServeConfig
from setllm.serve.ray.ingress import REPLICA_HEADER, RETRIES, Ingress, stat_total

pytest.importorskip("ray")
from ray.exceptions import ActorDiedError  # noqa: E402

DOCS = ["Paris is in France.", "Rome is in Italy."]


class FakeEngine:
    """A handle whose replicas answer with the request they got and counts of their own."""

    def __init__(self, deaths: int = 0, fail: Exception | None = None):
        self.sent, self.deaths, self.fail, self.tries = [], deaths, fail, 0

    def remote(self, request):
        async def answer():
            self.tries += 1
            if self.fail is not None:
                raise self.fail
            if self.deaths:  # the replica this try went to died with the request on it
                self.deaths -= 1
                raise ActorDiedError()
            self.sent.append(request)
            name = f"r{len(self.sent) % 2}"
            body = json.dumps({"path": request["path"]}).encode()
            return {"status": 200, "headers": [("content-type", "application/json"), ("content-length", "999")], "body": body,
                    "replica": name, "stats": {"hits": len(self.sent), "misses": 1, "in_flight": 0}, "endpoint": request["path"],
                    "where": {"node": "n1", "pid": f"{100 + len(self.sent) % 2}"}}

        return answer()


def client(engine, **config):
    ingress = Ingress(engine, ServeConfig(**config))

    async def app(scope, receive, send):
        if scope["type"] == "http":
            response = await ingress(Request(scope, receive))
            await response(scope, receive, send)
        else:  # lifespan: nothing to start
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})

    return ingress, TestClient(app, base_url="http://127.0.0.1")  # a loopback Host, as a local client sends


def test_a_host_the_server_does_not_answer_gets_the_single_servers_400():
    """A keyless loopback fleet answers loopback Host names only (DNS rebinding), as one server does."""
    engine = FakeEngine()
    _, http = client(engine)
    r = http.post("/v1/choose", json={"question": "q", "options": ["a", "b"]}, headers={"host": "rebound.example:8000"})
    assert r.status_code == 400 and r.json() == {"error": "this server answers requests for 127.0.0.1, ::1, localhost only (--allowed-hosts)"}
    r = http.post("/v1/chat/completions", json={"messages": []}, headers={"host": "rebound.example"})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("this server answers requests for")  # OpenAI's error object
    assert engine.sent == []  # nothing reached a replica
    _, anyone = client(FakeEngine(), allowed_hosts="*")
    assert anyone.get("/health", headers={"host": "rebound.example"}).status_code == 200


def test_forwards_with_documents_and_names_the_replica():
    engine = FakeEngine()
    _, http = client(engine)
    r = http.post("/v1/answer?x=1", json={"documents": DOCS, "question": "Where?"}, headers={"X-Test": "yes"})
    assert r.status_code == 200 and r.json() == {"path": "/v1/answer"} and r.headers[REPLICA_HEADER] == "r1"
    assert r.headers["content-length"] == str(len(r.content))  # the replica's own length is not trusted blindly
    sent = engine.sent[0]
    assert sent["method"] == "POST" and sent["query"] == "x=1" and ("x-test", "yes") in sent["headers"] and len(sent["documents"]) == 2
    assert http.get("/health").status_code == 200 and engine.sent[1]["documents"] == []


def test_metrics_show_every_replica_behind_the_key():
    engine = FakeEngine()
    _, http = client(engine, api_key="k")
    for _ in range(3):
        http.post("/v1/choose", json={}, headers={"Authorization": "Bearer k"})
    assert http.get("/metrics").status_code == 401
    text = http.get("/metrics", headers={"Authorization": "Bearer k"}).text
    assert 'setllm_document_cache_hits{replica="r1"} 3' in text and 'setllm_document_cache_hits{replica="r0"} 2' in text
    assert stat_total(text, "setllm_document_cache_misses") == 2 and stat_total(text, "setllm_replica_requests_total") == 3
    assert 'setllm_requests_total{endpoint="/v1/choose",status="200"} 3' in text and "setllm_router_decisions_total" in text
    assert 'setllm_replica_info{replica="r0",node="n1",pid="100"} 1' in text  # where each replica runs


def test_a_request_whose_replica_died_goes_to_another():
    engine = FakeEngine(deaths=RETRIES)
    _, http = client(engine)
    r = http.post("/v1/choose", json={"question": "Which?"})
    assert r.status_code == 200 and r.json() == {"path": "/v1/choose"} and engine.tries == RETRIES + 1 and len(engine.sent) == 1
    assert "setllm_endpoint_retries_total 2" in http.get("/metrics").text


@pytest.mark.parametrize("engine", [FakeEngine(deaths=RETRIES + 1), FakeEngine(fail=RuntimeError("a bug"))], ids=["every-try-died", "not-a-death"])
def test_a_request_no_replica_answered_is_a_503_to_retry(engine):
    _, http = client(engine)
    deaths = engine.deaths
    r = http.post("/v1/choose", json={})
    assert r.status_code == 503 and r.headers["retry-after"] == "1" and r.json() == {"error": "the replica answering this request stopped; retry it"}
    assert engine.tries == (RETRIES + 1 if deaths else 1)  # only a replica's death is tried again


def test_draining_turns_new_requests_away():
    engine = FakeEngine()
    ingress, http = client(engine)
    assert asyncio.run(ingress.drain()) == 0
    for path in ("/v1/choose", "/health"):
        r = http.post(path, json={}) if path != "/health" else http.get(path)
        assert r.status_code == 503 and r.json() == {"error": "server is shutting down"}
    assert "setllm_draining 1" in http.get("/metrics").text


class HangingEngine:
    """A handle whose replica never answers (its request stays open until the endpoint stops)."""

    def __init__(self):
        self.waiting = threading.Event()

    def remote(self, request):
        async def answer():
            self.waiting.set()
            await asyncio.sleep(3600)

        return answer()


def test_a_forced_stop_answers_every_open_request_with_the_single_servers_503():
    engine = HangingEngine()
    ingress, http = client(engine)
    got = []
    with http:  # one event loop for the requests and the stop, as in the ingress's replica
        asker = threading.Thread(target=lambda: got.append(http.post("/v1/generate", json={"prompt": "x"})))
        asker.start()
        assert engine.waiting.wait(10) and ingress.in_flight == 1
        assert http.portal.call(ingress.stop) == 1
        asker.join(10)
    assert got[0].status_code == 503 and got[0].json() == {"error": "server stopped before this request finished"}
    assert ingress.in_flight == 0 and ingress.draining
