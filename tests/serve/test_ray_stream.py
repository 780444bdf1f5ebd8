"""Streams through `--replicas` without starting Ray: a replica (`EngineReplica.stream`, the very
app of `setllm serve` called in-process) sends its status and headers, then each piece as the
app sends it, and a reader that stops frees the model at once; the ingress passes the pieces on
as they come, names the replica, and counts the stream as in flight until its end."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from starlette.requests import Request
from starlette.testclient import TestClient

from setllm.serve import ServeConfig, create_app
from setllm.serve.ray.ingress import REPLICA_HEADER, Ingress

pytest.importorskip("ray")
from setllm.serve.ray.replica import EngineReplica, call_asgi  # noqa: E402

BODY = {"prompt": "Pick one:\\n{{apple\\n||dog\\n}}Answer:", "max_tokens": 8, "temperature": 0}


def request(path: str, body: dict) -> dict:
    return {"method": "POST", "path": path, "query": "", "headers": [("content-type", "application/json")], "body": json.dumps(body).encode(),
            "documents": []}


class LocalReplica(EngineReplica):
    """The replica outside Ray: started and stopped by the test (``stop``: Ray's ``__del__``)."""

    def __del__(self):  # Ray awaits the async one; here the garbage collector would not
        pass

    async def stop(self):
        await EngineReplica.__del__(self)


async def replica_of(lm) -> LocalReplica:
    replica = LocalReplica.__new__(LocalReplica)
    await replica.__init__(lambda: create_app(lm, ServeConfig(batch_check=False)))
    return replica


def test_a_replica_streams_the_single_servers_answer(lm):
    async def main():
        replica = await replica_of(lm)
        try:
            _, _, whole = await call_asgi(replica.app, request("/v1/completions", BODY))
            pieces = [p async for p in replica.stream(request("/v1/completions", {**BODY, "stream": True}))]
            return json.loads(whole), pieces
        finally:
            await replica.stop()

    whole, pieces = asyncio.run(main())
    head, *body, stats = pieces
    assert head["status"] == 200 and head["replica"] == "local" and ("content-type", "text/event-stream; charset=utf-8") in head["headers"]
    assert "in_flight" in stats["stats"] and all(isinstance(p, bytes) for p in body) and len(body) > 2
    data = [json.loads(line[6:]) for line in b"".join(body).decode().split("\n\n") if line.startswith("data: {")]
    assert "".join(d["choices"][0]["text"] for d in data) == whole["choices"][0]["text"]


def test_a_replica_whose_reader_leaves_frees_the_model_at_once(lm):
    from serve_helpers import slow_forwards

    async def main():
        replica = await replica_of(lm)
        try:
            pieces = replica.stream(request("/v1/completions", {**BODY, "max_tokens": 200, "stream": True}))
            await pieces.__anext__()  # the status
            await pieces.__anext__()  # a first piece
            assert replica.service.batcher.running == 1
            left = time.monotonic()
            await pieces.aclose()  # as Ray cancels the replica's stream when the ingress's client leaves
            while replica.service.batcher.running and time.monotonic() < left + 5:
                await asyncio.sleep(0.01)
            return replica.service.batcher.running, time.monotonic() - left
        finally:
            await replica.stop()

    with slow_forwards(lm, 0.05):
        running, took = asyncio.run(main())
    assert running == 0 and took < 2.0  # 200 tokens would take 10 s


class StreamingEngine:
    """A handle whose replica streams three pieces; records that the stream was cancelled."""

    def __init__(self):
        self.cancelled, self.ingress = False, None

    def options(self, stream: bool, method_name: str):
        assert stream and method_name == "stream"
        return self

    def remote(self, sent):
        engine = self

        class Pieces:
            def __init__(self):
                self.items = [{"status": 200, "headers": [("content-type", "text/event-stream"), ("content-length", "9")], "replica": "r7"},
                              b"data: 1\n\n", b"data: 2\n\n", {"stats": {"in_flight": 1}}, b"data: [DONE]\n\n"]

            def __aiter__(self):
                return self

            async def __anext__(self):
                if not self.items:
                    raise StopAsyncIteration
                if engine.ingress.in_flight != 1:  # the stream counts as in flight until its end
                    raise AssertionError(f"in flight: {engine.ingress.in_flight}")
                return self.items.pop(0)

            def cancel(self):
                engine.cancelled = True

        return Pieces()


def test_the_ingress_passes_a_stream_on_and_counts_it_until_its_end():
    engine = StreamingEngine()
    ingress = engine.ingress = Ingress(engine, ServeConfig())

    async def app(scope, receive, send):
        response = await ingress(Request(scope, receive))
        await response(scope, receive, send)

    r = TestClient(app, base_url="http://127.0.0.1").post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "stream": True})
    assert r.status_code == 200 and r.text == "data: 1\n\ndata: 2\n\ndata: [DONE]\n\n" and r.headers[REPLICA_HEADER] == "r7"
    assert r.headers["content-type"] == "text/event-stream" and "content-length" not in r.headers
    assert ingress.in_flight == 0 and engine.cancelled and ingress.replicas["r7"] == {"in_flight": 1} and ingress.answered == {"r7": 1}


class DyingStreamEngine:
    """A handle whose replicas' streams die: the first ``before`` of them before their first
    piece of body, then one after ``after`` pieces (None: it ends well)."""

    def __init__(self, before: int, after: int | None = None):
        self.before, self.after, self.tries = before, after, 0

    def options(self, stream: bool, method_name: str):
        return self

    def remote(self, sent):
        from ray.exceptions import ActorDiedError

        self.tries += 1
        dies_at = 1 if self.tries <= self.before else (None if self.after is None else 1 + self.after)
        items = [{"status": 200, "headers": [("content-type", "text/event-stream")], "replica": f"r{self.tries}"},
                 b"data: 1\n\n", b"data: 2\n\n", {"stats": {}}, b"data: [DONE]\n\n"]

        class Pieces:  # as Ray's streaming response: async iteration, and cancel()
            def __init__(self):
                self.at = 0

            def __aiter__(self):
                return self

            async def __anext__(self):
                if self.at == dies_at:
                    raise ActorDiedError()
                if self.at == len(items):
                    raise StopAsyncIteration
                self.at += 1
                return items[self.at - 1]

            def cancel(self):
                pass

        return Pieces()


def ingress_client(engine):
    ingress = Ingress(engine, ServeConfig())

    async def app(scope, receive, send):
        response = await ingress(Request(scope, receive))
        await response(scope, receive, send)

    return ingress, TestClient(app, base_url="http://127.0.0.1")  # a loopback Host, as a local client sends


def test_a_stream_whose_replica_died_before_its_first_byte_goes_to_another():
    engine = DyingStreamEngine(before=2)
    ingress, http = ingress_client(engine)
    r = http.post("/v1/completions", json={"prompt": "x", "stream": True})
    assert r.status_code == 200 and r.text == "data: 1\n\ndata: 2\n\ndata: [DONE]\n\n" and r.headers[REPLICA_HEADER] == "r3"
    assert engine.tries == 3 and ingress.retried == 2 and ingress.in_flight == 0


def test_a_stream_whose_replica_died_after_its_first_byte_ends_with_an_error_event():
    engine = DyingStreamEngine(before=0, after=1)
    ingress, http = ingress_client(engine)
    r = http.post("/v1/completions", json={"prompt": "x", "stream": True})
    assert r.status_code == 200 and engine.tries == 1 and ingress.retried == 0  # part of the answer went out: not sent again
    first, error = r.text.split("\n\n")[:2]
    assert first == "data: 1" and json.loads(error.removeprefix("data: "))["error"]["message"] == "the replica answering this request stopped; retry it"
