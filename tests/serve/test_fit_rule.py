"""One fit rule on every surface: a prompt plus its longest response fits the model's context,
counted in positions. Under `sbp` the text after a set resumes after the longest element,
and under NoPE every position is 0, so there the tokens outrun the positions: a surface
that counted tokens would refuse what another scores."""

from __future__ import annotations

import json

import pytest
from serve_helpers import serving
from tiny import run_cli, saved, tiny_model, tiny_tokenizer

from setllm import SetLLM

CONTEXT = 64  # the tiny model's context, small so the prompts stay short
OPTIONS = ["apple banana cherry", "dog", "fox", "water", "grape fig date"]


@pytest.fixture(scope="module")
def short_model(tmp_path_factory):
    model = tiny_model("llama", max_position_embeddings=CONTEXT)
    return model, saved(model, tmp_path_factory.mktemp("short"))


def _cli(capsys, model_dir: str, variant: str, question: str):
    code, out, err = run_cli(capsys, "choose", question, "--options", *OPTIONS, "--model", model_dir, "--variant", variant, "--json")
    return ("answered", json.loads(out)["answer"]) if code == 0 else ("refused", err.strip().splitlines()[-1].removeprefix("error: "))


def _server(client, question: str):
    r = client.post("/v1/choose", json={"question": question, "options": OPTIONS})
    assert r.status_code in (200, 413), r.text
    return ("answered", r.json()["answer"]) if r.status_code == 200 else ("refused", r.json()["error"])


@pytest.mark.parametrize("variant", ["sbp", "prefix-nope"])
def test_the_server_and_the_cli_refuse_the_same_prompts_in_the_same_words(short_model, variant, capsys):
    model, model_dir = short_model
    lm = SetLLM(model, tiny_tokenizer(), variant)
    questions = ["Which is a fruit?" + " One two three." * k for k in range(2, 12)]
    tokens_past_context = 0
    outcomes = []
    with serving(lm, batch_check=False) as client:
        for q in questions:
            enc = lm.codec.encoder.encode(lm_prompt(q))  # tokens only, unchecked
            longest = max(len(lm.response_ids(lm_prompt(q), o)) for o in OPTIONS)
            tokens_past_context += len(enc) + longest > CONTEXT
            cli, server = _cli(capsys, model_dir, variant, q), _server(client, q)
            assert cli == server, (len(enc), longest, cli, server)
            outcomes.append(cli)
    # The prompts straddle the context: some answered although their tokens do not fit it.
    assert tokens_past_context and "answered" in [o[0] for o in outcomes]
    if variant == "sbp":  # positions grow with the text outside the set: the longest prompts are refused
        assert [o[0] for o in outcomes].count("refused") >= 2 and "longest option" in str(outcomes)


def lm_prompt(question: str):
    from setllm.core.text.templates import mc_prompt

    return mc_prompt(question, OPTIONS)
