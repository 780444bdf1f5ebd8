"""setllm serve under bad input and pressure: every failure is a status code and one line
``{"error": ...}``; full queues, timeouts and bugs fail one request, never the server."""

from __future__ import annotations

import time

import pytest
from serve_helpers import concurrently, serving, slow_forwards
from tiny import tiny_model, tiny_tokenizer

from setllm import SetLLM
from setllm.errors import InputError
from setllm.serve import ServeConfig, create_app
from setllm.serve.app import OPENAI_PATHS

TOP_P_MIN = "top_p: Input should be greater than or equal to 0.0000000000000000000000000000000000000117549"
CHOOSE = {"question": "Which city?", "options": ["Paris", "Rome"]}


@pytest.fixture
def fresh_lm():
    """A model of the test's own, to slow down or break."""
    return SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")


BAD = [
    # (path, body, status, error starts with)
    ("/v1/choose", {"options": ["a", "b"]}, 422, "question: Field required"),
    ("/v1/choose", {"question": "q", "options": "ab"}, 422, "options: Input should be a valid list"),
    ("/v1/choose", {"question": "q", "options": []}, 422, "options: List should have at least 2 items"),
    ("/v1/choose", {"question": "q", "options": ["a"]}, 422, "options: List should have at least 2 items"),
    ("/v1/choose", {"question": "q", "options": ["a", 3]}, 422, "options[1]: Input should be a valid string"),
    ("/v1/choose", {"question": "q", "options": [f"o{i}" for i in range(65)]}, 400, "options: at most 64 per request (--max-options), got 65"),
    ("/v1/choose", {"question": "q", "options": ["a", "b"], "option": "c"}, 422, "option: unknown field; did you mean 'options'? (this body takes: "),
    ("/v1/choose", {"question": "q", "option": ["a", "b"]}, 422, "option: unknown field; did you mean 'options'?"),  # not "options: Field required"
    ("/v1/choose", {"question": "q", "options": ["a", "b"], "\u2603\r\n": 1}, 422, "\\u2603\\r\\n: unknown field (this body takes"),
    ("/v1/choose", {"question": "q", "options": ["a", "b", "a"]}, 400, "options: duplicate option 'a'"),
    ("/v1/choose", {"question": "q", "options": ["a", " "]}, 400, "options[1] must be non-empty text"),
    ("/v1/score", {"prompt": "a {{x||", "options": ["x"]}, 400, "markup offset 2: set opened with '{{' is never closed"),
    ("/v1/score", {"prompt": "Q: {{a||b}}", "options": ["a"]}, 400, "the prompt ends with a set"),
    ("/v1/score", {"prompt": ["Q", {"set": []}, "A:"], "options": ["a"]}, 400, "prompt[1]: empty set"),
    ("/v1/score", {"prompt": ["Q", {"sets": ["a"]}, "A:"], "options": ["a"]}, 400, "prompt[1]: a set is written"),
    ("/v1/score", {"prompt": 5, "options": ["a"]}, 422, "prompt: must be a set prompt"),
    ("/v1/score", {"prompt": "Q {{a||b}} A:", "options": []}, 422, "options: List should have at least 1 item"),
    ("/v1/score", {"prompt": "Q {{a||b}} A:", "options": ["a", ""]}, 400, "options[1] must be non-empty text"),
    ("/v1/score", {"prompt": "Q: {{a||b}} and {{c||d}} A:"}, 400, "options default to the elements of the prompt's set, but it has 2 sets"),
    ("/v1/generate", {"prompt": "x", "max_new_tokens": 0}, 400, "max_new_tokens must be >= 1, got 0"),  # the library's words
    ("/v1/generate", {"prompt": "x", "max_new_tokens": 513}, 400, "max_new_tokens: at most 512 on this server (--max-generate-tokens)"),
    ("/v1/generate", {"prompt": "x", "top_p": 0}, 422, TOP_P_MIN),
    ("/v1/completions", {"prompt": "x", "top_p": 5e-324}, 422, TOP_P_MIN),  # 0 in float32: once a 500
    ("/v1/generate", {"prompt": "x", "temperature": 1e-38, "max_new_tokens": 2}, 422, "temperature: must be 0 (greedy) or at least 1e-06"),  # once a 500
    ("/v1/completions", {"prompt": "x", "stop": "", "stream": True}, 422, "stop: a stop string must not be empty"),  # its stream sent text, its answer was ""
    ("/v1/generate", {"prompt": "x", "stop": [""]}, 422, "stop[0]: String should have at least 1 character"),
    ("/v1/generate", {"prompt": "x", "max_new_tokens": "3"}, 422, "max_new_tokens: Input should be a valid integer"),
    ("/v1/generate", {"prompt": "x", "seed": 2**64}, 422, "seed: Input should be less than or equal to"),
    ("/v1/generate", {"prompt": "x", "stop": "\n"}, 422, "stop: Input should be a valid list"),
    ("/v1/completions", {"prompt": "x", "stream": True, "model": "gpt-4o"}, 404, "no adapter or model 'gpt-4o' on this server; it serves: setllm"),
    ("/v1/completions", {"prompt": "x", "stream": True, "max_tokens": 1000}, 400, "max_tokens: at most 512"),  # a status, not an event
    ("/v1/completions", {"prompt": "x", "n": 2}, 400, "n: only n=1 is supported"),
    ("/v1/completions", {"prompt": [1, "y"]}, 422, "prompt: must be a string (setllm markup allowed), a list of strings, a list of token ids"),
    ("/v1/completions", {"prompt": [[1], []]}, 422, "prompt: must be a string"),
    ("/v1/completions", {"prompt": [1, 99999]}, 400, "prompt: token id 99999 is not in the vocabulary"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 1000}, 400, "max_tokens: at most 512"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens: 0 generates nothing; it is only useful with echo: true"),
    ("/v1/completions", {"prompt": "x", "logprobs": 6}, 422, "logprobs: Input should be less than or equal to 5"),
    ("/v1/completions", {"prompt": "x", "suffix": "y"}, 400, "suffix: suffix is not supported"),
    ("/v1/chat/completions", {"messages": []}, 422, "messages: List should have at least 1 item"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "hi"}]}, 422, "messages[0].role: Input should be"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "{{a||b"}], "stream": True}, 400, "markup"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "logprobs": True}, 400, "logprobs: logprobs are not supported on chat"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, 400, "tools[0]: a function needs a name"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "{{a||b"}]}, 400, "markup"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1000}, 400, "max_tokens: at most 512"),
    ("/v1/responses", {"input": []}, 422, "input: "),
    ("/v1/responses", {"input": "hi", "tools": [{"type": "web_search"}]}, 400, "tools[0]: only function tools"),
    ("/v1/responses", {"input": "hi", "previous_response_id": "resp_1"}, 400, "previous_response_id: this server keeps no responses"),
    ("/v1/responses", {"input": [{"type": "reasoning", "summary": []}]}, 400, "input[0]: only text messages"),
    ("/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, 400, "input[0].content: a string"),
    ("/v1/responses", {"input": "hi", "text": {"format": {"type": "xml"}}}, 400, "text.format.type: one of text, json_object, json_schema"),
    ("/v1/responses", {"input": "hi", "max_output_tokens": 1000, "stream": True}, 400, "max_output_tokens: at most 512"),
    ("/v1/generate", {"prompt": "x", "adapter": "nope", "stream": True}, 404, "no adapter or model 'nope'"),
    # a structured answer or a tool call past --max-generate-tokens: the plain request's 400, not a 422 of its own
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 513,
                              "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "boolean"}}}},
     400, "max_tokens: at most 512 on this server (--max-generate-tokens)"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 513,
                              "tools": [{"type": "function", "function": {"name": "say", "parameters": {"type": "object"}}}]},
     400, "max_tokens: at most 512 on this server (--max-generate-tokens)"),
]


@pytest.mark.parametrize("path, body, status, error", BAD, ids=[f"{p}-{e[:30]}" for p, _, _, e in BAD])
def test_bad_input_gets_its_status_and_one_line(lm, path, body, status, error, client_for_bad):
    r = client_for_bad.post(path, json=body)
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error"}
    message = error_line(path, r.json())
    assert "\n" not in message and message.startswith(error), message


def error_line(path: str, body: dict) -> str:
    """The one line of an error: the body's on setllm's routes, its OpenAI error object's message on OpenAI's."""
    if path in OPENAI_PATHS:
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
        return body["error"]["message"]
    assert isinstance(body["error"], str), body
    return body["error"]


@pytest.fixture(scope="module")
def client_for_bad(lm):
    with serving(lm) as client:
        yield client


def test_malformed_json_and_wrong_routes(client_for_bad):
    for content, expected in ((b"{not json", "malformed JSON body: "), (b"[1, 2]", "body: Input should be a valid dictionary")):
        r = client_for_bad.post("/v1/choose", content=content, headers={"content-type": "application/json"})
        assert r.status_code == (400 if b"not" in content else 422) and r.json()["error"].startswith(expected), r.text
    latin1 = '{"question": "caf\xe9?", "options": ["a", "b"]}'.encode("latin-1")
    r = client_for_bad.post("/v1/choose", content=latin1, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json() == {"error": "request body is not UTF-8 text (byte 17); send JSON as UTF-8"}
    r = client_for_bad.get("/v1/nothing")  # an unknown route names every route
    assert r.status_code == 404 and r.json()["error"].startswith("no route GET /v1/nothing on this server; it serves: POST /v1/choose, ")
    assert all(route in r.json()["error"] for route in ("POST /v1/responses", "POST /v1/answer", "GET /v1/models", "GET /health", "GET /"))
    r = client_for_bad.get("/v1/choose")
    assert r.status_code == 405 and r.json() == {"error": "Method Not Allowed"}
    r = client_for_bad.post("/v1/choose", content=b"x" * ((1 << 20) + 1), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"].startswith("request body is")


def test_a_body_without_the_json_content_type_is_told_to_send_it(client_for_bad):
    """curl -d sends application/x-www-form-urlencoded: the answer names the header, not "a valid dictionary"."""
    body = b'{"question": "Which?", "options": ["a", "b"]}'
    for headers, got in (({}, "no Content-Type"), ({"content-type": "application/x-www-form-urlencoded"}, "'application/x-www-form-urlencoded'")):
        r = client_for_bad.post("/v1/choose", content=body, headers=headers)
        assert r.status_code == 422 and r.json() == {"error": "the request body must be JSON sent with the header "
                                                              f"'Content-Type: application/json' (got {got})"}
    assert client_for_bad.post("/v1/choose", content=body, headers={"content-type": "application/json"}).status_code == 200


def test_prompts_too_long_get_413(lm):
    long_question = "apple banana cherry " * 40 + "?"  # > 256 tokens, the tiny model's context
    with serving(lm, max_prompt_tokens=20) as client:
        r = client.post("/v1/choose", json={"question": "Which city is the capital of France?", "options": ["Paris", "Rome"]})
        assert r.status_code == 413 and r.json()["error"].startswith("prompt is ") and "at most 20 (--max-prompt-tokens)" in r.json()["error"]
    with serving(lm) as client:
        r = client.post("/v1/choose", json={"question": long_question, "options": ["Paris", "Rome"]})
        assert r.status_code == 413 and "longer than the model's context (256 tokens)" in r.json()["error"]
        r = client.post("/v1/generate", json={"prompt": "apple " * 60 + "end", "max_new_tokens": 200})
        assert r.status_code == 413 and r.json()["error"].startswith("prompt (") and "max_new_tokens (200)" in r.json()["error"]
        assert client.post("/v1/choose", json=CHOOSE).status_code == 200  # and the server goes on


@pytest.mark.parametrize("extra", [
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "boolean"}}}},
    {"tools": [{"type": "function", "function": {"name": "say", "parameters": {"type": "object"}}}], "tool_choice": "required"},
], ids=["structured", "tool"])
def test_a_structured_or_tool_prompt_past_max_prompt_tokens_gets_the_plain_413(lm, extra):
    body = {"messages": [{"role": "user", "content": "apple banana cherry " * 10}], "max_tokens": 4, **extra}
    with serving(lm, max_prompt_tokens=20) as client:
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 413, r.text
        assert r.json()["error"]["message"].startswith("prompt is ") and "at most 20 (--max-prompt-tokens)" in r.json()["error"]["message"]


@pytest.mark.parametrize("extra", [
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "boolean"}}}},
    {"tools": [{"type": "function", "function": {"name": "say", "parameters": {"type": "object"}}}], "tool_choice": "required"},
], ids=["structured", "tool"])
def test_a_structured_or_tool_prompt_is_tokenized_once_sized_and_read(lm, extra, monkeypatch):
    """The encoding the engine sizes against --max-prompt-tokens is the one the library reads."""
    from setllm.core.tokens.codec import Codec

    encoded = []
    encode = Codec.encode
    monkeypatch.setattr(Codec, "encode", lambda self, prompt: encoded.append(prompt) or encode(self, prompt))
    body = {"messages": [{"role": "user", "content": "Say yes."}], "max_tokens": 8, **extra}
    with serving(lm, max_prompt_tokens=200) as client:
        r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert len(encoded) == 1


def test_a_full_queue_gets_503_with_retry_after(fresh_lm):
    app = create_app(fresh_lm, ServeConfig(max_queue=1, max_batch_size=1, batch_window_ms=0))
    with slow_forwards(fresh_lm, 0.2):
        responses = concurrently(app, [("/v1/choose", CHOOSE)] * 4)
    codes = sorted(r.status_code for r in responses)
    assert 200 in codes and 503 in codes and set(codes) <= {200, 503}
    for r in responses:
        if r.status_code == 503:
            assert r.headers["retry-after"] == "1" and r.json()["error"].startswith("queue is full")


def test_a_slow_request_gets_504_and_frees_the_model(fresh_lm):
    with serving(fresh_lm, timeout_s=0.3) as client:
        with slow_forwards(fresh_lm, 0.05):
            start = time.monotonic()
            r = client.post("/v1/generate", json={"prompt": "Say:", "max_new_tokens": 200})  # ~10 s if it ran on
            assert r.status_code == 504 and r.json() == {"error": "request took longer than 0.3 s (--timeout-s)"}
            assert client.post("/v1/choose", json=CHOOSE).status_code == 200  # the generation stopped
            assert time.monotonic() - start < 3
        with slow_forwards(fresh_lm, 0.5):
            assert client.post("/v1/choose", json=CHOOSE).status_code == 504


LONG = {"type": "object", "properties": {"text": {"type": "string", "minLength": 150}}, "required": ["text"]}  # ~10 s on a slowed model
SAY = [{"role": "user", "content": "Say:"}]
STRUCTURED = {"messages": SAY, "max_tokens": 200, "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": LONG}}}
TOOL = {"messages": SAY, "max_tokens": 200, "tool_choice": "required",
        "tools": [{"type": "function", "function": {"name": "say", "parameters": LONG}}]}


@pytest.mark.parametrize("body", [STRUCTURED, TOOL], ids=["structured", "tool"])
def test_structured_and_tool_requests_keep_the_queue_bound_and_the_deadline(body):
    pytest.importorskip("llguidance")
    fresh_lm = SetLLM(tiny_model("llama", max_position_embeddings=1024), tiny_tokenizer(), "setmask-setpe")  # room for the tool shown
    app = create_app(fresh_lm, ServeConfig(max_queue=1, max_batch_size=1, batch_window_ms=0))
    with slow_forwards(fresh_lm, 0.01):
        codes = sorted(r.status_code for r in concurrently(app, [("/v1/chat/completions", {**body, "max_tokens": 4})] * 4))
    assert 200 in codes and 503 in codes and set(codes) <= {200, 503}
    with serving(fresh_lm, timeout_s=0.3) as client, slow_forwards(fresh_lm, 0.05):
        start = time.monotonic()
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 504 and "request took longer than 0.3 s (--timeout-s)" in r.text
        assert time.monotonic() - start < 3  # not the ~10 s the reading takes whole


def test_a_bug_fails_only_its_request(lm, monkeypatch):
    from setllm.serve.engine import Engine

    score = Engine.score_group

    def buggy(self, group, record=True):  # a bug that strikes any forward holding a 3-option request
        if any(len(p.ids) == 3 for p in group):
            raise RuntimeError("boom")
        return score(self, group, record)

    prompt = "Pick:\\n{{apple\\n||dog\\n||fox\\n}}Answer:"
    good = [("/v1/score", {"prompt": prompt, "options": ["apple", "dog"]}), ("/v1/score", {"prompt": prompt, "options": ["dog", "fox"]})]
    bad = ("/v1/score", {"prompt": prompt, "options": ["apple", "dog", "fox"]})
    with serving(lm) as client:
        expected = [client.post(p, json=b).json() for p, b in good]
    monkeypatch.setattr(Engine, "score_group", buggy)
    app = create_app(lm, ServeConfig(batch_window_ms=100, batch_check=False))
    responses = concurrently(app, [good[0], bad, good[1]])
    assert [r.status_code for r in responses] == [200, 500, 200]
    assert [responses[0].json(), responses[2].json()] == expected  # the batch mates, unharmed
    assert responses[1].json() == {"error": "internal error (RuntimeError); the request was not answered, the server goes on"}


def test_draining_turns_new_requests_away(lm):
    with serving(lm) as client:
        client.app.state.service.start_draining()
        r = client.post("/v1/choose", json=CHOOSE)
        assert r.status_code == 503 and r.headers["retry-after"] == "1" and r.json() == {"error": "server is shutting down"}
        health = client.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "draining"
        assert client.get("/metrics").status_code == 200


@pytest.mark.parametrize("config, message", [
    ({"max_batch_size": 0}, "--max-batch-size must be an integer >= 1, got 0"),
    ({"max_queue": -1}, "--max-queue must be an integer >= 1, got -1"),
    ({"timeout_s": 0}, "--timeout-s must be a positive number of seconds, got 0"),
    ({"batch_window_ms": -1}, "--batch-window-ms must be between 0 and 1000, got -1"),
    ({"max_prompt_tokens": 0}, "--max-prompt-tokens must be an integer >= 1, got 0"),
    ({"port": 70000}, "--port must be at most 65535, got 70000"),
    ({"max_options": 1}, "--max-options must be an integer >= 2, got 1"),
])
def test_config_is_checked(config, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ServeConfig(**config)


def test_cli_flags_fail_in_one_line_before_loading(capsys):
    from setllm.cli.serve import main

    assert main(["--max-batch-size", "0", "--model", "/nonexistent"]) == 2
    assert capsys.readouterr().err == "error: --max-batch-size must be an integer >= 1, got 0\n"
    assert main(["--timeout-s", "soon"]) == 2
    assert "argument --timeout_s/--timeout-s: invalid float value: 'soon'" in capsys.readouterr().err


def test_setllm_serve_subcommand(monkeypatch, capsys):
    """The `setllm serve` entry point, as it runs once COMMANDS lists it."""
    from setllm.cli import COMMANDS, main
    from setllm.cli.serve import HELP

    monkeypatch.setitem(COMMANDS, "serve", ("setllm.cli.serve", HELP))
    assert main(["serve", "--port", "-1"]) == 2
    assert capsys.readouterr().err == "error: --port must be an integer >= 0, got -1\n"
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "--max-batch-size" in out and "--timeout-s" in out and "--model" in out
