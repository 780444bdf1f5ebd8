"""Streaming from `setllm serve`: what it costs, and that it changes nothing.

Starts the server (the embedded model and its shipped adapters unless flags say otherwise;
``--replicas 2`` puts it on Ray Serve) on a free loopback port, then:

1. **Clients**: the `openai` package (completions, chat and responses streamed), LangChain
   (``ChatOpenAI.stream``, ``OpenAI.stream``), llama-index (``OpenAILike.stream_complete``) and
   the openai-agents SDK (``Runner.run_streamed``, its default model: the Responses API), each
   streamed answer against the same client's answer not streamed.
2. **Differences**: every order of a few set prompts, on /v1/completions and
   /v1/chat/completions, greedy and seeded: the joined pieces against the answer not streamed.
3. **Time** (``--repeats`` times each, medians; requests one at a time): a 64-token answer
   streamed (time to its first text piece, time to ``[DONE]``) against the same request not
   streamed, and the prompt's own forward as the server answers it (the same prompt with
   ``max_tokens: 1``: a prefill and one token picked from it, no decoding step).

Goals: every client's stream works; 0 differences; first piece <= 1.2x the prompt's forward;
total <= 1.05x the answer not streamed.

Usage: python benchmarks/bench_stream.py [--repeats 5] [--threads 1] [--json FILE] [any `setllm serve` flags, e.g. --replicas 2]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time

import httpx
from bench_serve import start_server  # the same server start as the load benchmark (batching verdict in)

LONG = "Write a long story about a cat who learns to sail across the sea.\n\nStory:"  # no EOS within 64 tokens here
SETS = [("Pick the fruit:\\n{{", ["car\\n", "apple\\n", "house\\n"], "}}Answer:"),
        ("Which city is the capital of France?\\n{{", ["Budapest\\n", "Paris\\n", "Zurich\\n"], "}}Answer:")]
SAMPLING = [{"temperature": 0}, {"temperature": 0.8, "seed": 7}]


def stop_server(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def events(lines) -> list[dict]:
    return [json.loads(x[6:]) for x in lines if x.startswith("data: {")]


def streamed_text(http: httpx.Client, path: str, body: dict) -> str:
    with http.stream("POST", path, json={**body, "stream": True}) as r:
        r.raise_for_status()
        data = events(r.iter_lines())
    if path == "/v1/completions":
        return "".join(d["choices"][0]["text"] for d in data if d["choices"])
    return "".join(d["choices"][0]["delta"].get("content", "") for d in data if d["choices"])


def whole_text(http: httpx.Client, path: str, body: dict) -> str:
    out = http.post(path, json=body).json()["choices"][0]
    return out["text"] if path == "/v1/completions" else out["message"]["content"]


# -- 1. clients ---------------------------------------------------------------------------------
def clients(url: str) -> dict[str, bool]:
    """Each client's streamed answer equals its answer not streamed."""
    import openai

    prompt = "Which city is the capital of France?\n{{Budapest\n||Paris\n||Zurich\n}}Answer with the city."
    sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    out = {}
    whole = sdk.completions.create(model="setllm", prompt=prompt, max_tokens=16, temperature=0).choices[0].text
    out["openai completions"] = "".join(c.choices[0].text for c in sdk.completions.create(
        model="setllm", prompt=prompt, max_tokens=16, temperature=0, stream=True, stream_options={"include_usage": True}) if c.choices) == whole
    messages = [{"role": "user", "content": prompt}]
    whole = sdk.chat.completions.create(model="setllm", messages=messages, max_tokens=16, temperature=0).choices[0].message.content
    out["openai chat"] = "".join(c.choices[0].delta.content or "" for c in sdk.chat.completions.create(
        model="setllm", messages=messages, max_tokens=16, temperature=0, stream=True) if c.choices) == whole
    whole = sdk.responses.create(model="setllm", input=prompt, max_output_tokens=16, temperature=0).output_text
    out["openai responses"] = "".join(e.delta for e in sdk.responses.create(
        model="setllm", input=prompt, max_output_tokens=16, temperature=0, stream=True) if e.type == "response.output_text.delta") == whole
    from langchain_openai import OpenAI, ChatOpenAI  # noqa: I001

    chat = ChatOpenAI(base_url=f"{url}/v1", api_key="unused", model="setllm", temperature=0, max_tokens=16)
    out["langchain ChatOpenAI.stream"] = "".join(c.content for c in chat.stream(prompt)) == chat.invoke(prompt).content
    text = OpenAI(base_url=f"{url}/v1", api_key="unused", model="setllm", temperature=0, max_tokens=16)
    out["langchain OpenAI.stream"] = "".join(text.stream(prompt)) == text.invoke(prompt)
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(model="setllm", api_base=f"{url}/v1", api_key="unused", is_chat_model=False, temperature=0, max_tokens=16)
    out["llama-index stream_complete"] = "".join(p.delta for p in llm.stream_complete(prompt)) == llm.complete(prompt).text
    out["openai-agents Runner.run_streamed"] = asyncio.run(agent_run(url, prompt))
    return out


async def agent_run(url: str, prompt: str) -> bool:
    import agents
    import openai

    agents.set_tracing_disabled(True)
    agents.set_default_openai_client(openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0), use_for_tracing=False)
    agent = agents.Agent(name="capitals", instructions="Answer with the city.", model="setllm",
                         model_settings=agents.ModelSettings(temperature=0, max_tokens=32))
    streamed = agents.Runner.run_streamed(agent, prompt)
    deltas = [e.data.delta async for e in streamed.stream_events() if e.type == "raw_response_event" and e.data.type == "response.output_text.delta"]
    whole = await agents.Runner.run(agent, prompt)
    return "".join(deltas) == streamed.final_output == whole.final_output != ""


# -- 2. differences -----------------------------------------------------------------------------
def differences(http: httpx.Client) -> tuple[int, int]:
    """(answers compared, differing): every order of each set prompt, both routes, greedy and seeded."""
    compared = differing = 0
    for (head, items, tail), sampling, path in itertools.product(SETS, SAMPLING, ("/v1/completions", "/v1/chat/completions")):
        for order in itertools.permutations(items):
            prompt = head + "||".join(order) + tail
            body = {"model": "setllm", "max_tokens": 24, **sampling}
            body |= {"prompt": prompt} if path == "/v1/completions" else {"messages": [{"role": "user", "content": prompt.replace("\\n", "\n")}]}
            compared += 1
            differing += streamed_text(http, path, body) != whole_text(http, path, body)
    return compared, differing


# -- 3. time ------------------------------------------------------------------------------------
def timings(http: httpx.Client, repeats: int) -> dict:
    body = {"model": "setllm", "prompt": LONG, "max_tokens": 64, "temperature": 0}
    tokens = http.post("/v1/completions", json=body).json()["usage"]["completion_tokens"]
    first, streamed, whole, forward = [], [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        http.post("/v1/completions", json={**body, "max_tokens": 1}).raise_for_status()
        forward.append(time.perf_counter() - start)
        start, seen = time.perf_counter(), None
        with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
            for line in r.iter_lines():
                if seen is None and line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                    seen = time.perf_counter() - start
        streamed.append(time.perf_counter() - start)
        first.append(seen)
        start = time.perf_counter()
        http.post("/v1/completions", json=body).raise_for_status()
        whole.append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in (("first_piece_s", first), ("streamed_s", streamed), ("whole_s", whole), ("forward_s", forward))}
    return {"completion_tokens": tokens, **med, "first_over_forward": med["first_piece_s"] / med["forward_s"],
            "streamed_over_whole": med["streamed_s"] / med["whole_s"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None)
    args, flags = p.parse_known_args()
    proc, url = start_server(["--threads", str(args.threads), *flags])
    try:
        with httpx.Client(base_url=url, timeout=600) as http:
            http.post("/v1/completions", json={"model": "setllm", "prompt": "Hi", "max_tokens": 2})  # warm-up
            works = clients(url)
            compared, differing = differences(http)
            time_ = timings(http, args.repeats)
    finally:
        stop_server(proc)
    report = {"flags": flags, "threads": args.threads, "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "clients": works,
              "compared": compared, "differing": differing, **time_}
    print(f"bench_stream: {' '.join(flags) or 'one server'}; {report['machine']}, torch threads {args.threads}")
    print("| client | streamed = not streamed |\n|---|---|")
    for name, ok in works.items():
        print(f"| {name} | {'yes' if ok else 'NO'} |")
    print(f"\nstreamed vs not streamed: {compared} answers compared, {differing} differing")
    print(f"64-token answer ({time_['completion_tokens']} tokens), medians of {args.repeats}: prompt's forward (max_tokens 1) "
          f"{time_['forward_s'] * 1000:.0f} ms; first piece {time_['first_piece_s'] * 1000:.0f} ms ({time_['first_over_forward']:.2f}x, goal 1.2x); "
          f"streamed {time_['streamed_s'] * 1000:.0f} ms vs not streamed {time_['whole_s'] * 1000:.0f} ms "
          f"({time_['streamed_over_whole']:.3f}x, goal 1.05x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if all(works.values()) and differing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
