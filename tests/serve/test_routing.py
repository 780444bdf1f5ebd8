"""The set-aware router's decision, without Ray: a request goes to the replica that holds the
most of its documents whatever their order; without documents, or under imbalanced load, it
goes by load. And a request's documents are read from its body as the server reads it."""

from __future__ import annotations

import itertools
import json

from setllm.core.doccache.dockeys import document_keys
from setllm.serve.ray.documents import request_documents
from setllm.serve.ray.routing import AFFINITY, LOAD, NEW_DOCUMENTS, NO_DOCUMENTS, Decision, Holdings, decide
from setllm.tasks.documents import documents_prompt

DOCS = ["Paris is in France.", "Rome is in Italy.", "Bern is in Switzerland.", "Oslo is in Norway.", "Lima is in Peru."]


def answer(documents, question="Where is Rome?", **more) -> bytes:
    return json.dumps({"documents": documents, "question": question, **more}).encode()


def held(**replicas) -> dict[str, Holdings]:
    out = {}
    for name, documents in replicas.items():
        out[name] = Holdings()
        out[name].add(documents)
    return out


def test_every_order_of_a_set_has_the_same_keys_and_other_sets_others():
    keys = set(request_documents("/v1/answer", answer(DOCS)))
    assert len(keys) == 5
    for order in itertools.islice(itertools.permutations(DOCS), 0, None, 17):
        assert set(request_documents("/v1/answer", answer(list(order), "Another question?"))) == keys
    assert set(request_documents("/v1/answer", answer(DOCS[:2] + ["Kyiv is in Ukraine."]))) & keys == set(keys_of(DOCS[:2]))
    assert request_documents("/v1/answer", answer(DOCS, adapter="judge")) != request_documents("/v1/answer", answer(DOCS))


def keys_of(documents) -> list[str]:
    return request_documents("/v1/answer", answer(documents))


def test_a_document_is_keyed_by_the_text_before_its_set_too():
    a = document_keys(documents_prompt(DOCS, "q"))
    score = json.dumps({"prompt": "Read: {{" + "||".join(DOCS) + "}} Now answer."}).encode()
    b = request_documents("/v1/score", score)
    assert len(b) == 5 and not set(a) & set(b)  # another prefix: another cached piece
    same_prefix = json.dumps({"prompt": "Read: {{" + "||".join(reversed(DOCS)) + "}} Then?", "max_new_tokens": 2}).encode()
    assert sorted(request_documents("/v1/generate", same_prefix)) == sorted(b)


def test_requests_without_one_set_have_no_documents():
    assert request_documents("/v1/score", json.dumps({"prompt": "no set here"}).encode()) == []
    assert request_documents("/v1/score", json.dumps({"prompt": "{{a||b}} and {{c||d}}"}).encode()) == []
    assert request_documents("/v1/answer", b"{not json") == []
    assert request_documents("/v1/answer", answer("one string")) == []  # the replica says it is not a list
    assert request_documents("/health", b"") == []
    assert len(request_documents("/v1/choose", json.dumps({"question": "Which?", "options": ["Paris", "Rome"]}).encode())) == 2


def test_the_replica_holding_the_most_documents_wins_in_any_order():
    keys = keys_of(DOCS)
    holdings = held(a=keys[:2], b=keys[1:5])
    for order in itertools.permutations(keys):
        assert decide(list(order), holdings, {"a": 0, "b": 0}, 4) == decide(keys, holdings, {"a": 0, "b": 0}, 4)
    d = decide(keys, holdings, {"a": 0, "b": 1}, 4)
    assert d.reason == AFFINITY and d.replicas == ("b",)
    tie = decide(keys[1:2], holdings, {"a": 0, "b": 0}, 4)
    assert tie.reason == AFFINITY and set(tie.replicas) == {"a", "b"}  # equal: the less loaded of them


def test_load_decides_without_documents_without_holders_or_when_imbalanced():
    keys = keys_of(DOCS)
    holdings = held(a=keys)
    assert decide([], holdings, {"a": 0, "b": 0}, 4).reason == NO_DOCUMENTS
    assert decide(keys_of(["Kyiv is in Ukraine.", "Riga is in Latvia."]), holdings, {"a": 0, "b": 0}, 4) == Decision(("b",), NEW_DOCUMENTS)
    assert decide(keys, holdings, {"a": 4, "b": 0}, 4).replicas == ("a",)  # a difference of the threshold: still by documents
    imbalanced = decide(keys, holdings, {"a": 6, "b": 1}, 4)
    assert imbalanced.reason == LOAD and imbalanced.replicas == ()
    assert decide(keys, holdings, {}, 4).reason == LOAD


def test_a_set_mostly_new_spreads_to_the_replica_holding_the_fewest_documents():
    keys, more = keys_of(DOCS), keys_of([f"Town {i} is on river {i}." for i in range(8)])
    holdings = held(a=[keys[0], *more], b=more[:3])  # a holds one of the five: not enough to follow it there
    assert decide(keys, holdings, {"a": 0, "b": 0}, 4) == Decision(("b",), NEW_DOCUMENTS)
    holdings["b"].add(keys[1:3])  # b holds two, a one: still under half
    assert decide(keys, holdings, {"a": 0, "b": 0}, 4) == Decision(("b",), NEW_DOCUMENTS)
    holdings["a"].add(keys[1:3])  # a holds three of five
    assert decide(keys[::-1], holdings, {"a": 3, "b": 0}, 4) == Decision(("a",), AFFINITY)
    assert decide(keys, holdings, {"a": 3, "b": 0}, 4, share=0.8).reason == NEW_DOCUMENTS


def test_holdings_keep_the_most_recent_documents():
    h = Holdings(capacity=3)
    h.add(["a", "b", "c"])
    h.add(["a", "d"])  # b is the least recently sent
    assert h.count({"a", "b", "c", "d"}) == 3 and h.count({"b"}) == 0 and len(h) == 3
