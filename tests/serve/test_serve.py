"""setllm serve, happy paths: every endpoint, order invariance, and batching that changes
nothing (tiny random models, no network)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from serve_helpers import concurrently, serving

from setllm import Set, mc_prompt, parse_markup
from setllm.serve import ServeConfig, create_app

QUESTION = "Which city is the capital of France?"
OPTIONS = ["Paris", "Rome", "Zurich", "Budapest"]
MARKUP = r"Pick one:\n{{apple\n||dog\n||fox\n}}Answer:"
JSON_PROMPT = ["Pick one:\n", {"set": ["fox\n", "apple\n", "dog\n"]}, "Answer:"]


def test_choose_matches_the_library(lm):
    with serving(lm) as client:
        r = client.post("/v1/choose", json={"question": QUESTION, "options": OPTIONS, "context": "Europe."})
    assert r.status_code == 200
    body = r.json()
    choice = lm.choose(QUESTION, OPTIONS, context="Europe.")
    assert body["answer"] == choice.answer and body["index"] == choice.index == OPTIONS.index(body["answer"])
    assert body["scores"] == pytest.approx([s.logprob for s in choice.scores], abs=1e-5)


@pytest.mark.usefixtures("threads")
def test_choose_is_order_invariant_bit_for_bit(lm):
    with serving(lm) as client:
        answers = set()
        for order in itertools.permutations(OPTIONS):
            body = client.post("/v1/choose", json={"question": QUESTION, "options": list(order)}).json()
            assert body["answer"] == order[body["index"]]
            answers.add((body["answer"], tuple(sorted(zip(order, body["scores"])))))
    assert len(answers) == 1  # 24 orderings, one answer, identical scores per option


def test_score_takes_markup_or_the_json_list_form(lm):
    with serving(lm) as client:
        a = client.post("/v1/score", json={"prompt": MARKUP, "options": ["apple", "dog"]})
        b = client.post("/v1/score", json={"prompt": JSON_PROMPT, "options": ["apple", "dog"]})
        c = client.post("/v1/score", json={"prompt": JSON_PROMPT})  # default options: the set's elements
    assert a.status_code == b.status_code == c.status_code == 200
    assert a.json()["scores"] == b.json()["scores"]  # same set, other order: identical
    expected = lm.score(["Pick one:\n", Set(["apple\n", "dog\n", "fox\n"]), "Answer:"], ["apple", "dog"])
    assert a.json()["scores"] == pytest.approx([s.logprob for s in expected], abs=1e-5)
    assert c.json()["scores"][1:] == b.json()["scores"]  # fox, apple, dog: the same apple and dog


def test_generate_matches_the_library(lm):
    with serving(lm) as client:
        r = client.post("/v1/generate", json={"prompt": JSON_PROMPT, "max_new_tokens": 6})
        stopped = client.post("/v1/generate", json={"prompt": MARKUP, "max_new_tokens": 6, "stop": ["e"]})
    assert r.status_code == 200
    prompt = ["Pick one:\n", Set(["fox\n", "apple\n", "dog\n"]), "Answer:"]
    assert r.json() == {"text": lm.generate(prompt, max_new_tokens=6), "model": "setllm", "adapter": None, "variant": "setmask-setpe"}
    assert stopped.json()["text"] == lm.generate(prompt, max_new_tokens=6, stop=["e"])


def test_completions_has_the_openai_shape(lm):
    with serving(lm) as client:
        r = client.post("/v1/completions", json={"model": "setllm", "prompt": MARKUP, "max_tokens": 5, "temperature": 0, "user": "u1"})
        models = client.get("/v1/models").json()
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"id", "object", "created", "model", "choices", "usage"}
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-") and isinstance(body["created"], int)
    assert body["model"] == models["data"][0]["id"]
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["logprobs"] is None and choice["finish_reason"] in ("stop", "length")
    assert choice["text"] == lm.generate(parse_markup(MARKUP), max_new_tokens=5)
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] and 1 <= usage["completion_tokens"] <= 5
    assert choice["finish_reason"] == ("length" if usage["completion_tokens"] == 5 else "stop")



def test_unknown_fields_are_ignored_by_the_openai_routes_and_named_but_refused_by_setllms(lm):
    """OpenAI's clients send fields newer than a server (``stream_options``, ``store``, ...):
    the OpenAI routes answer as without them and name them in a header; setllm's own routes,
    whose clients are setllm's, refuse an unknown field with a 422 naming it."""
    extra = {"store": False, "metadata": {"run": "1"}, "service_tier": "auto"}
    completion = {"prompt": MARKUP, "max_tokens": 3, "temperature": 0}
    chat = {"messages": [{"role": "user", "content": "Pick one:\n{{apple\n||dog\n}}Answer:"}], "max_tokens": 3, "temperature": 0}
    with serving(lm) as client:
        for route, body in (("/v1/completions", completion), ("/v1/chat/completions", chat)):
            plain, more = client.post(route, json=body), client.post(route, json={**body, **extra})
            assert plain.status_code == more.status_code == 200, more.text
            assert more.json()["choices"] == plain.json()["choices"]
            assert more.headers["setllm-ignored-fields"] == "metadata,service_tier,store" and "setllm-ignored-fields" not in plain.headers
            assert "setllm-warning" not in more.headers  # OpenAI's own fields are no typo (store is not stream)
        typo = client.post("/v1/completions", json={**completion, "max_token": 3})
        assert typo.status_code == 200 and typo.headers["setllm-warning"] == "max_token: not a field of this route, ignored; did you mean 'max_tokens'?"
        r = client.post("/v1/choose", json={"question": "Q?", "options": ["a", "b"], "store": False})
        assert r.status_code == 422 and "store" in r.json()["error"]

def test_health_and_metrics(lm):
    with serving(lm) as client:
        client.post("/v1/choose", json={"question": QUESTION, "options": OPTIONS})
        client.post("/v1/choose", json={"question": QUESTION, "options": ["Paris"]})
        health = client.get("/health")
        text = client.get("/metrics")
    assert health.status_code == 200
    assert health.json() | {"in_flight": 0} == {"status": "ok", "model": "setllm", "adapter": None, "judge_adapter": None, "adapters": {},
                                                  "variant": "setmask-setpe", "exact": True, "max_batch_size": 8, "batching": "on", "queued": 0, "in_flight": 0,
                                                  "api_key": False}
    assert text.headers["content-type"].startswith("text/plain; version=0.0.4")
    lines = text.text.splitlines()
    for expected in ('setllm_requests_total{endpoint="/v1/choose",status="200"} 1', 'setllm_requests_total{endpoint="/v1/choose",status="422"} 1',
                     'setllm_request_duration_seconds_count{endpoint="/v1/choose"} 2', "setllm_batch_size_count 1",
                     "setllm_queue_depth 0", "# TYPE setllm_request_duration_seconds histogram", "setllm_max_batch_size 8"):
        assert expected in lines, expected


def _mixed_requests():
    """Permutations of two questions, questions of other lengths, and score requests,
    interleaved so that every batch sees several layouts; concurrent, they share forwards
    only where their layouts match."""
    first = [("/v1/choose", {"question": QUESTION, "options": list(p)}) for p in itertools.islice(itertools.permutations(OPTIONS), 6)]
    second = [("/v1/choose", {"question": "What do plants need?", "options": list(p)}) for p in itertools.permutations(["sunlight", "soil", "rocks"])]
    others = [("/v1/choose", {"question": "Q?", "options": ["fox", "dog"]}),
              ("/v1/choose", {"question": "Why did Remy go to the store?", "options": ["to buy milk", "fox", "the quick brown dog jumps"]}),
              ("/v1/score", {"prompt": MARKUP, "options": ["apple", "fox"]}),
              ("/v1/score", {"prompt": MARKUP, "options": ["apple banana cherry date", "dog"]}),
              ("/v1/score", {"prompt": JSON_PROMPT, "options": ["dog", "apple"]}),
              ("/v1/score", {"prompt": "Say:", "options": ["x"]}), ("/v1/score", {"prompt": "Say:", "options": ["y"]}),
              ("/v1/score", {"prompt": "Hi", "options": ["ok"]}), ("/v1/score", {"prompt": "Yo", "options": ["no"]})]
    return [r for trio in itertools.zip_longest(first, second, others) for r in trio if r is not None]


@pytest.mark.usefixtures("threads")
def test_batched_equals_unbatched_bit_for_bit(wide_lm):
    reqs = _mixed_requests()
    with serving(wide_lm) as client:
        alone = [client.post(path, json=body).json() for path, body in reqs]  # one at a time
    app = create_app(wide_lm, ServeConfig(batch_window_ms=100))
    together = concurrently(app, reqs)
    assert [r.json() for r in together] == alone
    batches = app.state.service.metrics.batch_sizes
    assert batches.counts[0] < sum(batches.counts)  # some forward really held several requests
    no_batching = concurrently(create_app(wide_lm, ServeConfig(max_batch_size=1)), reqs)
    assert [r.json() for r in no_batching] == alone


def test_different_questions_and_lengths_share_a_forward(wide_lm):
    """Fixed shapes make a batch of different questions safe (test above), so it forms."""
    from setllm.core.forward import scoring

    app = create_app(wide_lm, ServeConfig(batch_window_ms=100))
    seen = []
    concurrently(app, _mixed_requests(), before=lambda a: _record_groups(a, seen))
    assert any(len({scoring.prompt_key(p.enc) for p in group}) > 1 for group in seen)
    assert any(len({len(p.enc) for p in group}) > 1 for group in seen)


def _record_groups(app, seen):
    engine = app.state.service.engines.built("main")
    score = engine.score_group

    def recording(group, record=True):
        seen.append(list(group))
        return score(group, record)

    engine.score_group = recording


def test_where_mixed_batches_move_bits_only_identical_requests_share_a_forward(wide_lm, monkeypatch):
    """A device whose batches of different questions move the last bits (the start-up check
    finds it): every ordering of one question is still one computation, so those coalesce;
    different questions never share a forward, and nothing differs from one at a time."""
    from setllm.core.forward import scoring

    real = scoring.score_requests

    def noisy(model, variant, pad_id, requests):  # several prompts in one call: other low bits
        out = real(model, variant, pad_id, requests)
        moved = len({scoring.prompt_key(r.prompt) for r in requests}) > 1
        return [[dataclasses.replace(s, logprob=s.logprob + 1e-6 * moved) for s in row] for row in out]

    monkeypatch.setattr(scoring, "score_requests", noisy)
    orderings = [("/v1/choose", {"question": QUESTION, "options": list(o)}) for o in itertools.permutations(OPTIONS)][:6]
    other = [("/v1/choose", {"question": "Which one is an animal?", "options": list(o)}) for o in itertools.permutations(OPTIONS)][:2]
    reqs = orderings + other
    with serving(wide_lm) as client:
        health = client.get("/health").json()
        alone = [client.post(path, json=body).json() for path, body in reqs]
    assert health["batching"].startswith("identical requests only") and health["max_batch_size"] > 1
    app = create_app(wide_lm, ServeConfig(batch_window_ms=100))
    seen = []
    together = concurrently(app, reqs, before=lambda a: _record_groups(a, seen))
    assert [r.json() for r in together] == alone  # bit for bit, noisy device and all
    assert max(map(len, seen)) > 1  # orderings of one question did share a forward
    assert all(len({p.key for p in group}) == 1 and group[0].key[0] == "same" for group in seen)
    with serving(wide_lm, batch_check=False) as client:
        assert client.get("/health").json()["batching"] == "on"


def test_mc_prompt_of_the_server_is_the_library_template(lm):
    """/v1/choose reads options as the library does: the same set prompt as `setllm choose`."""
    a = lm.score(mc_prompt(QUESTION, OPTIONS), OPTIONS)
    with serving(lm) as client:
        b = client.post("/v1/score", json={"prompt": mc_prompt(QUESTION, OPTIONS).to_json()["prompt"], "options": OPTIONS}).json()
    assert b["scores"] == pytest.approx([s.logprob for s in a], abs=1e-5)


def test_the_openai_client_works(lm):
    openai = pytest.importorskip("openai")
    with serving(lm) as http:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http, max_retries=0)
        completion = client.completions.create(model="setllm", prompt=MARKUP, max_tokens=5, temperature=0, stop=["\n"])
        assert completion.object == "text_completion" and completion.choices[0].text == lm.generate(parse_markup(MARKUP), max_new_tokens=5, stop=["\n"])
        assert [m.id for m in client.models.list()] == ["setllm"]
        with pytest.raises(openai.NotFoundError):  # a name this server does not serve
            client.completions.create(model="gpt-4o", prompt="Hi")
        with pytest.raises(openai.BadRequestError) as error:
            client.completions.create(model="setllm", prompt="Hi", n=2)
        assert error.value.body["message"] == "n: only n=1 is supported" and error.value.param == "n"  # OpenAI's error object


def test_judge_is_order_invariant_and_matches_the_library(lm):
    candidates = ["Paris is the capital.", "Rome, surely.", "It is Lyon."]
    with serving(lm) as client:
        seen = set()
        for order in itertools.permutations(range(3)):
            cands = [candidates[i] for i in order]
            r = client.post("/v1/judge", json={"instruction": "Capital of France?", "candidates": cands})
            assert r.status_code == 200
            body = r.json()
            assert body["best"] == body["ranking"][0] and sorted(body["ranking"]) == [0, 1, 2]
            seen.add((cands[body["best"]], tuple(sorted(zip(cands, body["scores"])))))
        bad = client.post("/v1/judge", json={"instruction": "Q", "candidates": ["only one"]})
        blank = client.post("/v1/judge", json={"instruction": "Q", "candidates": ["a", "  "]})
    assert len(seen) == 1  # every order: the same best candidate and the same score per candidate
    want = lm.judge("Capital of France?", candidates)
    (_, scores), = seen
    assert dict(scores) == pytest.approx(dict(zip(candidates, want.scores)), abs=1e-5)
    assert bad.status_code == 422 and "error" in bad.json()
    # An empty response is a real candidate (models do answer with nothing): judged like the library judges it.
    assert blank.status_code == 200 and blank.json()["scores"] == pytest.approx(lm.judge("Q", ["a", ""]).scores, abs=1e-5)
