"""DSPy against `setllm serve` over a loopback port (a tiny random model): a program whose output
field is a ``Literal`` answers one of its values, through the structured route, and the order
the ``Literal`` lists them in changes nothing.

DSPy (3.4) sends ``response_format`` only to a model it knows honours a JSON schema; a local
server's model is in no catalogue, so its provider is declared to DSPy with the support stated
(``dspy.lm15.register_provider``), the public way its docstrings give for an OpenAI-compatible
server. Without that, DSPy's JSONAdapter sends no ``response_format`` at all."""

from __future__ import annotations

import contextlib
import os
from typing import Literal

import pytest
from serve_helpers import running
from tiny import tiny_model, tiny_tokenizer

from setllm import SetLLM

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM's model catalogue from its wheel, not fetched at import
dspy = pytest.importorskip("dspy")
pytest.importorskip("llguidance")
LABELS = ("positive", "negative", "neutral")
PROVIDER = "setllm-test"  # a spelling neither DSPy's registry nor LiteLLM uses


def sentiment(labels: tuple[str, ...]) -> type:
    """A signature whose output field's Literal lists ``labels`` in this order."""
    return dspy.Signature({"review": (str, dspy.InputField()), "label": (Literal[labels], dspy.OutputField())}, "The review's sentiment.")


@pytest.fixture(scope="module")
def url():
    lm = SetLLM(tiny_model("llama", max_position_embeddings=2048), tiny_tokenizer(), "setmask-setpe")
    with running(lm) as (_, _, url):
        yield url


@contextlib.contextmanager
def declared(url: str, key: str = "unused"):
    """A dspy.LM on the server at ``url``, its provider declared as honouring a JSON schema."""
    pytest.importorskip("dspy.lm15", reason="a DSPy that declares providers (3.4 and later)")
    from dspy.lm15 import AccessPolicy, ModelSupport, OpenAIChatCompat, ProviderDefinition, register_provider, unregister_provider

    definition = ProviderDefinition.chat(AccessPolicy(provider=PROVIDER, base_url=f"{url}/v1"), compat=OpenAIChatCompat.preset("vllm"),
                                         placeholder_key=key)
    register_provider(definition, supports=ModelSupport(response_schema=True), replace=True)
    try:
        yield dspy.LM(f"{PROVIDER}/setllm", api_key=key, temperature=0, max_tokens=64, cache=False, num_retries=0)
    finally:
        unregister_provider(PROVIDER)


def literal_answers(url: str, key: str = "unused") -> None:
    """A ``Literal`` output field, listed in two orders, is answered through the structured route
    (also run through ``--replicas``, test_ray.py)."""
    with declared(url, key) as lm:
        assert lm.supports_response_schema and "response_format" in lm.supported_params
        answers = []
        for labels in (LABELS, LABELS[::-1]):
            with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
                answers.append(dspy.Predict(sentiment(labels))(review="The soup was cold.").label)
            sent = lm.history[-1]["kwargs"]["response_format"]  # a pydantic model: on the wire, its json_schema
            assert set(sent.model_json_schema()["properties"]["label"]["enum"]) == set(LABELS)
    assert answers[0] in LABELS and answers[0] == answers[1]  # a random model's free text would not parse as a label


def test_a_literal_output_field_is_answered_through_the_structured_route(url):
    literal_answers(url)
