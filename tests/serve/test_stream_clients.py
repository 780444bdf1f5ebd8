"""Streaming through clients nobody here wrote, over real HTTP on a loopback port: the `openai`
package (completions, chat and responses streamed), LangChain (`ChatOpenAI.stream`,
`OpenAI.stream`), llama-index (`OpenAILike.stream_complete`) and the openai-agents SDK
(`Runner.run_streamed` with its default model, the Responses API). Each stream joins to the
answer the same client gets without streaming (greedy: bit for bit)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from serve_helpers import openai_client, running

openai = pytest.importorskip("openai")
PROMPT = "Pick the fruit:\n{{car\n||apple\n||house\n}}Answer:"


@contextlib.contextmanager
def answers_end_after(lm, steps: int):
    """The tiny random model says EOS at its ``steps``-th decoding step: answers that end by
    themselves, as a chat model's do (an agent reads a response cut by max_output_tokens as
    incomplete, as OpenAI's)."""
    eos, seen = lm.tokenizer.eos_token_id, [0]

    def hook(module, args, kwargs, output):
        if kwargs["input_ids"].shape[1] > 1:  # a prompt's forward: a new answer begins
            seen[0] = 0
            return
        seen[0] += 1
        if seen[0] >= steps:
            output.logits[..., eos] = output.logits.max() + 100.0

    handle = lm.model.register_forward_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


@pytest.fixture(scope="module")
def url(lm):
    with running(lm) as (_, _, url):
        yield url


@pytest.fixture(scope="module")
def client(url):
    return openai_client(url)


def test_openai_streams_completions_and_chat(client):
    whole = client.completions.create(model="setllm", prompt=PROMPT, max_tokens=10, temperature=0, logprobs=1)
    stream = client.completions.create(model="setllm", prompt=PROMPT, max_tokens=10, temperature=0, logprobs=1, stream=True,
                                       stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].usage == whole.usage and chunks[-2].choices[0].logprobs == whole.choices[0].logprobs
    messages = [{"role": "user", "content": PROMPT}]
    whole = client.chat.completions.create(model="setllm", messages=messages, max_tokens=10, temperature=0)
    chunks = list(client.chat.completions.create(model="setllm", messages=messages, max_tokens=10, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
    assert chunks[-1].usage == whole.usage and chunks[-2].choices[0].finish_reason == whole.choices[0].finish_reason


def test_openai_streams_responses(client):
    whole = client.responses.create(model="setllm", input=PROMPT, instructions="Answer with one word.", max_output_tokens=8, temperature=0)
    events = list(client.responses.create(model="setllm", input=PROMPT, instructions="Answer with one word.", max_output_tokens=8,
                                          temperature=0, stream=True))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == whole.output_text
    assert events[-1].type == f"response.{whole.status}" and events[-1].response.output_text == whole.output_text


def test_langchain_streams_chat_and_completions(url):
    langchain = pytest.importorskip("langchain_openai")
    chat = langchain.ChatOpenAI(base_url=f"{url}/v1", api_key="unused", model="setllm", temperature=0, max_tokens=10, max_retries=0)
    assert "".join(c.content for c in chat.stream(PROMPT)) == chat.invoke(PROMPT).content
    text = langchain.OpenAI(base_url=f"{url}/v1", api_key="unused", model="setllm", temperature=0, max_tokens=10, max_retries=0)
    assert "".join(text.stream(PROMPT)) == text.invoke(PROMPT)


def test_llama_index_streams_completions(url):
    openai_like = pytest.importorskip("llama_index.llms.openai_like")
    llm = openai_like.OpenAILike(model="setllm", api_base=f"{url}/v1", api_key="unused", is_chat_model=False, temperature=0, max_tokens=10,
                                 max_retries=0)
    pieces = list(llm.stream_complete(PROMPT))
    assert "".join(p.delta for p in pieces) == pieces[-1].text == llm.complete(PROMPT).text


def test_openai_agents_default_model_runs_streamed(url, lm):
    """The SDK's default model (the Responses API) with this server as its client: a simple agent, no tools, no network."""
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    agents.set_default_openai_client(openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0), use_for_tracing=False)
    agents.set_default_openai_api("responses")
    agent = agents.Agent(name="picker", instructions="Answer with one word.", model="setllm",
                         model_settings=agents.ModelSettings(temperature=0, max_tokens=16))

    async def run():
        streamed = agents.Runner.run_streamed(agent, PROMPT)
        deltas = [e.data.delta async for e in streamed.stream_events() if e.type == "raw_response_event" and e.data.type == "response.output_text.delta"]
        whole = await agents.Runner.run(agent, PROMPT)
        return "".join(deltas), streamed.final_output, whole.final_output

    with answers_end_after(lm, 4):
        joined, final, whole = asyncio.run(run())
    assert joined == final == whole and final
