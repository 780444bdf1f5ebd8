"""`setllm serve` through clients nobody here wrote, over real HTTP on a loopback port: the
official `openai` package (completions with and without `logprobs`/`echo`, chat, its error
classes) and lm-evaluation-harness's own `--model local-completions`."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import reference
from serve_helpers import openai_client, running
from server_process import serve_process

from setllm import Set
from setllm.core.forward import generation, scoring
from setllm.core.text.chat import chat_prompt
from setllm.core.text.prompt import parse_markup
from setllm.core.tokens.batch import collate

openai = pytest.importorskip("openai")
ROOT = Path(__file__).resolve().parents[2]
MARKUP = r"Pick one:\n{{apple\n||dog\n||fox\n}}Answer: apple"


@pytest.fixture(scope="module")
def client(lm):
    with running(lm) as (_, _, url):
        yield openai_client(url)


def test_completion_with_and_without_logprobs_matches_the_library(client, lm):
    plain = client.completions.create(model="setllm", prompt="Pick one:\\n{{apple\\n||dog\\n}}Answer:", max_tokens=6, temperature=0)
    want = lm.generate(parse_markup(r"Pick one:\n{{apple\n||dog\n}}Answer:"), max_new_tokens=6)
    assert plain.choices[0].text == want and plain.choices[0].logprobs is None
    scored = client.completions.create(model="setllm", prompt="Pick one:\\n{{apple\\n||dog\\n}}Answer:", max_tokens=6, temperature=0, logprobs=2)
    lp = scored.choices[0].logprobs
    assert scored.choices[0].text == want and "".join(lp.tokens) == want
    # The generated tokens' log-probs: those tokens scored as the response by the library's ladder.
    batch = collate([lm.encode(parse_markup(r"Pick one:\n{{apple\n||dog\n}}Answer:"))], lm.variant.positions, lm.pad_id)
    text, ids = generation.generate_tokens(lm.model, lm.tokenizer, lm.variant, batch, generation.GenerationConfig(max_new_tokens=6))[0]
    cache, next_logprobs = scoring.prefill(lm.model, lm.variant, batch)
    library = reference.score_continuations(lm.model, lm.variant, batch, cache, next_logprobs, [[ids]])[0][0][0]
    assert text == want and sum(lp.token_logprobs) == pytest.approx(library, abs=1e-4)
    assert all(len(top) == 2 and max(top.values()) >= t for top, t in zip(lp.top_logprobs, lp.token_logprobs))
    assert lp.text_offset == list(itertools.accumulate([0] + [len(t) for t in lp.tokens[:-1]]))


def test_echo_scores_the_text_after_the_set_as_the_library_does(client, lm):
    """echo + logprobs + max_tokens 0: lm-eval's loglikelihood through OpenAI's legacy API."""
    out = client.completions.create(model="setllm", prompt=MARKUP.replace("\n", "\\n"), max_tokens=0, echo=True, logprobs=1)
    lp = out.choices[0].logprobs
    known = [(tok, p) for tok, p in zip(lp.tokens, lp.token_logprobs) if p is not None]
    # The prompt up to the set and one token after it ("Answer") is the prompt; the rest is read as its response.
    assert lp.tokens[len(lp.tokens) - len(known) - 1] == "Answer" and "".join(t for t, _ in known) == ": apple"
    prompt = ["Pick one:\n", Set(["apple\n", "dog\n", "fox\n"]), "Answer"]
    response = lm.codec.encoder.tokenize(": apple")  # as the markup's last segment tokenizes it
    want = scoring.score_requests(lm.model, lm.variant, lm.pad_id, [scoring.ScoreRequest(lm.encode(prompt), [response])])[0][0].logprob
    assert sum(p for _, p in known) == pytest.approx(want, abs=1e-4)
    again = client.completions.create(model="setllm", prompt=MARKUP.replace("apple\n||dog", "dog\n||apple").replace("\n", "\\n"),
                                       max_tokens=0, echo=True, logprobs=1)
    assert [p for p in again.choices[0].logprobs.token_logprobs if p is not None] == [p for _, p in known]  # set order: no effect


def test_a_batch_of_token_id_prompts(client, lm):
    ids = [lm.tokenizer.encode("The quick brown fox", add_special_tokens=False), lm.tokenizer.encode("Water boils", add_special_tokens=False)]
    out = client.completions.create(model="setllm", prompt=ids, max_tokens=2, temperature=0, echo=True, logprobs=1)
    assert [c.index for c in out.choices] == [0, 1]
    for choice, prompt in zip(out.choices, ids):
        assert choice.logprobs.token_logprobs[0] is None and len(choice.logprobs.tokens) >= len(prompt)
        assert choice.text.startswith(lm.tokenizer.decode(prompt))


def test_chat_reads_markup_as_a_set_inside_the_template(client, lm):
    texts = set()
    for order in itertools.permutations(["apple", "dog", "fox"]):
        content = "Pick the fruit:\n{{" + "||".join(o + "\n" for o in order) + "}}Answer:"
        out = client.chat.completions.create(model="setllm", messages=[{"role": "user", "content": content}], max_tokens=5, temperature=0)
        assert out.object == "chat.completion" and out.choices[0].message.role == "assistant"
        texts.add(out.choices[0].message.content)
    prompt = chat_prompt(lm.tokenizer, [{"role": "user", "content": "Pick the fruit:\n{{apple\n||dog\n||fox\n}}Answer:"}],
                         strip_bos=bool(lm.codec.encoder.bos))
    assert texts == {lm.generate(prompt, max_new_tokens=5)}  # every order: one answer, the library's


def test_the_clients_error_classes_carry_our_one_line(client):
    """OpenAI's error object: the SDK's exception carries the message in its own text, and its
    ``param``, ``code`` and ``type`` (an SDK reading only ``{"error": "<line>"}`` says ``Error code: 400``)."""
    cases = [(openai.BadRequestError, dict(messages=[{"role": "user", "content": "hi"}], n=2), "n: only n=1 is supported", "n", None),
             (openai.NotFoundError, dict(model="gpt-4o", messages=[{"role": "user", "content": "hi"}]),
              "no adapter or model 'gpt-4o' on this server; it serves: setllm ('setllm' or no name: the default reading)", None, "model_not_found"),
             (openai.BadRequestError, dict(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
              "messages[0].content: a string or a list of text parts (text); this server reads text only, got part type 'image_url'",
              "messages[0].content", None),
             (openai.UnprocessableEntityError, dict(messages=[{"role": "user", "content": "hi"}], stop=["x" * 300]),
              "stop: a stop string has at most 256 characters, got 300", "stop", None)]
    for error, kwargs, message, param, code in cases:
        with pytest.raises(error) as bad:
            client.chat.completions.create(**{"model": "setllm", **kwargs})
        assert bad.value.body == {"message": message, "type": "invalid_request_error", "param": param, "code": code}, bad.value.body
        assert message in bad.value.message and (bad.value.param, bad.value.code) == (param, code)
    with pytest.raises(openai.BadRequestError) as bad:  # a bound of this server, not of the schema: 400, as OpenAI's own
        client.completions.create(model="setllm", prompt="hi", max_tokens=100000)
    assert bad.value.body["message"] == "max_tokens: at most 512 on this server (--max-generate-tokens), got 100000"
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model="setllm", prompt="hi", max_tokens=0)
    assert bad.value.body["message"] == "max_tokens: 0 generates nothing; it is only useful with echo: true"


def test_text_content_parts_read_as_their_text(client):
    """A message whose content is OpenAI's text parts (what several clients send) is that text."""
    plain = client.chat.completions.create(model="setllm", messages=[{"role": "user", "content": "Say hi."}], max_tokens=4, temperature=0)
    parts = [{"type": "text", "text": "Say "}, {"type": "text", "text": "hi."}]
    split = client.chat.completions.create(model="setllm", messages=[{"role": "user", "content": parts}], max_tokens=4, temperature=0)
    assert split.choices[0].message.content == plain.choices[0].message.content
    assert split.usage.prompt_tokens == plain.usage.prompt_tokens


def _lm_eval(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "setllm.lm_eval", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _samples(out: Path, task: str) -> list[dict]:
    return [json.loads(x) for x in next(out.rglob(f"samples_{task}_*.jsonl")).read_text().splitlines()]


def test_lm_eval_local_completions_equals_the_setllm_backend(model_dir, tmp_path):
    """lm-eval's own OpenAI-legacy client (`local-completions`: loglikelihood through echo +
    logprobs) against `setllm serve --variant causal-pe` scores as `--model setllm` does."""
    with serve_process("--model", model_dir, "--adapter", "none", "--variant", "causal-pe") as (_, url):
        remote = _lm_eval("--model", "local-completions", "--tasks", "setllm_test_plain", "--include_path", "tests/fixtures/lm_eval",
                          "--model_args", f"base_url={url}/v1/completions,model=setllm,tokenizer={model_dir},tokenizer_backend=huggingface,"
                                          "num_concurrent=1,max_retries=1,add_bos_token=True",
                          "--log_samples", "--output_path", str(tmp_path / "remote"))
    assert remote.returncode == 0, remote.stderr[-3000:]
    local = _lm_eval("--model", "setllm", "--model_args", f"model={model_dir},variant=causal-pe,adapter=none", "--tasks", "setllm_test_plain",
                     "--include_path", "tests/fixtures/lm_eval", "--log_samples", "--output_path", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr[-3000:]
    a, b = (sorted(_samples(tmp_path / d, "setllm_test_plain"), key=lambda s: s["doc_id"]) for d in ("remote", "local"))
    pairs = [(x[0], y[0]) for sa, sb in zip(a, b) for x, y in zip(sa["resps"], sb["resps"])]
    far = [(sa["arguments"], x, y) for sa, sb in zip(a, b) for x, y in zip(sa["resps"], sb["resps"]) if abs(float(x[0][0]) - float(y[0][0])) > 1e-4]
    assert len(pairs) >= 10 and not far, far
    assert [s["acc"] for s in a] == [s["acc"] for s in b]  # the same picks
