"""One request, every surface, the same bits: the library, `POST /v1/score` alone and batched
with other requests, and the lm-eval backend all run `setllm.core.forward.scoring.score_requests` with
shapes fixed by the request alone, so in exact mode they agree bit for bit."""

from __future__ import annotations

import pytest
from serve_helpers import concurrently, serving

from setllm.core.text.prompt import parse_markup
from setllm.serve import ServeConfig, create_app

CONTEXT = "Question: Which city is the capital of France?\n\nChoices:\n{{Paris\n||Budapest\n||Zurich\n}}Answer:"
OPTIONS = [" Paris", " Budapest", " Zurich"]
OTHERS = [("/v1/score", {"prompt": "Pick one:\\n{{apple\\n||dog\\n}}Answer:", "options": ["apple", "dog"]}),
          ("/v1/choose", {"question": "What do plants need to make food? Think about it.", "options": ["sunlight", "soil", "rocks"]}),
          ("/v1/score", {"prompt": "Say:", "options": ["x", "a much longer option than the others"]})]


@pytest.mark.usefixtures("threads")
def test_library_server_and_lm_eval_backend_give_the_same_bits(wide_lm):
    pytest.importorskip("lm_eval")
    from lm_eval.api.instance import Instance

    from setllm.lm_eval import SetLLMLM

    library = [s.logprob for s in wide_lm.score(parse_markup(CONTEXT), OPTIONS)]
    body = {"prompt": CONTEXT.replace("\n", "\\n"), "options": OPTIONS}
    with serving(wide_lm) as client:
        alone = client.post("/v1/score", json=body).json()["scores"]
    batched = concurrently(create_app(wide_lm, ServeConfig(batch_window_ms=100)), [("/v1/score", body), *OTHERS])[0].json()["scores"]
    backend = SetLLMLM.wrap(wide_lm).loglikelihood(
        [Instance(request_type="loglikelihood", doc={}, arguments=(CONTEXT, o), idx=i) for i, o in enumerate(OPTIONS)], disable_tqdm=True)
    assert alone == library and batched == library and [b[0] for b in backend] == library


def test_an_exact_tie_gives_the_same_answer_in_every_order_on_every_surface(lm, model_dir, monkeypatch, capsys):
    """Two different options with exactly equal scores (constructed: every option scores the
    same) get one answer, by text, whatever order they came in: library, CLI and server."""
    from tiny import run_cli

    from setllm.core.forward import scoring

    monkeypatch.setattr(scoring, "score_requests",
                        lambda model, variant, pad_id, requests: [[scoring.TokenScore(-1.0, len(o), False) for o in r.options] for r in requests])
    answers, bests = set(), set()
    with serving(lm) as client:
        for order in (["zebra", "apple", "mango"], ["apple", "mango", "zebra"], ["mango", "zebra", "apple"]):
            answers.add(lm.choose("Which?", order).answer)
            answers.add(client.post("/v1/choose", json={"question": "Which?", "options": order}).json()["answer"])
            code, out, _ = run_cli(capsys, "choose", "Which?", "--options", *order, "--model", model_dir, "--json")
            answers.add(__import__("json").loads(out)["answer"])
            bests.add(order[lm.judge("Which?", order).best])
            bests.add(order[client.post("/v1/judge", json={"instruction": "Which?", "candidates": order}).json()["best"]])
    assert answers == {"apple"} and bests == {"apple"}


def test_a_markup_string_means_the_same_on_every_surface(lm, model_dir, capsys):
    """A prompt given as one string is markup in the library too, as in the CLI and the server."""
    from tiny import run_cli

    from setllm import SetLLM
    from setllm.loading import load_model

    markup = "Pick one:\n{{apple\n||dog\n||fox\n}}Answer:"
    library = [s.logprob for s in lm.score(markup, ["apple", "dog"])]
    assert library == [s.logprob for s in lm.score(parse_markup(markup), ["apple", "dog"])]
    with serving(lm) as client:
        server = client.post("/v1/score", json={"prompt": markup, "options": ["apple", "dog"]}).json()["scores"]
        served_text = client.post("/v1/generate", json={"prompt": markup, "max_new_tokens": 4}).json()["text"]
    assert server == library
    saved = SetLLM(*load_model(model_dir))  # the CLI's model: the same weights, loaded from disk
    code, out, _ = run_cli(capsys, "generate", "--prompt", markup.replace("\n", "\\n"), "--max-new-tokens", "4", "--model", model_dir)
    assert code == 0 and out.rstrip("\n") == saved.generate(markup, max_new_tokens=4)
    assert served_text == lm.generate(markup, max_new_tokens=4)


JUDGE_INSTRUCTION = "Say hello to a friend."
JUDGE_CANDIDATES = ["Hello there, my friend!", "Go away."]


def test_the_server_judges_with_each_readout_as_the_library_does(lm):
    from setllm import readouts

    body = {"instruction": JUDGE_INSTRUCTION, "candidates": JUDGE_CANDIDATES}
    with serving(lm) as client:
        for name in readouts.READOUTS:
            want = lm.judge(JUDGE_INSTRUCTION, JUDGE_CANDIDATES, readout=name)
            got = client.post("/v1/judge", json={**body, "readout": name}).json()
            assert got["scores"] == want.scores and got["best"] == want.best, name  # the same driver, the same shapes: the same bits
        assert client.post("/v1/judge", json=body).json()["scores"] == lm.judge(JUDGE_INSTRUCTION, JUDGE_CANDIDATES).scores
        bad = client.post("/v1/judge", json={**body, "readout": "vibes"})
    assert bad.status_code == 422 and "likelihood" in bad.text


def test_the_judge_route_reads_with_the_readout_its_adapter_was_trained_for(lm):
    """A judge adapter trained with ``--objective preference`` records ``readout: mean`` in its
    setllm.json; a request that names no readout gets that one, as `setllm judge` does."""
    from setllm import SetLLM
    from setllm.loading import AdapterInfo, Origin

    trained_mean = SetLLM(lm.model, lm.tokenizer, lm.variant, origin=Origin("tiny", trained_as=AdapterInfo(readout="mean")))
    body = {"instruction": JUDGE_INSTRUCTION, "candidates": JUDGE_CANDIDATES}
    want = lm.judge(JUDGE_INSTRUCTION, JUDGE_CANDIDATES, readout="mean").scores
    assert want != lm.judge(JUDGE_INSTRUCTION, JUDGE_CANDIDATES).scores  # the two readouts differ here: the test can fail
    with serving(lm, judge_lm=trained_mean) as client:
        assert client.post("/v1/judge", json=body).json()["scores"] == want
        assert client.post("/v1/judge", json={**body, "readout": "likelihood"}).json()["scores"] == lm.judge(JUDGE_INSTRUCTION, JUDGE_CANDIDATES).scores


def test_the_judge_route_reads_with_its_own_model_and_the_other_routes_with_the_main_one(lm, wide_lm):
    """`setllm serve` with the shipped adapters loads the judge adapter for /v1/judge (what
    `setllm judge` reads with) beside the choose adapter for every other route; two tiny
    models stand in for the two here. Batched together, each request gets its own model's
    bits."""
    question, options = "What do plants need to make food?", ["sunlight", "soil", "rocks"]
    judge_body = {"instruction": JUDGE_INSTRUCTION, "candidates": JUDGE_CANDIDATES}
    app = create_app(lm, ServeConfig(batch_window_ms=100), judge_lm=wide_lm)
    batches = []

    def record(app):  # which models each batch asked for: the two routes did share batches
        run = app.state.service.batcher.run_batch
        app.state.service.batcher.run_batch = lambda items: batches.append({getattr(i.job, "model", "main") for i in items}) or run(items)

    judged, chosen, judged_again = concurrently(app, [("/v1/judge", judge_body), ("/v1/choose", {"question": question, "options": options}),
                                                      ("/v1/judge", judge_body)], before=record)
    want = wide_lm.judge(JUDGE_INSTRUCTION, JUDGE_CANDIDATES)
    assert judged.json()["scores"] == want.scores == judged_again.json()["scores"]
    assert judged.json()["scores"] != lm.judge(JUDGE_INSTRUCTION, JUDGE_CANDIDATES).scores  # not the main model's verdict
    assert chosen.json()["scores"] == [s.logprob for s in lm.choose(question, options).scores]
    assert {"main", "judge"} in batches


@pytest.mark.usefixtures("threads")
@pytest.mark.parametrize("variant", ["setmask-setpe", "sbp"])
def test_echo_score_and_the_library_give_a_continuation_the_same_bits(wide_lm, variant):
    """One log-prob computation: a continuation's tokens after a set, read by `/v1/completions`
    with echo (alone and among other requests), by `/v1/score` and by the library, all through
    the reading that scores an option (the scoring driver's packed forward; under `sbp` the
    documents' cache): the same bits, token by token and summed."""
    import torch

    lm = wide_lm.with_options(variant=variant, eos=False)
    head = r"Pick the fruit, the one that grows on a tree:\n{{a red apple from the orchard\n||a dog that barks at night\n||a fox in the woods\n}}Answer"
    markup = head + " apple"
    enc, prompt = lm.encode(parse_markup(markup.replace(r"\n", "\n"))), lm.encode(parse_markup(head.replace(r"\n", "\n")))
    tail = lm.response_ids(parse_markup(head.replace(r"\n", "\n")), " apple")
    assert enc.input_ids == prompt.input_ids + tail  # the echo's continuation is the option, token for token
    library = [d.logprob for d in lm.token_details(prompt, tail)]
    library_score = lm.score(parse_markup(head.replace(r"\n", "\n")), [" apple"])[0].logprob
    echo = {"prompt": markup, "max_tokens": 0, "echo": True, "logprobs": 1}
    with serving(lm) as client:
        alone = client.post("/v1/completions", json=echo).json()["choices"][0]["logprobs"]["token_logprobs"]
        scored = client.post("/v1/score", json={"prompt": head, "options": [" apple"]}).json()["scores"][0]
    batched = concurrently(create_app(lm, ServeConfig(batch_window_ms=100)), [("/v1/completions", echo), *OTHERS])[0].json()
    batched = batched["choices"][0]["logprobs"]["token_logprobs"]
    assert alone[-len(tail):] == library and batched == alone and None not in library
    assert scored == library_score == float(torch.tensor(library).sum())
