"""`--replicas` knows the server's routes from the server itself: each POST route of the app
either declares how its body becomes the prompts the router keys by (built by the verbs the
route calls) or goes by load; the ingress's labels at /metrics are the routes the replica's
app matched. A new route missing from that declaration fails here, by name."""

from __future__ import annotations

import json

from setllm import verbs
from setllm.core.dockeys import document_keys
from setllm.serve import create_app
from setllm.serve.ray.documents import BY_LOAD, PROMPTS, request_documents

DOCS = ["Paris is in France.", "Rome is in Italy.", "Bern is in Switzerland."]


def test_every_post_route_of_the_server_says_how_it_is_routed(lm):
    posts = {path for path, operations in create_app(lm).openapi()["paths"].items() if "post" in operations}
    assert posts == set(PROMPTS) | set(BY_LOAD), f"declare in serve/ray/documents.py: {sorted(posts ^ (set(PROMPTS) | set(BY_LOAD)))}"
    assert not set(PROMPTS) & set(BY_LOAD)


def test_a_requests_documents_are_those_of_the_prompt_its_verb_builds():
    body = {"documents": DOCS, "question": "Where is Rome?"}
    want = document_keys(verbs.answer(DOCS, "Where is Rome?").prompt, "\x00")
    assert request_documents("/v1/answer", json.dumps(body).encode()) == want and len(want) == 3
    choose = {"question": "Which city?", "options": ["Paris", "Rome", "Bern"], "context": "Cities."}
    assert request_documents("/v1/choose", json.dumps(choose).encode()) == document_keys(
        verbs.choose("Which city?", ["Paris", "Rome", "Bern"], "Cities.").prompt, "\x00")
    assert request_documents("/v1/judge", json.dumps({"instruction": "x", "candidates": DOCS}).encode()) == []
    assert request_documents("/v1/answer", b"{oops") == [] and request_documents("/v1/answer", json.dumps({**body, "documents": []}).encode()) == []
