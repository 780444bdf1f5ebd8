"""The default server gives the library's bits: `setllm serve` with no flags holds the
embedded model's shipped adapters on one copy of the weights (an AdapterBank, each adapter
unmerged), and every other surface reads an adapter unmerged too, so `/v1/choose`,
`SetLLM.from_pretrained().choose`, `setllm choose --json` and the lm-eval backend are one
computation: the same bits, not the same within a tolerance."""

from __future__ import annotations

import json

import pytest
import torch
from fastapi.testclient import TestClient
from serve_helpers import settled
from tiny import run_cli

from setllm import SetLLM
from setllm.cli import build_parser
from setllm.cli.serve import served_models
from setllm.core.text.prompt import parse_markup
from setllm.serve import ServeConfig, create_app

pytestmark = pytest.mark.slow

QUESTION, OPTIONS = "Which city is the capital of France?", ["Zurich", "Budapest", "Paris"]
JUDGE = ("Name a colour.", ["Red.", "A dog."])


@pytest.fixture(scope="module")
def one_thread_here():
    """One thread for every surface in this process: the thread count is part of the kernel
    choice, and the same kernels are what make the same bits."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def library(one_thread_here):
    return SetLLM.from_pretrained()


@pytest.fixture(scope="module")
def server(one_thread_here):
    lm, judge, adapters = served_models(build_parser("serve")[0].parse_args(["serve"]))
    assert set(adapters) == {"choose", "judge", "documents", "base", "none"}  # the default: a bank of the shipped adapters
    with TestClient(create_app(lm, ServeConfig(), judge, adapters)) as client:
        client.portal.call(settled, client.app.state.service)
        yield client


def test_the_default_server_gives_the_library_and_the_cli_the_same_bits(library, server, capsys):
    want = [s.logprob for s in library.choose(QUESTION, OPTIONS).scores]
    served = server.post("/v1/choose", json={"question": QUESTION, "options": OPTIONS}).json()
    assert served["scores"] == want and served["answer"] == "Paris"
    code, out, _ = run_cli(capsys, "choose", QUESTION, "--options", *OPTIONS, "--json")
    assert code == 0 and list(json.loads(out)["scores"].values()) == want


def test_the_judge_route_gives_setllm_judge_s_bits(server, capsys):
    judge = SetLLM.from_pretrained(kind="judge")
    want = judge.judge(*JUDGE).scores
    assert server.post("/v1/judge", json={"instruction": JUDGE[0], "candidates": JUDGE[1]}).json()["scores"] == want
    code, out, _ = run_cli(capsys, "judge", JUDGE[0], "--candidates", *JUDGE[1], "--json")
    assert code == 0 and json.loads(out)["scores"] == want


def test_the_lm_eval_backend_gives_the_same_bits(library, server):
    pytest.importorskip("lm_eval")
    from lm_eval.api.instance import Instance

    from setllm.lm_eval import SetLLMLM

    context = "Question: Which city is the capital of France?\n\nChoices:\n{{Paris\n||Budapest\n||Zurich\n}}Answer:"
    options = [" Paris", " Budapest", " Zurich"]
    want = [s.logprob for s in library.score(parse_markup(context), options)]
    backend = SetLLMLM().loglikelihood(
        [Instance(request_type="loglikelihood", doc={}, arguments=(context, o), idx=i) for i, o in enumerate(options)], disable_tqdm=True)
    served = server.post("/v1/score", json={"prompt": context, "options": options}).json()["scores"]
    assert [b[0] for b in backend] == want == served


def test_chat_with_the_documents_adapter_answers_as_completions_do(server):
    """The documents adapter was trained on plain prompts alone: inside the chat template it
    says EOS first (an empty answer), so chat gives it a message as its text, which the
    openai SDK (streamed or not) and LangChain's ChatOpenAI read as /v1/completions does."""
    openai = pytest.importorskip("openai")
    chat_openai = pytest.importorskip("langchain_openai").ChatOpenAI
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=server, max_retries=0)
    content = ("Documents:\n{{Document: Bo Lind cooks at Acme.\n||Document: Marta Osei is the CEO of Acme.\n}}"
               "Question: Who is the CEO of Acme?\nAnswer:")
    asked = {"model": "documents", "max_tokens": 4, "temperature": 0}
    want = client.completions.create(prompt=content, **asked).choices[0].text
    chat = client.chat.completions.create(messages=[{"role": "user", "content": content}], **asked)
    assert chat.choices[0].message.content == want and "Marta Ose" in want
    stream = client.chat.completions.create(messages=[{"role": "user", "content": content}], stream=True, **asked)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == want
    langchain = chat_openai(base_url="http://testserver/v1", api_key="unused", http_client=server, max_retries=0, **asked)
    assert langchain.invoke(content).content == want
    setllm = client.chat.completions.create(messages=[{"role": "user", "content": content}], **{**asked, "model": "setllm", "max_tokens": 1})
    assert setllm.usage.prompt_tokens > chat.usage.prompt_tokens  # the choose adapter keeps the template (and the base model's chat)


def test_the_answer_route_reads_documents_with_the_library_s_adapter(library, server):
    """One verb, one rule: ``/v1/answer`` reads with the adapter ``SetLLM.answer`` reads with
    (the shipped documents adapter, where ``adapter="auto"`` chose another), on the default
    server's bank and on a server of the library's own object alike."""
    from setllm.api import default_adapter

    docs, question = ["Lena leads billing.", "Omar leads support."], "Who leads support?"
    want = library.answer(docs, question, max_new_tokens=8)
    assert library.answers_with is not None and library.answers_with.adapter != library.origin.adapter
    body = {"documents": docs[::-1], "question": question, "max_new_tokens": 8}
    banked = server.post("/v1/answer", json=body).json()
    with TestClient(create_app(library, ServeConfig(batch_check=False))) as client:
        alone = client.post("/v1/answer", json=body).json()
    assert banked["answer"] == alone["answer"] == want
    assert str(banked["adapter"]) == str(alone["adapter"]) == str(library.answers_with.adapter)
    assert str(banked["adapter"]) == default_adapter("documents") and banked["variant"] == alone["variant"] == "sbp"  # the default reading
    as_page = server.post("/v1/answer", json={**body, "variant": library.variant.name}).json()  # the playground names the server's variant
    assert (as_page["answer"], as_page["adapter"], as_page["variant"]) == (want, banked["adapter"], "sbp")


def test_under_sbp_the_answer_route_reads_with_the_sbp_documents_adapter_through_the_server_s_cache(one_thread_here, tmp_path, monkeypatch):
    """``--variant sbp``: ``/v1/answer`` reads with the documents adapter trained for sbp, as
    ``SetLLM.answer`` does, and its documents go through the server's cache (``--cache-dir``);
    the start-up lines say so, and the log gets no hint meant for a library user."""
    import setllm.answering
    from setllm.api import default_adapter
    from setllm.serve.server import documents_line

    docs, question = ["Lena leads billing.\n", "Omar leads support.\n"], "Who leads support?"
    want = SetLLM.from_pretrained(variant="sbp").answer(docs, question, max_new_tokens=8)
    served = SetLLM.from_pretrained(variant="sbp")
    said = []
    monkeypatch.setattr(setllm.answering, "say_once", said.append)
    app = create_app(served, ServeConfig(cache_dir=str(tmp_path), batch_check=False))
    assert documents_line(app.state.service) == (f"setllm serve: /v1/answer: adapter {default_adapter('documents')}, variant sbp; "
                                                 f"document cache 512 MB in memory, up to 2048 MB on disk in {tmp_path}")
    with TestClient(app) as client:
        got = client.post("/v1/answer", json={"documents": docs[::-1], "question": question, "max_new_tokens": 8}).json()
    assert said == []
    assert got["answer"] == want and str(got["adapter"]) == default_adapter("documents", "sbp")
    assert len(list(tmp_path.glob("*.safetensors"))) == len(docs) + 1  # the prefix and each document, on the server's disk tier
