"""Structured outputs on `setllm serve` through real clients over a loopback port (a tiny random
model): the openai SDK's ``chat.completions.parse`` and ``responses.parse`` with a pydantic model,
``json_object``, vLLM's ``structured_outputs`` and ``guided_*`` fields, LangChain's
``with_structured_output``; permuting an enum or a choice list changes no byte; streamed pieces
join to the unstreamed bytes; a bad schema is a 400 naming its path."""

from __future__ import annotations

import json
from typing import Literal

import httpx
import pytest
from pydantic import BaseModel, create_model
from serve_helpers import openai_client, running
from tiny import tiny_model, tiny_tokenizer

from setllm import SetLLM

openai = pytest.importorskip("openai")
pytest.importorskip("llguidance")
LABELS = ("positive", "negative", "neutral")
MESSAGES = [{"role": "user", "content": "The soup was cold. Sentiment?"}]


def verdict(labels: tuple[str, ...]) -> type[BaseModel]:
    """A pydantic model whose Literal lists ``labels`` in this order."""
    return create_model("Verdict", label=(Literal[labels], ...), sure=(bool, ...))


@pytest.fixture(scope="module")
def url():
    lm = SetLLM(tiny_model("llama", max_position_embeddings=2048), tiny_tokenizer(), "setmask-setpe")  # room for the schema shown
    with running(lm) as (_, _, url):
        yield url


@pytest.fixture(scope="module")
def client(url):
    return openai_client(url)


def test_parse_with_a_pydantic_model_is_order_free(client):
    outs = [client.chat.completions.parse(model="setllm", messages=MESSAGES, response_format=verdict(order), temperature=0, max_tokens=64)
            for order in (LABELS, LABELS[::-1])]
    assert all(o.choices[0].message.parsed.label in LABELS for o in outs)
    assert outs[0].choices[0].message.content == outs[1].choices[0].message.content


def test_responses_parse_and_json_object(client):
    out = client.responses.parse(model="setllm", input="The soup was cold.", text_format=verdict(LABELS), max_output_tokens=64)
    assert out.output_parsed.label in LABELS
    obj = client.chat.completions.create(model="setllm", messages=MESSAGES, response_format={"type": "json_object"}, max_tokens=64)
    if obj.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(obj.choices[0].message.content), dict)


def test_vllm_choice_on_chat_and_completions_and_guided_names(client):
    said = set()
    for order in (list(LABELS), list(LABELS[::-1])):
        chat = client.chat.completions.create(model="setllm", messages=MESSAGES, extra_body={"structured_outputs": {"choice": order}})
        text = client.completions.create(model="setllm", prompt="The soup was cold. Sentiment:", max_tokens=8,
                                         extra_body={"guided_choice": order})
        said |= {("chat", chat.choices[0].message.content), ("text", text.choices[0].text)}
    assert len(said) == 2 and {t for _, t in said} <= set(LABELS)
    regex = client.completions.create(model="setllm", prompt="Code:", max_tokens=8, extra_body={"structured_outputs": {"regex": "[0-9]{3}"}})
    assert len(regex.choices[0].text) == 3 and regex.choices[0].text.isdigit()


def test_streamed_pieces_join_to_the_answer(client):
    form = {"type": "json_schema", "json_schema": {"name": "v", "schema": verdict(LABELS).model_json_schema(), "strict": True}}
    whole = client.chat.completions.create(model="setllm", messages=MESSAGES, response_format=form, max_tokens=64, temperature=0)
    pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="setllm", messages=MESSAGES, response_format=form, max_tokens=64, temperature=0, stream=True) if c.choices]
    assert len([p for p in pieces if p]) > 1 and "".join(pieces) == whole.choices[0].message.content


@pytest.mark.parametrize("body, words", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "v", "schema": {"type": "object", "properties": {"a": {"type": "nope"}}}}}},
     "response_format.json_schema.schema: schema.properties.a.type: "),
    ({"structured_outputs": {"regex": "[a-"}}, "regex: the grammar engine cannot compile it"),
    ({"guided_decoding_backend": "xgrammar"}, "guided_decoding_backend: not supported (the grammar engine is llguidance); use structured_outputs"),
    ({"structured_outputs": {"choice": ["a"], "regex": "a"}}, "structured_outputs: one of"),
    ({"response_format": {"type": "xml"}}, "response_format.type: one of text, json_object, json_schema"),
])
def test_bad_structure_is_a_400_naming_it(url, body, words):
    r = httpx.post(f"{url}/v1/chat/completions", json={"messages": MESSAGES, **body}, timeout=30)
    error = r.json()["error"]
    assert r.status_code == 400 and words in (error["message"] if isinstance(error, dict) else error), r.text  # OpenAI's shape or setllm's


def test_langchain_with_structured_output(url):
    langchain_structured_output(url)


def langchain_structured_output(url: str, key: str = "unused") -> None:
    """LangChain's ``with_structured_output`` (json_schema) gives one of the labels (also run through ``--replicas``, test_ray.py)."""
    langchain = pytest.importorskip("langchain_openai")
    chat = langchain.ChatOpenAI(base_url=f"{url}/v1", api_key=key, model="setllm", temperature=0, max_tokens=64, max_retries=0)
    out = chat.with_structured_output(verdict(LABELS), method="json_schema").invoke("The soup was cold. Sentiment?")
    assert out.label in LABELS


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 6}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}}}
ADD = {"type": "function", "function": {"name": "add", "description": "Add two digits.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}, "b": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["a", "b"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_tool_calls_are_order_free_and_continue(client):
    outs = [client.chat.completions.create(model="setllm", messages=ASK, tools=order, tool_choice="required", max_tokens=96, temperature=0)
            for order in ([WEATHER, ADD], [ADD, WEATHER])]
    calls = [o.choices[0].message.tool_calls[0] for o in outs]
    assert all(o.choices[0].finish_reason == "tool_calls" for o in outs)
    assert calls[0].function.name == calls[1].function.name and calls[0].function.arguments == calls[1].function.arguments
    json.loads(calls[0].function.arguments)  # the arguments parse
    named = client.chat.completions.create(model="setllm", messages=ASK, tools=[WEATHER, ADD], max_tokens=96,
                                           tool_choice={"type": "function", "function": {"name": "add"}})
    args = json.loads(named.choices[0].message.tool_calls[0].function.arguments)
    assert named.choices[0].message.tool_calls[0].function.name == "add" and set(args) == {"a", "b"}
    call = named.choices[0].message.tool_calls[0]
    after = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
             {"role": "tool", "tool_call_id": call.id, "content": "7"}]
    none = client.chat.completions.create(model="setllm", messages=after, tools=[WEATHER, ADD], tool_choice="none", max_tokens=8)
    assert none.choices[0].message.tool_calls is None and none.choices[0].finish_reason in ("stop", "length")


def test_a_streamed_call_joins_to_the_call(client):
    kwargs = {"model": "setllm", "messages": ASK, "tools": [WEATHER, ADD], "tool_choice": "required", "max_tokens": 96, "temperature": 0}
    whole = client.chat.completions.create(**kwargs).choices[0].message.tool_calls[0]
    deltas = [c.choices[0].delta for c in client.chat.completions.create(**kwargs, stream=True) if c.choices]
    parts = [t for d in deltas for t in d.tool_calls or []]
    assert parts[0].function.name == whole.function.name and parts[0].id
    assert "".join(p.function.arguments or "" for p in parts) == whole.function.arguments


@pytest.mark.parametrize("body, words", [
    ({"tools": [{"type": "code_interpreter"}]}, "tools[0]: only function tools"),
    ({"tools": [WEATHER, WEATHER]}, "tools: two tools are named 'get_weather'"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice: names 'nope'"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "obj"}}}]}, "tools[0].parameters.type: "),
])
def test_bad_tools_are_a_400_naming_them(url, body, words):
    test_bad_structure_is_a_400_naming_it(url, body, words)


def test_langchain_bind_tools_and_function_calling(url):
    langchain_tools(url)


def langchain_tools(url: str, key: str = "unused") -> None:
    """LangChain's ``bind_tools`` with a named tool, and ``with_structured_output`` by function calling."""
    langchain = pytest.importorskip("langchain_openai")
    chat = langchain.ChatOpenAI(base_url=f"{url}/v1", api_key=key, model="setllm", temperature=0, max_tokens=96, max_retries=0)
    said = chat.bind_tools([WEATHER, ADD], tool_choice="add").invoke("Add 2 and 3.")
    assert said.tool_calls[0]["name"] == "add" and set(said.tool_calls[0]["args"]) == {"a", "b"}
    out = chat.with_structured_output(verdict(LABELS), method="function_calling").invoke("The soup was cold. Sentiment?")
    assert out.label in LABELS


def test_openai_agents_output_type_and_a_function_tool(url):
    openai_agents_run(url)


def openai_agents_run(url: str, key: str = "unused") -> None:
    """An Agent with a pydantic ``output_type`` (run and streamed), and one with a function tool it
    must call once (``tool_choice="required"``, reset to auto after the call, the Agent's default)
    on chat completions and on the Responses API."""
    import asyncio

    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    model = agents.OpenAIChatCompletionsModel("setllm", openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0))
    settings = agents.ModelSettings(temperature=0, max_tokens=96)
    judged = agents.Agent(name="judge", instructions="Judge the sentiment.", model=model, model_settings=settings, output_type=verdict(LABELS))
    seen = []

    @agents.function_tool
    def get_weather(city: Literal["Paris", "Rome"]) -> str:  # a random model's free string would run to max_tokens
        """The weather in a city."""
        seen.append(city)
        return "sunny"

    helper_settings = agents.ModelSettings(temperature=0, max_tokens=64, tool_choice="required")
    helper = agents.Agent(name="helper", instructions="Answer with the tool's help.", model=model, tools=[get_weather], model_settings=helper_settings)
    responses = agents.OpenAIResponsesModel("setllm", openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0))
    helper_r = agents.Agent(name="helper", instructions="Answer with the tool's help.", model=responses, tools=[get_weather],
                            model_settings=helper_settings)

    async def main():
        out = await agents.Runner.run(judged, "The soup was cold.")
        streamed = agents.Runner.run_streamed(judged, "The soup was cold.")
        async for _ in streamed.stream_events():
            pass
        called = await agents.Runner.run(helper, "Weather in Paris?", max_turns=3)
        await agents.Runner.run(helper_r, "Weather in Paris?", max_turns=3)  # the Responses API's function_call items
        return out, streamed, called

    out, streamed, called = asyncio.run(main())
    assert out.final_output.label in LABELS and streamed.final_output == out.final_output
    assert len(seen) == 2 and isinstance(called.final_output, str)


def test_responses_tools_run_and_stream(client):
    flat = [{"type": "function", **WEATHER["function"]}, {"type": "function", **ADD["function"]}]
    kwargs = {"model": "setllm", "input": "What is the weather in Paris?", "tools": flat, "max_output_tokens": 96, "temperature": 0,
              "tool_choice": {"type": "function", "name": "get_weather"}}
    out = client.responses.create(**kwargs)
    [call] = out.output
    assert call.type == "function_call" and call.name == "get_weather" and set(json.loads(call.arguments)) == {"city", "unit"}
    events = list(client.responses.create(**kwargs, stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert deltas == call.arguments and events[-1].type == "response.completed"
    after = client.responses.create(model="setllm", tools=flat, tool_choice="none", max_output_tokens=8, input=[
        {"role": "user", "content": "What is the weather in Paris?"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    assert after.output[0].type == "message"


def test_a_malformed_tool_call_in_the_history_is_a_400(url):
    """What the fuzzer sent: an assistant's tool call without its function (it was a 500)."""
    import httpx

    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [{"id": "c1"}]}]
    got = httpx.post(f"{url}/v1/chat/completions", json={"model": "setllm", "messages": messages, "max_tokens": 2}, timeout=60)
    assert got.status_code == 400 and "tool_calls[0]" in got.json()["error"]["message"]
