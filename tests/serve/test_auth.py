"""``--api-key``: every route but /health and the page needs ``Authorization: Bearer KEY``;
401 with one line otherwise; OpenAI's own client passes with its ``api_key=``. And a request's
``variant`` reads with that variant, as the library's ``with_variant`` view does."""

from __future__ import annotations

import warnings

import pytest
from serve_helpers import serving
from server_process import serve_process

from setllm.errors import InputError, SetLLMWarning
from setllm.serve import ServeConfig
from setllm.serve.app import OPENAI_PATHS

KEY = "s3cret-key"
CHOOSE = {"question": "Which is a fruit?", "options": ["dog", "apple", "car"]}


def test_every_route_but_health_and_the_page_needs_the_key(lm):
    with serving(lm, api_key=KEY) as client:
        assert client.get("/health").status_code == 200 and client.get("/health").json()["api_key"] is True
        page = client.get("/")
        assert page.status_code == 200 and "setllm playground" in page.text
        for method, path, body in [("post", "/v1/choose", CHOOSE), ("post", "/v1/score", {"prompt": "Q:\n{{a\n||b\n}}Answer:"}),
                                   ("get", "/v1/models", None), ("get", "/metrics", None), ("post", "/v1/nowhere", {})]:
            for headers, message in [({}, "this server needs an API key: send the header 'Authorization: Bearer KEY'"),
                                     ({"Authorization": "Bearer wrong"}, "wrong API key"),
                                     ({"Authorization": f"Bearer {KEY}x"}, "wrong API key"),
                                     ({"Authorization": f"Basic {KEY}"}, "the Authorization header must be 'Bearer KEY'"),
                                     ({"Authorization": KEY}, "the Authorization header must be 'Bearer KEY'")]:  # no word of the key
                r = client.request(method, path, json=body, headers=headers)
                got = r.json()["error"]
                if path in OPENAI_PATHS:  # OpenAI's error object, as its SDKs read it
                    assert got["code"] == "invalid_api_key" and got["type"] == "invalid_request_error", got
                    got = got["message"]
                assert (r.status_code, got) == (401, message), (path, headers)
                assert r.headers["www-authenticate"] == "Bearer"
        ok = client.post("/v1/choose", json=CHOOSE, headers={"Authorization": f"Bearer {KEY}"})
        assert ok.status_code == 200 and ok.json()["answer"] == lm.choose(CHOOSE["question"], CHOOSE["options"]).answer
        assert client.get("/metrics", headers={"authorization": f"bearer {KEY}"}).status_code == 200  # the scheme in any case


def test_health_without_the_key_names_nothing_served(lm):
    """An open /health (a load balancer's probe) says only that the server is up and needs a
    key; the model, adapter folders (absolute paths on the server's disk) and the rest come with it."""
    with serving(lm, api_key=KEY) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            assert client.get("/health", headers=headers).json() == {"status": "ok", "api_key": True}
        full = client.get("/health", headers={"Authorization": f"Bearer {KEY}"}).json()
        assert {"model", "adapter", "adapters", "judge_adapter", "variant", "queued"} <= set(full) and full["status"] == "ok"
    with serving(lm) as client:  # no key: everything, to anyone the server answers
        assert set(client.get("/health").json()) == set(full)


def test_without_a_key_nothing_changes(lm):
    with serving(lm) as client:
        assert client.get("/health").json()["api_key"] is False
        assert client.post("/v1/choose", json=CHOOSE).status_code == 200


def test_a_key_from_the_environment_and_the_warning_for_an_open_server(monkeypatch):
    from setllm.cli.serve import with_env_key

    monkeypatch.setenv("SETLLM_API_KEY", KEY)
    assert with_env_key(ServeConfig()).api_key == KEY
    assert with_env_key(ServeConfig(api_key="flag")).api_key == "flag"  # the flag wins
    assert KEY not in repr(with_env_key(ServeConfig()))  # never printed
    monkeypatch.setenv("SETLLM_API_KEY", " padded ")
    with pytest.raises(InputError, match=r"\$SETLLM_API_KEY must be non-empty"):
        with_env_key(ServeConfig())
    monkeypatch.delenv("SETLLM_API_KEY")
    with pytest.warns(SetLLMWarning, match="reachable from the network without an API key"):
        with_env_key(ServeConfig(host="0.0.0.0"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with_env_key(ServeConfig(host="0.0.0.0", api_key=KEY))
        with_env_key(ServeConfig())  # loopback without a key: no warning
    with pytest.raises(InputError, match="--api-key must be non-empty"):
        ServeConfig(api_key="")


def test_the_openai_client_passes_with_its_api_key(model_dir):
    """OpenAI's own client sends its ``api_key`` as a Bearer header: accepted; a wrong one is
    its AuthenticationError carrying the server's one line."""
    import openai

    with serve_process("--model", model_dir, "--adapter", "none", "--api-key", KEY) as (_, url):
        good = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
        out = good.completions.create(model="setllm", prompt="Pick one:\n{{apple\n||dog\n}}Answer:", max_tokens=2, temperature=0)
        assert out.choices[0].text is not None and [m.id for m in good.models.list()]
        bad = openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as err:
            bad.completions.create(model="setllm", prompt="Hello", max_tokens=1)
        assert err.value.status_code == 401 and err.value.body["message"] == "wrong API key" and err.value.code == "invalid_api_key"  # OpenAI's error object


@pytest.mark.parametrize("variant", ["causal-pe", "sbp", "canonical", "setmask-setpe"])
def test_a_request_reads_with_the_variant_it_names(lm, variant):
    view = lm.with_variant(variant)
    with serving(lm) as client:
        r = client.post("/v1/choose", json={**CHOOSE, "variant": variant}).json()
        assert r["scores"] == [s.logprob for s in view.choose(CHOOSE["question"], CHOOSE["options"]).scores]
        s = client.post("/v1/score", json={"prompt": ["Question: Which is a fruit?\n", {"set": ["dog\n", "apple\n"]}, "Answer:"],
                                           "variant": variant}).json()
        assert len(s["scores"]) == 2
        g = client.post("/v1/generate", json={"prompt": "Pick:\n{{dog\n||apple\n}}Answer:", "max_new_tokens": 3, "variant": variant}).json()
        assert g["text"] == view.generate("Pick:\n{{dog\n||apple\n}}Answer:", max_new_tokens=3)
        j = client.post("/v1/judge", json={"instruction": "Name a fruit.", "candidates": ["Apple.", "A dog."], "variant": variant}).json()
        assert j["scores"] == view.judge("Name a fruit.", ["Apple.", "A dog."]).scores


def test_an_unknown_variant_is_a_422_naming_the_choices(lm):
    with serving(lm) as client:
        r = client.post("/v1/choose", json={**CHOOSE, "variant": "sideways"})
        assert r.status_code == 422 and r.json()["error"].startswith("variant: Input should be 'causal-pe', ")


def test_answer_reads_documents_as_the_library_does(lm):
    docs = ["The sky is blue.", "Grass is green.", "Snow is white."]
    with serving(lm) as client:
        for order in (docs, docs[::-1]):
            r = client.post("/v1/answer", json={"documents": order, "question": "What colour is grass?", "max_new_tokens": 6})
            assert r.status_code == 200 and r.json()["answer"] == lm.answer(docs, "What colour is grass?", max_new_tokens=6)
        bad = client.post("/v1/answer", json={"documents": ["ok", " "], "question": "Why?"})
        assert (bad.status_code, bad.json()) == (400, {"error": "documents[1] must be non-empty text, got ' '"})
