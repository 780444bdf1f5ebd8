"""Each verb is built once, in the library (``setllm.verbs`` and ``SetLLM``'s request
builders): the library and the server refuse the same inputs in the same words (the server's
400, and 413 for a prompt too long), and accept the rest."""

from __future__ import annotations

import pytest
from serve_helpers import serving

from setllm.core.text.prompt import PromptTooLong
from setllm.errors import InputError

LONG = "Tell me. " * 200  # past the tiny model's 256 positions
DOCS = ["The sky is blue.", "Grass is green."]

# (what is wrong, the library's call, the server's route and body)
CASES = [
    ("blank option", lambda lm: lm.choose("Which?", ["a", " "]),
     "/v1/choose", {"question": "Which?", "options": ["a", " "]}),
    ("blank option to score", lambda lm: lm.score("Q {{a||b}} A:", ["a", ""]),
     "/v1/score", {"prompt": "Q {{a||b}} A:", "options": ["a", ""]}),
    ("blank question", lambda lm: lm.choose("  ", ["a", "b"]),
     "/v1/choose", {"question": "  ", "options": ["a", "b"]}),
    ("empty question", lambda lm: lm.choose("", ["a", "b"]),
     "/v1/choose", {"question": "", "options": ["a", "b"]}),
    ("blank question to answer", lambda lm: lm.answer(DOCS, " "),
     "/v1/answer", {"documents": DOCS, "question": " "}),
    ("blank instruction", lambda lm: lm.judge(" ", ["a", "b"]),
     "/v1/judge", {"instruction": " ", "candidates": ["a", "b"]}),
    ("blank document", lambda lm: lm.answer(["ok", " "], "Why?"),
     "/v1/answer", {"documents": ["ok", " "], "question": "Why?"}),
    ("duplicate options", lambda lm: lm.choose("Which?", ["a", "b", "a "]),
     "/v1/choose", {"question": "Which?", "options": ["a", "b", "a "]}),
    ("too long to choose", lambda lm: lm.choose(LONG, ["a", "b"]),
     "/v1/choose", {"question": LONG, "options": ["a", "b"]}),
    ("too long to score", lambda lm: lm.score(LONG + "{{a||b}} A:", ["a"]),
     "/v1/score", {"prompt": LONG + "{{a||b}} A:", "options": ["a"]}),
    ("too long to answer", lambda lm: lm.answer([LONG, "b"], "Why?"),
     "/v1/answer", {"documents": [LONG, "b"], "question": "Why?"}),
    ("too long with its new tokens", lambda lm: lm.generate("Say:", max_new_tokens=300),
     "/v1/generate", {"prompt": "Say:", "max_new_tokens": 300}),
    ("max_new_tokens 0", lambda lm: lm.generate("Say:", max_new_tokens=0),
     "/v1/generate", {"prompt": "Say:", "max_new_tokens": 0}),
    ("max_new_tokens 0 to answer", lambda lm: lm.answer(DOCS, "Why?", max_new_tokens=0),
     "/v1/answer", {"documents": DOCS, "question": "Why?", "max_new_tokens": 0}),
    ("max_new_tokens below 0", lambda lm: lm.generate("Say:", max_new_tokens=-3),
     "/v1/generate", {"prompt": "Say:", "max_new_tokens": -3}),
]


@pytest.fixture(scope="module")
def client(lm):
    with serving(lm, batch_check=False) as client:
        yield client


@pytest.mark.parametrize("what, call, path, body", CASES, ids=[c[0] for c in CASES])
def test_the_library_and_the_server_refuse_the_same_input_in_the_same_words(lm, client, what, call, path, body):
    with pytest.raises(InputError) as refused:
        call(lm)
    r = client.post(path, json=body)
    assert r.json() == {"error": str(refused.value)}
    assert r.status_code == (413 if isinstance(refused.value, PromptTooLong) else 400)


def test_a_prompt_too_long_for_its_new_tokens_is_refused_before_any_forward(lm):
    """The fit rule runs when a generation request is built: no forward is paid for a
    request that cannot be answered, nor for the prompts beside it."""
    calls = []
    handle = lm.model.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        with pytest.raises(PromptTooLong, match="max_new_tokens"):
            lm.generate_many(["Say:", "Say more:"], max_new_tokens=300)
    finally:
        handle.remove()
    assert calls == []


def test_what_one_surface_accepts_the_other_answers_alike(lm, client):
    """Accepted on both: an empty judge candidate (EOS alone), outer whitespace on options."""
    judged = client.post("/v1/judge", json={"instruction": "Q", "candidates": ["a", " "]}).json()
    assert judged["scores"] == lm.judge("Q", ["a", " "]).scores
    with pytest.warns(UserWarning, match="whitespace stripped"):
        chosen = lm.choose("Which?", [" apple", "dog"])
    served = client.post("/v1/choose", json={"question": "Which?", "options": [" apple", "dog"]}).json()
    assert (served["answer"], served["scores"]) == (chosen.answer, [s.logprob for s in chosen.scores])
