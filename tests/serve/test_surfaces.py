"""One request, every surface, the same bits: the library, `POST /v1/score` alone and batched
with other requests, and the lm-eval backend all run `setllm.scoring.score_requests` with
shapes fixed by the request alone, so in exact mode they agree bit for bit."""

from __future__ import annotations

import pytest
from serve_helpers import concurrently, serving

from setllm.markup import parse_markup
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

    library = [s.logprob for s in wide_lm.score(parse_markup(CONTEXT), [OPTIONS])[0]]
    body = {"prompt": CONTEXT.replace("\n", "\\n"), "options": OPTIONS}
    with serving(wide_lm) as client:
        alone = client.post("/v1/score", json=body).json()["scores"]
    batched = concurrently(create_app(wide_lm, ServeConfig(batch_window_ms=100)), [("/v1/score", body), *OTHERS])[0].json()["scores"]
    backend = SetLLMLM.wrap(wide_lm).loglikelihood(
        [Instance(request_type="loglikelihood", doc={}, arguments=(CONTEXT, o), idx=i) for i, o in enumerate(OPTIONS)], disable_tqdm=True)
    assert alone == library and batched == library and [b[0] for b in backend] == library
