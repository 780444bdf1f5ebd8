"""`--replicas` knows the server's routes from the server itself: each POST route's handler
declares how its body becomes the prompts the router keys by (built by the verbs the route
calls) or that it holds no documents (it goes by load), and the ingress reads those
declarations from the routers the app serves; its labels at /metrics are the routes the
replica's app matched. A new route missing its declaration fails here, by name."""

from __future__ import annotations

import json

from setllm import verbs
from setllm.core.doccache.dockeys import document_keys
from setllm.core.text.prompt import parse_markup
from setllm.serve import create_app, declare
from setllm.serve.ray.documents import PROMPTS, request_documents
from setllm.serve.routes import ROUTERS

DOCS = ["Paris is in France.", "Rome is in Italy.", "Bern is in Switzerland."]


def test_every_post_route_of_the_server_declares_what_its_body_holds(lm):
    served = {path for path, operations in create_app(lm).openapi()["paths"].items() if "post" in operations}
    posts = [r for router in ROUTERS for r in router.routes if "POST" in r.methods]
    assert {r.path for r in posts} == served, "the ingress reads the routers the app serves (routes.ROUTERS)"
    undeclared = [r.path for r in posts if not hasattr(r.endpoint, declare.ATTRIBUTE)]
    assert undeclared == [], "declare under its @router.post: @declare.prompts(...) or @declare.no_documents"
    assert set(PROMPTS) == {"/v1/answer", "/v1/choose", "/v1/score", "/v1/generate", "/v1/completions"}


def test_a_requests_documents_are_those_of_the_prompt_its_verb_builds():
    body = {"documents": DOCS, "question": "Where is Rome?"}
    want = document_keys(verbs.answer(DOCS, "Where is Rome?").prompt, "\x00")
    assert request_documents("/v1/answer", json.dumps(body).encode()) == want and len(want) == 3
    choose = {"question": "Which city?", "options": ["Paris", "Rome", "Bern"], "context": "Cities."}
    assert request_documents("/v1/choose", json.dumps(choose).encode()) == document_keys(
        verbs.choose("Which city?", ["Paris", "Rome", "Bern"], "Cities.").prompt, "\x00")
    assert request_documents("/v1/judge", json.dumps({"instruction": "x", "candidates": DOCS}).encode()) == []
    assert request_documents("/v1/answer", b"{oops") == [] and request_documents("/v1/answer", json.dumps({**body, "documents": []}).encode()) == []


def test_a_markup_prompt_s_documents_are_those_of_its_set_and_token_ids_hold_none():
    markup = "Read:\n{{" + "||".join(f"{d}\n" for d in DOCS) + "}}Where is Rome?"
    want = document_keys(parse_markup(markup), "\x00")
    assert len(want) == 3 and request_documents("/v1/score", json.dumps({"prompt": markup}).encode()) == want
    completions = {"model": "m", "prompt": [markup, [1, 2, 3]]}
    assert request_documents("/v1/completions", json.dumps(completions).encode()) == document_keys(parse_markup(markup), "m\x00")
