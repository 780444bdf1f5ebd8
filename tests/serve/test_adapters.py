"""The server over one base model and several adapters (an AdapterBank): a request names its
adapter (field ``adapter``; OpenAI routes: ``model``) and gets the library view's scores (within
1e-5: the server's model thread may run other kernels than the test's); an unknown name is a 404 listing what is served; ``setllm serve --adapter NAME=PATH``
builds the bank."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from tiny import tiny_adapter

from setllm import AdapterBank, mc_prompt, parse_markup
from setllm.cli import build_parser
from setllm.errors import InputError
from setllm.serve import ServeConfig, create_app

QUESTION, OPTIONS = "Which is a fruit?", ["apple", "dog", "car"]
MARKUP = "Pick one:\n{{apple\n||dog\n}}Answer:"


@pytest.fixture(scope="module")
def bank(model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return AdapterBank.from_pretrained(model_dir, {n: tiny_adapter(model_dir, root / n, s) for s, n in enumerate(["a", "judge"], start=1)})


@pytest.fixture
def client(bank):
    views = dict(bank)
    with TestClient(create_app(bank["a"], ServeConfig(), bank["judge"], views), raise_server_exceptions=False) as c:
        yield c


def library_scores(lm):
    return [s.logprob for s in lm.score(mc_prompt(QUESTION, OPTIONS), OPTIONS)]


def test_a_request_reads_with_the_adapter_it_names(client, bank):
    for name in ("a", "judge", "none", "base"):
        r = client.post("/v1/choose", json={"question": QUESTION, "options": OPTIONS, "adapter": name})
        assert r.status_code == 200 and r.json()["scores"] == pytest.approx(library_scores(bank[name]), abs=1e-5), name
        assert r.json()["scores"] != pytest.approx(library_scores(bank["judge" if name == "a" else "a"]), abs=1e-3)
        said = {k: r.json()[k] for k in ("adapter", "variant")}  # every answer says which reading answered
        assert said == {"adapter": bank[name].origin.adapter, "variant": bank[name].variant.name}, name
    assert bank["base"].variant.name == "causal-pe" and bank["none"].variant.name == "setmask-setpe"
    default = client.post("/v1/choose", json={"question": QUESTION, "options": OPTIONS}).json()
    assert default["scores"] == pytest.approx(library_scores(bank["a"]), abs=1e-5)  # the main adapter


def test_judge_defaults_to_the_judge_adapter(client, bank):
    body = {"instruction": "Name a colour.", "candidates": ["red", "a dog"]}
    served = client.post("/v1/judge", json=body).json()
    assert served["scores"] == pytest.approx(bank["judge"].judge(body["instruction"], body["candidates"]).scores, abs=1e-5)
    other = client.post("/v1/judge", json={**body, "adapter": "a"}).json()
    assert other["scores"] == pytest.approx(bank["a"].judge(body["instruction"], body["candidates"]).scores, abs=1e-5)
    assert served["scores"] != pytest.approx(other["scores"], abs=1e-3)


def test_the_openai_model_field_picks_the_adapter(client, bank):
    models = [m["id"] for m in client.get("/v1/models").json()["data"]]
    assert models[1:] == ["a", "judge", "none", "base"]
    for name in ("judge", "base"):
        r = client.post("/v1/completions", json={"model": name, "prompt": MARKUP, "max_tokens": 4, "temperature": 0})
        assert r.status_code == 200 and r.json()["model"] == name
        assert r.json()["choices"][0]["text"] == bank[name].generate(parse_markup(MARKUP), max_new_tokens=4)
    generic = client.post("/v1/completions", json={"model": "setllm", "prompt": MARKUP, "max_tokens": 4, "temperature": 0})
    assert generic.json()["choices"][0]["text"] == bank["a"].generate(parse_markup(MARKUP), max_new_tokens=4)


def test_an_unknown_adapter_is_a_404_naming_what_is_served(client):
    r = client.post("/v1/completions", json={"model": "jduge", "prompt": MARKUP, "max_tokens": 2})
    message = r.json()["error"]["message"]  # OpenAI's error shape on its routes
    assert r.status_code == 404 and "no adapter or model 'jduge'" in message and "a, judge, none, base" in message
    assert client.post("/v1/score", json={"prompt": MARKUP, "adapter": "x"}).status_code == 404
    assert client.get("/health").json()["adapters"] == {"a": client.app.state.service.adapters["a"].origin.adapter,
                                                        "judge": client.app.state.service.adapters["judge"].origin.adapter, "none": None, "base": None}


def test_chat_gives_an_adapter_trained_on_plain_prompts_their_text(model_dir, tmp_path, monkeypatch):
    """An adapter setllm trained on plain prompts by supervised learning (setllm.json: a
    template, chat off, no readout) never read the chat template: chat gives it a message's
    text, as /v1/completions reads it; one trained by preference (a readout) keeps the
    template. A name not served is the 404 before the messages are read."""
    bank = AdapterBank.from_pretrained(model_dir, {"plain": tiny_adapter(model_dir, tmp_path / "p", 3, template="modified"),
                                                   "scorer": tiny_adapter(model_dir, tmp_path / "s", 4, template="modified", readout="mean")})
    with TestClient(create_app(bank["plain"], ServeConfig(batch_check=False), None, dict(bank))) as client:
        def ask(route, name, **body):
            r = client.post(route, json={"model": name, "max_tokens": 4, "temperature": 0, **body})
            return r.status_code, r.json()

        text = {n: ask("/v1/completions", n, prompt=MARKUP)[1] for n in ("plain", "scorer")}
        chat = {n: ask("/v1/chat/completions", n, messages=[{"role": "user", "content": MARKUP}])[1] for n in ("plain", "scorer")}
        assert chat["plain"]["usage"]["prompt_tokens"] == text["plain"]["usage"]["prompt_tokens"]
        assert chat["plain"]["choices"][0]["message"]["content"] == text["plain"]["choices"][0]["text"]
        assert chat["scorer"]["usage"]["prompt_tokens"] > text["scorer"]["usage"]["prompt_tokens"]  # the template's tokens around it
        monkeypatch.setattr(bank.tokenizer, "chat_template", None)
        code, said = ask("/v1/chat/completions", "scorre", messages=[{"role": "user", "content": "Hi"}])
        assert code == 404 and "no adapter or model 'scorre'" in said["error"]["message"] and "plain, scorer, none, base" in said["error"]["message"]
        code, said = ask("/v1/chat/completions", "scorer", messages=[{"role": "user", "content": "Hi"}])
        assert code == 400 and "no chat template" in said["error"]["message"]


def test_serve_builds_a_bank_from_named_adapters(model_dir, tmp_path):
    from setllm.cli.serve import served_models

    x, y = tiny_adapter(model_dir, tmp_path / "x", 5), tiny_adapter(model_dir, tmp_path / "y", 6)
    parser, _ = build_parser("serve")
    args = parser.parse_args(["serve", "--model", model_dir, "--adapter", x, "--adapter", f"extra={y}"])
    lm, judge, adapters = served_models(args)
    assert list(adapters) == ["x", "extra", "none", "base"] and lm is adapters["x"] and judge is None
    assert adapters["extra"].origin.adapter == y and lm.model is adapters["extra"].model  # one copy of the weights
    with pytest.raises(InputError, match="each NAME once"):
        served_models(parser.parse_args(["serve", "--model", model_dir, "--adapter", f"e={x}", "--adapter", f"e={y}"]))
    with pytest.raises(InputError, match="base is already the name"):
        served_models(parser.parse_args(["serve", "--model", model_dir, "--adapter", f"base={x}"]))
    plain, judge, adapters = served_models(parser.parse_args(["serve", "--model", model_dir, "--adapter", x]))
    assert adapters == {} and judge is None and plain.origin.adapter == x  # one adapter, unmerged, as every command reads it


def test_a_model_s_one_named_adapter_is_its_default_reading(model_dir, tmp_path):
    """No adapter shipped for the model and one ``--adapter NAME=PATH``: the user's adapter
    answers a request naming none (not the untrained reading); ``--adapter none`` keeps
    none; with several named, none is the default and the start says how to choose."""
    from setllm.cli.serve import served_models, warn_if_no_default
    from setllm.errors import SetLLMWarning

    x, y = tiny_adapter(model_dir, tmp_path / "x", 5), tiny_adapter(model_dir, tmp_path / "y", 6)
    parser, _ = build_parser("serve")
    lm, _, adapters = served_models(parser.parse_args(["serve", "--model", model_dir, "--adapter", f"mine={x}"]))
    assert list(adapters) == ["mine", "none", "base"] and lm is adapters["mine"] and lm.origin.adapter == x
    lm, _, adapters = served_models(parser.parse_args(["serve", "--model", model_dir, "--adapter", "none", "--adapter", f"mine={x}"]))
    assert lm is adapters["none"]
    two = parser.parse_args(["serve", "--model", model_dir, "--adapter", f"mine={x}", "--adapter", f"other={y}"])
    lm, _, adapters = served_models(two)
    assert lm is adapters["none"]
    with pytest.warns(SetLLMWarning, match="mine, other served, none of them the default.*'model' on the OpenAI routes"):
        assert warn_if_no_default(two)
    assert not warn_if_no_default(parser.parse_args(["serve", "--model", model_dir, "--adapter", f"mine={x}"]))
