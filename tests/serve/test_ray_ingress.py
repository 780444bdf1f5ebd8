"""The ingress of `--replicas` without Ray: it forwards a request with its documents, says which
replica answered, shows every replica's counts at /metrics (behind the key), turns requests
away while draining, and answers 503 when a replica dies mid-request."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.testclient import TestClient

from setllm.serve import ServeConfig
from setllm.serve.ray.ingress import REPLICA_HEADER, Ingress, stat_total

DOCS = ["Paris is in France.", "Rome is in Italy."]


class FakeEngine:
    """A handle whose replicas answer with the request they got and counts of their own."""

    def __init__(self):
        self.sent, self.fail = [], False

    def remote(self, request):
        async def answer():
            if self.fail:
                raise RuntimeError("ActorDiedError")
            self.sent.append(request)
            name = f"r{len(self.sent) % 2}"
            body = json.dumps({"path": request["path"]}).encode()
            return {"status": 200, "headers": [("content-type", "application/json"), ("content-length", "999")], "body": body,
                    "replica": name, "stats": {"hits": len(self.sent), "misses": 1, "in_flight": 0}}

        return answer()


def client(engine, **config):
    ingress = Ingress(engine, ServeConfig(**config))

    async def app(scope, receive, send):
        response = await ingress(Request(scope, receive))
        await response(scope, receive, send)

    return ingress, TestClient(app)


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


def test_draining_turns_new_requests_away_and_a_dead_replica_is_a_503():
    engine = FakeEngine()
    ingress, http = client(engine)
    engine.fail = True
    r = http.post("/v1/choose", json={})
    assert r.status_code == 503 and r.headers["retry-after"] == "1" and "replica" in r.json()["error"]
    assert ingress.drain() == 0
    for path in ("/v1/choose", "/health"):
        r = http.post(path, json={}) if path != "/health" else http.get(path)
        assert r.status_code == 503 and r.json() == {"error": "server is shutting down"}
    assert "setllm_draining 1" in http.get("/metrics").text
