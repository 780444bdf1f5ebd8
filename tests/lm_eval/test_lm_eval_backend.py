"""The lm-eval backend on a tiny random model: lm-eval's three request kinds against setllm's
own scoring and generation, set markup, lm-eval's ``--model hf``, and the command line."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

import lm_eval  # noqa: E402
import torch  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402
from tiny import tiny_model, tiny_tokenizer  # noqa: E402

from setllm import SetLLM  # noqa: E402
from setllm.core.forward import scoring
from setllm.core.text.prompt import parse_markup  # noqa: E402
from setllm.errors import InputError  # noqa: E402
from setllm.lm_eval import SetLLMLM  # noqa: E402
from setllm.lm_eval.__main__ import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "lm_eval"
CONTEXT = "Question: Which city is the capital of France?\n\nChoices:\n{{Paris\n||Budapest\n||Zurich\n}}Answer:"
OPTIONS = [" Paris", " Budapest", " Zurich"]


def requests(kind: str, *args_list) -> list[Instance]:
    return [Instance(request_type=kind, doc={}, arguments=args, idx=i) for i, args in enumerate(args_list)]


def loglikelihoods(lm, pairs) -> list[tuple[float, bool]]:
    return lm.loglikelihood(requests("loglikelihood", *pairs), disable_tqdm=True)


@pytest.fixture(scope="module")
def llm():
    return SetLLM(tiny_model("llama"), tiny_tokenizer(), variant="setmask-setpe", batch_size=4)


@pytest.fixture(scope="module")
def lm(llm):
    return SetLLMLM.wrap(llm)


@pytest.fixture(scope="module")
def tasks():
    return TaskManager(include_path=str(FIXTURES), include_defaults=False)


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the fixture tasks name their data file relative to the repository


def test_loglikelihood_equals_setllm_scoring(lm, llm):
    got = loglikelihoods(lm, [(CONTEXT, o) for o in OPTIONS])
    want = llm.score(parse_markup(CONTEXT), OPTIONS)  # setllm's own: option text + EOS
    assert [g[0] for g in got] == [s.logprob for s in want]


def test_requests_sharing_a_context_share_one_prefill(lm, monkeypatch):
    rows = []
    real = scoring._packed_prefill
    monkeypatch.setattr(scoring, "_packed_prefill", lambda model, packed, first: rows.append(len(packed.encs)) or real(model, packed, first))
    other = CONTEXT.replace("France", "Hungary")
    loglikelihoods(lm, [(c, o) for o in OPTIONS for c in (CONTEXT, other)])
    assert rows == [2]  # six requests, two contexts: one prefill of the two


@pytest.mark.usefixtures("threads")
def test_markup_contexts_are_bit_identical_under_permutation(lm):
    elements = ["Paris\n", "Budapest\n", "Zurich\n"]
    results = set()
    for order in itertools.permutations(elements):
        context = "Question: Which city is the capital of France?\n\nChoices:\n{{" + "||".join(order) + "}}Answer:"
        results.add(tuple(loglikelihoods(lm, [(context, o) for o in OPTIONS])))
    assert len(results) == 1


def test_order_sensitive_variant_sees_the_order(llm):
    lm = SetLLMLM.wrap(llm.with_variant("causal-pe"))
    swapped = CONTEXT.replace("{{Paris\n||Budapest\n", "{{Budapest\n||Paris\n")
    assert loglikelihoods(lm, [(CONTEXT, " Paris")]) != loglikelihoods(lm, [(swapped, " Paris")])


def test_plain_context_reproduces_a_full_forward_of_joined_text(llm):
    """causal-pe on a plain context is lm-eval's ``--model hf``: context + continuation
    tokenized together and split, the continuation's log-probs from one full forward."""
    lm = SetLLMLM.wrap(llm.with_variant("causal-pe"))
    context, continuation = "The quick brown fox jumps over the | \\n lazy", " dog."
    (logprob, greedy), = loglikelihoods(lm, [(context, continuation)])
    tok = llm.tokenizer
    whole, ctx = tok.encode(context + continuation), tok.encode(context)
    with torch.no_grad():
        logp = llm.model(torch.tensor([whole])).logits[0].log_softmax(-1)
    cont = whole[len(ctx):]
    want = sum(logp[len(ctx) - 1 + i, t].item() for i, t in enumerate(cont))
    assert logprob == pytest.approx(want, abs=1e-5)
    assert greedy == all(logp[len(ctx) - 1 + i].argmax().item() == t for i, t in enumerate(cont))


def test_markup_off_reads_braces_as_text(llm):
    plain = SetLLMLM.wrap(llm.with_variant("causal-pe"), markup=False)
    parsed = SetLLMLM.wrap(llm.with_variant("causal-pe"))
    assert loglikelihoods(plain, [(CONTEXT, " Paris")]) != loglikelihoods(parsed, [(CONTEXT, " Paris")])


def test_eos_is_scored_after_set_contexts_only_by_default(llm):
    lm, no_eos = SetLLMLM.wrap(llm), SetLLMLM.wrap(llm, eos=False)
    assert loglikelihoods(lm, [(CONTEXT, " Paris")])[0][0] < loglikelihoods(no_eos, [(CONTEXT, " Paris")])[0][0]
    plain = ("Question: capital of France?\nAnswer:", " Paris")
    assert loglikelihoods(lm, [plain]) == loglikelihoods(no_eos, [plain])


def test_loglikelihood_rolling_is_the_sum_over_the_text(llm):
    lm = SetLLMLM.wrap(llm.with_variant("causal-pe"))
    text = "The quick brown fox jumps over the lazy dog."
    (total,) = lm.loglikelihood_rolling(requests("loglikelihood_rolling", (text,)), disable_tqdm=True)
    ids = [lm.prefix_token_id] + llm.tokenizer.encode(text)
    with torch.no_grad():
        logp = llm.model(torch.tensor([ids])).logits[0].log_softmax(-1)
    assert total == pytest.approx(sum(logp[i, ids[i + 1]].item() for i in range(len(ids) - 1)), abs=1e-4)


def test_generate_until_respects_until(lm, llm):
    context = "Question: Which city is the capital of France?\n\nChoices:\n{{Paris\n||Zurich\n}}Answer:"
    (free,) = lm.generate_until(requests("generate_until", (context, {"max_gen_toks": 12, "until": []})), disable_tqdm=True)
    assert free == llm.generate(parse_markup(context), max_new_tokens=12)
    stop = next(free[i : i + 2] for i in range(1, len(free) - 1) if free[i : i + 2].strip())
    cut = lm.generate_until(requests("generate_until", (context, {"max_gen_toks": 12, "until": [stop]}),
                                     (context, {"max_gen_toks": 12, "until": stop})), disable_tqdm=True)
    assert cut == [free[: free.index(stop)]] * 2


def test_unsupported_gen_kwargs_are_refused(lm):
    with pytest.raises(InputError, match="top_k"):
        lm.generate_until(requests("generate_until", ("Answer:", {"top_k": 5})), disable_tqdm=True)


def test_tasks_through_simple_evaluate(lm, tasks, at_root):
    """The set task, a plain (non-set) task and a generative task run as lm-eval runs them."""
    out = lm_eval.simple_evaluate(model=lm, tasks=["setllm_test_set", "setllm_test_plain", "setllm_test_gen"], task_manager=tasks,
                                  log_samples=True, bootstrap_iters=0)
    context, continuation = out["samples"]["setllm_test_set"][0]["arguments"][0]
    assert context.startswith("Question: Which city is the capital of France?\n\nChoices:\n{{Paris\n||") and continuation == " Paris"
    assert {s["arguments"][0][0] for s in out["samples"]["setllm_test_plain"]} >= {"Question: Which city is the capital of France?\nAnswer:"}
    assert set(out["results"]) == {"setllm_test_set", "setllm_test_plain", "setllm_test_gen"}
    assert all("\n" not in s["resps"][0][0] for s in out["samples"]["setllm_test_gen"])


def test_set_task_gives_identical_results_with_options_permuted(lm, tmp_path, at_root, flipped_task):
    flipped_task(tmp_path)
    manager = TaskManager(include_path=[str(FIXTURES), str(tmp_path)], include_defaults=False)
    out = lm_eval.simple_evaluate(model=lm, tasks=["setllm_test_set", "setllm_test_flipped"], task_manager=manager, log_samples=True,
                                  bootstrap_iters=0)
    given, flip = ({(s["doc"]["id"], a[1]): r[0][0] for s in out["samples"][t] for a, r in zip(s["arguments"], s["resps"])}
                   for t in ("setllm_test_set", "setllm_test_flipped"))
    assert len(given) == 19 and given == flip
    assert out["results"]["setllm_test_set"]["acc,none"] == out["results"]["setllm_test_flipped"]["acc,none"]


@pytest.mark.usefixtures("threads")
def test_chat_template_wraps_set_contexts(lm, tasks, at_root):
    out = lm_eval.simple_evaluate(model=lm, tasks=["setllm_test_set"], task_manager=tasks, apply_chat_template=True, log_samples=True,
                                  bootstrap_iters=0, limit=2)
    sample = out["samples"]["setllm_test_set"][0]
    context, _ = sample["arguments"][0]
    assert context.startswith("<s><|user|>\nQuestion:") and context.endswith("<|assistant|>\n") and "{{" in context
    assert loglikelihoods(lm, sample["arguments"]) == [tuple(r[0]) for r in sample["resps"]]


def test_matches_lm_eval_hf_backend(model_dir, tasks, at_root):
    """``--model setllm variant=causal-pe`` reproduces ``--model hf`` on a non-set task."""
    runs = {name: lm_eval.simple_evaluate(model=name, model_args=args, tasks=["setllm_test_plain", "setllm_test_gen"], task_manager=tasks,
                                          log_samples=True, device="cpu", batch_size=2, bootstrap_iters=0)
            for name, args in (("hf", f"pretrained={model_dir},dtype=float32"), ("setllm", f"model={model_dir},variant=causal-pe"))}
    hf, ours = ([s["resps"] for s in runs[n]["samples"]["setllm_test_plain"]] for n in ("hf", "setllm"))
    pairs = [(a[0], b[0]) for x, y in zip(hf, ours) for a, b in zip(x, y)]
    assert len(pairs) == 19 and max(abs(a[0] - b[0]) for a, b in pairs) < 1e-4 and all(a[1] == b[1] for a, b in pairs)
    assert runs["hf"]["results"]["setllm_test_plain"]["acc,none"] == runs["setllm"]["results"]["setllm_test_plain"]["acc,none"]
    # Same greedy text, except that setllm drops a character max_gen_toks cut in half (U+FFFD).
    gen = [[s["resps"][0][0] for s in runs[n]["samples"]["setllm_test_gen"]] for n in ("hf", "setllm")]
    assert all(h.startswith(s) and set(h[len(s):]) <= {"\ufffd"} for h, s in zip(*gen)) and sum(h == s for h, s in zip(*gen)) >= 3


@pytest.mark.parametrize("args, message", [
    ("variant=causal", "unknown variant 'causal'"),
    ("batch_size=0", "--model_args batch_size must be at least 1, got 0"),
    ("batch_size=two", "--model_args batch_size must be an integer, got .two."),
    ("dtype=float8", "dtype must be one of"),
    ("exact=maybe", "exact must be true or false"),
    ("eos=sometimes", "eos must be true or false or auto"),
    pytest.param("device=cuda", "no CUDA GPU", marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")),
])
def test_bad_model_args_are_refused(args, message, model_dir):
    with pytest.raises(InputError, match=message):
        SetLLMLM.create_from_arg_string(f"model={model_dir},{args}")


def test_bad_model_args_are_one_line_errors_on_the_command_line(capsys):
    assert main(["--model", "setllm", "--model_args", "colour=red", "--tasks", "setllm_test_plain", "--include_path", str(FIXTURES)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("error: unknown --model_args key 'colour' for --model setllm; known: "
                       "model, adapter, variant, attn, device, dtype, exact, batch_size, threads, allow_untested, allow_pickle, cuda_graphs, "
                       "allow_base_mismatch, eos, markup")


def test_command_line_runs_lm_eval_with_setllm(model_dir, at_root, capsys):
    code = main(["--model", "setllm", "--model_args", f"model={model_dir},variant=causal-pe", "--tasks", "setllm_test_plain",
                 "--include_path", "tests/fixtures/lm_eval", "--limit", "2"])
    out = capsys.readouterr().out
    assert code == 0 and "setllm_test_plain" in out and "acc" in out


@pytest.mark.usefixtures("threads")
def test_model_args_variant_sbp_reads_the_base_model_invariantly(model_dir):
    lm = SetLLMLM.create_from_arg_string(f"model={model_dir},variant=sbp")
    assert lm.llm.variant.name == "sbp" and lm.llm.origin.adapter is None and lm.llm.exact
    swapped = CONTEXT.replace("{{Paris\n||Budapest\n||Zurich\n}}", "{{Zurich\n||Paris\n||Budapest\n}}")
    assert loglikelihoods(lm, [(CONTEXT, o) for o in OPTIONS]) == loglikelihoods(lm, [(swapped, o) for o in OPTIONS])
