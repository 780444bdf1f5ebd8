"""Streaming (server-sent events) on /v1/completions, /v1/chat/completions, /v1/responses and
/v1/generate: the pieces join to the answer not streamed, bit for bit, in every order of the
prompt's set, greedy and seeded; the usage and log-probs are the answer's; a refusal before
the first event is the response's status; a client that leaves frees the model at once; a
stop lets a stream in flight finish. Also: names are checked on every route, and a warning
about a request goes back with it (tiny random models, no network)."""

from __future__ import annotations

import itertools
import json
import random
import signal
import threading
import time

import httpx
import pytest
from serve_helpers import concurrently, running, serving, slow_forwards
from tiny import tiny_tokenizer

from setllm.core.forward.generation import _finish, _hit_stop
from setllm.errors import SetLLMWarning
from setllm.serve import ServeConfig, create_app
from setllm.serve.streaming import TextStream

ITEMS = ["apple\\n", "dog\\n", "fox\\n"]


def markup(order) -> str:
    return "Pick one:\\n{{" + "||".join(order) + "}}Answer:"


def sse(text: str) -> list[tuple[str | None, object]]:
    """``(event name, data)`` of each server-sent event (data: JSON, or "[DONE]")."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = block.split("\n")
        name = next((x[len("event: "):] for x in lines if x.startswith("event: ")), None)
        data = next(x[len("data: "):] for x in lines if x.startswith("data: "))
        out.append((name, data if data == "[DONE]" else json.loads(data)))
    return out


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 1.0, "seed": 7}], ids=["greedy", "seeded"])
def test_streamed_completions_join_to_the_answer_in_every_order(lm, sampling):
    with serving(lm) as client:
        answers = set()
        for order in itertools.permutations(ITEMS):
            body = {"prompt": markup(order), "max_tokens": 12, "logprobs": 2, **sampling}
            whole = client.post("/v1/completions", json=body).json()
            r = client.post("/v1/completions", json={**body, "stream": True, "stream_options": {"include_usage": True}})
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            events = [data for _, data in sse(r.text)]
            assert events[-1] == "[DONE]" and events[-2]["choices"] == [] and events[-2]["usage"] == whole["usage"]
            chunks = events[:-2]
            assert len(chunks) > 2 and all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] and c["usage"] is None for c in chunks)
            text = "".join(c["choices"][0]["text"] for c in chunks)
            (answer,) = whole["choices"]
            assert text == answer["text"]  # bit for bit
            assert chunks[-1]["choices"][0]["finish_reason"] == answer["finish_reason"]
            assert chunks[-1]["choices"][0]["logprobs"] == answer["logprobs"]  # computed after the text, as for the answer
            assert all(c["choices"][0]["finish_reason"] is None and c["choices"][0]["logprobs"] is None for c in chunks[:-1])
            answers.add(text)
    assert len(answers) == 1  # every order of the set: one answer


def test_streams_queue_and_batch_with_every_other_request(lm):
    """Streamed requests are jobs of the one queue, among the others: sent at once, every stream
    joins to the answer not streamed and the scores are a lone request's."""
    body = {"prompt": markup(ITEMS), "max_tokens": 8, "temperature": 0}
    score = {"prompt": markup(ITEMS)}
    with serving(lm) as client:
        whole, alone = client.post("/v1/completions", json=body).json(), client.post("/v1/score", json=score).json()
    sent = [("/v1/completions", {**body, "stream": True})] * 3 + [("/v1/score", score)] * 3 + [("/v1/completions", body)]
    out = concurrently(create_app(lm, ServeConfig()), sent)
    for r in out[:3]:
        assert "".join(d["choices"][0]["text"] for _, d in sse(r.text)[:-1]) == whole["choices"][0]["text"]
    assert all(r.json() == alone for r in out[3:6]) and out[6].json()["choices"] == whole["choices"]


def test_echo_and_several_prompts_stream_each_choice(lm):
    body = {"prompt": [markup(ITEMS), "The quick brown"], "max_tokens": 6, "temperature": 0, "echo": True}
    with serving(lm) as client:
        whole = client.post("/v1/completions", json=body).json()
        events = [d for _, d in sse(client.post("/v1/completions", json={**body, "stream": True}).text)]
    assert events[-1] == "[DONE]" and "usage" not in events[0]
    for choice in whole["choices"]:
        mine = [c["choices"][0] for c in events[:-1] if c["choices"][0]["index"] == choice["index"]]
        assert "".join(c["text"] for c in mine) == choice["text"] and mine[0]["text"].startswith("Pick one:\napple") ^ (choice["index"] == 1)
        assert [c["finish_reason"] for c in mine][-1] == choice["finish_reason"]


def test_streamed_chat_joins_to_the_answer(lm):
    body = {"messages": [{"role": "user", "content": "Pick the fruit:\n{{car\n||apple\n}}Answer:"}], "max_tokens": 8, "temperature": 0}
    with serving(lm) as client:
        whole = client.post("/v1/chat/completions", json=body).json()
        events = [d for _, d in sse(client.post("/v1/chat/completions", json={**body, "stream": True, "stream_options": {"include_usage": True}}).text)]
    assert events[-1] == "[DONE]" and events[-2]["usage"] == whole["usage"] and events[-2]["choices"] == []
    deltas = [c["choices"][0] for c in events[:-2]]
    assert all(c["object"] == "chat.completion.chunk" for c in events[:-2])
    assert deltas[0]["delta"] == {"role": "assistant", "content": ""} and deltas[-1]["delta"] == {}
    assert deltas[-1]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert "".join(d["delta"].get("content", "") for d in deltas) == whole["choices"][0]["message"]["content"]


def test_generate_streams_its_text_then_its_answer(lm):
    body = {"prompt": markup(ITEMS), "max_new_tokens": 10, "stop": ["e"]}
    with serving(lm) as client:
        whole = client.post("/v1/generate", json=body).json()
        events = [d for _, d in sse(client.post("/v1/generate", json={**body, "stream": True}).text)]
    assert events[-1] == "[DONE]" and events[-2] == whole
    assert "".join(e["text"] for e in events[:-2]) == whole["text"]


def test_responses_answers_as_chat_with_instructions(lm):
    chat = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a fruit."}], "max_tokens": 6,
            "temperature": 0}
    forms = [{"input": "Name a fruit."}, {"input": [{"role": "user", "content": "Name a fruit."}]},
             {"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Name a fruit."}]}]}]
    with serving(lm) as client:
        want = client.post("/v1/chat/completions", json=chat).json()
        for form in forms:
            r = client.post("/v1/responses", json={**form, "instructions": "Be brief.", "max_output_tokens": 6, "temperature": 0})
            out = r.json()
            assert r.status_code == 200 and out["object"] == "response" and out["id"].startswith("resp_")
            (message,) = out["output"]
            assert message["content"][0]["text"] == want["choices"][0]["message"]["content"]
            assert out["usage"]["input_tokens"] == want["usage"]["prompt_tokens"] and out["usage"]["output_tokens"] == want["usage"]["completion_tokens"]
            assert out["status"] == ("incomplete" if want["choices"][0]["finish_reason"] == "length" else "completed")


def test_responses_streams_openais_events(lm):
    body = {"input": "Name a fruit.", "instructions": "Be brief.", "max_output_tokens": 6, "temperature": 0}
    with serving(lm) as client:
        whole = client.post("/v1/responses", json=body).json()
        events = sse(client.post("/v1/responses", json={**body, "stream": True}).text)
    names = [n for n, _ in events]
    assert names[:4] == ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    assert names[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done", f"response.{whole['status']}"]
    assert set(names[4:-4]) == {"response.output_text.delta"} and all(d["type"] == n for n, d in events)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    text = whole["output"][0]["content"][0]["text"]
    assert "".join(d["delta"] for _, d in events[4:-4]) == text == events[-4][1]["text"]
    final = events[-1][1]["response"]
    assert final["output"] == [{**whole["output"][0], "id": final["output"][0]["id"]}] and final["usage"] == whole["usage"]


def test_text_stream_never_sends_what_the_answer_leaves_out():
    """Random tokens from each tiny tokenizer, with and without stop strings: everything a
    stream sends begins the answer's own text (stop ids dropped, a half character dropped, cut
    at a stop string), so the last piece completes it."""
    rnd = random.Random(0)
    for kind in ("bpe", "sp", "sp_legacy"):
        tok = tiny_tokenizer(kind)
        eos = {tok.eos_token_id}
        for _ in range(1000):
            stop = rnd.choice([[], ["\n"], [" the"], ["an", "e"], ["\n\n"]])
            stream, kept = TextStream(tok, stop, eos), []
            for t in (rnd.randrange(len(tok)) for _ in range(rnd.randint(1, 12))):
                kept.append(t)
                stream.step(kept)
                if t in eos or (stop and _hit_stop(tok, kept, stop, eos)):
                    break
            assert _finish(tok, kept, stop, eos).startswith(stream.sent), (kind, kept, stop)


def test_text_stream_holds_back_what_a_next_token_may_change():
    tok = tiny_tokenizer()
    ids = tok.encode("Paris is big", add_special_tokens=False)
    stream, sent = TextStream(tok, ["s b"], set()), []
    for k in range(1, len(ids) + 1):
        stream.step(ids[:k])
        sent.append(stream.sent)
    # "Paris" and "Paris " may begin the stop string "s b" (which then comes): held back, never sent
    assert "Pari" in sent and not {"Paris", "Paris "} & set(sent) and sent[-1] == "Paris i" == _finish(tok, ids, ["s b"], set())


def test_a_refusal_before_the_first_event_is_the_status(lm):
    with serving(lm) as client:
        r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi " * 3000}], "max_tokens": 4, "stream": True})
        assert r.status_code == 413 and not r.headers["content-type"].startswith("text/event-stream")
        r = client.post("/v1/completions", json={"prompt": "x", "model": "gpt-4o", "stream": True})
        assert r.status_code == 404 and r.json()["error"]["message"].startswith("no adapter or model 'gpt-4o' on this server; it serves: setllm")
        assert r.json()["error"]["code"] == "model_not_found" and r.json()["error"]["param"] is None


SETLLM_ROUTES = [("/v1/choose", {"question": "Which?", "options": ["a", "b"]}), ("/v1/score", {"prompt": markup(ITEMS)}),
                 ("/v1/judge", {"instruction": "Say hi.", "candidates": ["hi", "no"]}), ("/v1/generate", {"prompt": "x", "max_new_tokens": 1}),
                 ("/v1/answer", {"documents": ["a b.", "c d."], "question": "What?", "max_new_tokens": 1})]
OPENAI_ROUTES = [("/v1/completions", {"prompt": "x", "max_tokens": 1}), ("/v1/responses", {"input": "x", "max_output_tokens": 1}),
                 ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1})]


def test_one_adapter_served_every_other_name_is_a_404_on_every_route(lm):
    """With one adapter (no bank), only no name, "setllm" or the model's own name read it:
    ``base``, ``choose``, a typo or another provider's model name get the 404 listing what is served."""
    with serving(lm) as client:
        for path, body in SETLLM_ROUTES:
            assert client.post(path, json=body).status_code == 200, path
            assert client.post(path, json={**body, "adapter": "setllm"}).status_code == 200, path
            for name in ("nope", "base", "choose"):
                r = client.post(path, json={**body, "adapter": name})
                assert r.status_code == 404 and r.json()["error"] == (f"no adapter or model {name!r} on this server; it serves: setllm "
                                                                      "('setllm' or no name: the default reading)"), (path, name)
        for path, body in OPENAI_ROUTES:
            assert client.post(path, json={**body, "model": "setllm"}).status_code == 200, path
            for name in ("gpt-4o", "base", "choose"):
                for stream in (False, True):
                    r = client.post(path, json={**body, "model": name, "stream": stream})
                    assert r.status_code == 404 and r.json()["error"]["message"].startswith(f"no adapter or model {name!r}"), (path, name)


def test_a_warning_goes_back_with_its_request_and_names_it_in_the_log(lm):
    body = {"prompt": ["Pick one: ", {"set": ["a\n", "b\n"]}, "Answer:"], "max_new_tokens": 2}
    with pytest.warns(SetLLMWarning, match=r"^POST /v1/generate \(request [\w-]+\): a prompt segment ends with a space") as said:
        with serving(lm) as client:  # started inside: the server's hook goes over pytest's recorder
            first = client.post("/v1/generate", json=body, headers={"x-request-id": "mine-1"})
            again = client.post("/v1/generate", json=body)
            streamed = client.post("/v1/generate", json={**body, "stream": True})
            clean = client.post("/v1/generate", json={**body, "prompt": ["Pick one:", {"set": ["a\n", "b\n"]}, "Answer:"]})
    for r in (first, again, streamed):  # every request with the problem hears of it, not only the first in the process
        assert r.status_code == 200 and r.headers["setllm-warning"].startswith("a prompt segment ends with a space or several newlines")
    assert first.headers["x-request-id"] == "mine-1" and len(again.headers["x-request-id"]) == 16
    assert "setllm-warning" not in clean.headers and clean.headers["x-request-id"]
    logged = [str(w.message) for w in said if issubclass(w.category, SetLLMWarning)]
    assert logged[0].startswith("POST /v1/generate (request mine-1): ") and f"(request {again.headers['x-request-id']})" in logged[1]


def _read_stream(url: str, body: dict, got: list, first: threading.Event) -> None:
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r:
        got.append(r.status_code)
        for line in r.iter_lines():
            if line.startswith("data: "):
                got.append(line[len("data: "):])
                first.set()


def test_a_client_that_leaves_frees_its_place_at_once(lm):
    with slow_forwards(lm, 0.05), running(lm) as (server, _, url):
        service = server.service
        with httpx.Client(timeout=60) as http:
            with http.stream("POST", f"{url}/v1/completions", json={"prompt": "Say:", "max_tokens": 200, "stream": True}) as r:
                assert r.status_code == 200
                next(line for line in r.iter_lines() if line.startswith("data: "))
                assert service.batcher.running == 1
            left = time.monotonic()  # the connection is closed: the generation stops at its next token
            while service.batcher.running and time.monotonic() < left + 5:
                time.sleep(0.01)
            assert service.batcher.running == 0 and time.monotonic() - left < 2.0  # 200 tokens would take 10 s
            assert http.post(f"{url}/v1/generate", json={"prompt": "x", "max_new_tokens": 1}).status_code == 200


def test_a_stop_lets_a_stream_in_flight_finish(lm):
    body = {"prompt": markup(ITEMS), "max_tokens": 40, "temperature": 0, "stream": True}
    with slow_forwards(lm, 0.05), running(lm) as (server, thread, url):
        whole = httpx.post(f"{url}/v1/completions", json={**body, "stream": False}, timeout=60).json()["choices"][0]["text"]
        got, first = [], threading.Event()
        reader = threading.Thread(target=_read_stream, args=(url, body, got, first))
        reader.start()
        assert first.wait(30)
        server.handle_exit(signal.SIGTERM, None)
        late = httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=10)
        assert late.status_code == 503
        reader.join(60)
        thread.join(30)
        assert not thread.is_alive()  # the server stopped once the stream was out
    assert got[0] == 200 and got[-1] == "[DONE]"
    assert "".join(json.loads(d)["choices"][0]["text"] for d in got[1:-1]) == whole
