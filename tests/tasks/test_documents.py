"""Documents read as a set: generators, gold-position moves, invariance of answers and scores,
per-position accounting, bad rows, the CLI (data, eval, report, train data)."""

import json

import pytest
from tiny import run_cli, sharp_model, tiny_model, tiny_tokenizer

from setllm import SetLLM
from setllm.evaluation.metrics import METRICS, QuestionResult
from setllm.generators import documents as gen
from setllm.io.records import DataError
from setllm.tasks import documents as docs
from setllm.training.examples import load_examples

ROW = {"id": "r", "documents": ["alpha is one", "beta is two", "gamma is three", "delta is four"], "question": "What is beta?",
       "answer": "two", "gold": 1}


@pytest.fixture(scope="module")
def sharp():
    return sharp_model()


def test_kv_rows_are_reproducible_from_the_seed_and_follow_the_options():
    a, b = gen.kv_retrieval(pairs=5, n=20, seed=3, key_length=8, value_length=6), gen.kv_retrieval(pairs=5, n=20, seed=3, key_length=8, value_length=6)
    assert a == b and a != gen.kv_retrieval(pairs=5, n=20, seed=4, key_length=8, value_length=6)
    for row in a:
        record = docs.parse_row(row, "x")
        keys = [d.split('"')[1] for d in record.documents]
        assert len(record.documents) == 5 and len(set(keys)) == 5 and all(len(k) == 8 for k in keys)
        assert len(record.answer) == 6 and f'"{keys[record.gold]}": "{record.answer}"' == record.documents[record.gold]
        assert keys[record.gold] in record.question
    assert len({r["gold"] for r in a}) > 1  # the gold position varies
    uuid_row = gen.kv_retrieval(pairs=2, n=1)[0]
    assert len(uuid_row["answer"]) == 36 and uuid_row["answer"].count("-") == 4  # a UUID by default


def test_qa_lookup_has_one_answering_document():
    from setllm.io.records import MCRecord

    records = [MCRecord(f"q{i}", f"Question number {i}?", ("x", f"answer {i % 7}"), 1) for i in range(30)]
    rows = gen.qa_lookup(records, docs=6, n=10, seed=1)
    assert rows == gen.qa_lookup(records, docs=6, n=10, seed=1) and len(rows) == 10
    for row in rows:
        r = docs.parse_row(row, "x")
        assert len(r.documents) == 6 and r.question in r.documents[r.gold]
        assert [docs.normalise(r.answer) in docs.normalise(d.split(" is: ")[1]) for d in r.documents].count(True) == 1


def test_move_gold_keeps_the_others_in_order():
    r = docs.parse_row(ROW, "x")
    assert docs.move_gold(r, 0) == (1, 0, 2, 3) and docs.move_gold(r, -1) == (0, 2, 3, 1) and docs.move_gold(r, 2) == (0, 2, 1, 3)
    with pytest.raises(DataError, match="outside its 4 documents"):
        docs.move_gold(r, 4)


def test_prompt_template():
    p = docs.documents_prompt(["a\nb", "c"], "Q?")
    assert p.text() == "Documents:\nDocument: a b\nDocument: c\nQuestion: Q?\nAnswer:"
    assert p.sets[0].elements == ("Document: a b\n", "Document: c\n")


@pytest.mark.parametrize("row, message", [
    ({**ROW, "documents": []}, "'documents' must be a non-empty list"),
    ({**ROW, "documents": ["ok", " "]}, "document 1 is empty"),
    ({**ROW, "gold": 4}, "'gold' must be an index into 'documents' (0..3), got 4"),
    ({k: v for k, v in ROW.items() if k != "answer"}, "missing field 'answer'"),
    ({**ROW, "gold": None, "answer": "nowhere"}, "the answer is in 0 documents"),
])
def test_bad_rows(row, message):
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        docs.parse_row(row, "f.jsonl:3")


def test_gold_found_from_the_answer():
    assert docs.parse_row({**ROW, "gold": None}, "x").gold == 1


def _answers(lm, record):
    """Generated answer and answer log-likelihood with the gold document at every position."""
    prompts = [docs.render(record, docs.move_gold(record, p)) for p in range(len(record.documents))]
    texts = lm.generate_many(prompts, max_new_tokens=6)
    scores = [s[0].logprob for s in lm.score_many(prompts, [[record.answer]] * len(prompts))]
    return texts, scores


def test_moving_the_gold_document_changes_nothing_for_set_llm_and_something_for_causal(sharp):
    tok = tiny_tokenizer()
    record = docs.parse_row(gen.kv_retrieval(pairs=5, n=1, seed=0, key_length=6, value_length=4)[0], "x")
    texts, scores = _answers(SetLLM(sharp, tok, "setmask-setpe"), record)
    assert len(set(texts)) == 1 and len(set(scores)) == 1  # bit-identical (exact mode)
    texts, scores = _answers(SetLLM(sharp, tok, "setmask-setpe", exact=False), record)
    assert len(set(texts)) == 1 and max(scores) - min(scores) < 1e-4  # unsorted: equal up to float sums
    _, scores = _answers(SetLLM(sharp, tok, "causal-pe"), record)
    assert max(scores) - min(scores) > 1e-3


def test_a_batch_of_answers_scores_each_gold_answer_as_the_library_does_alone(sharp):
    """The documents evaluation decodes with ``lm.generate`` and scores with the one scoring
    driver: each gold answer's log-likelihood is the bits ``lm.score`` gives that prompt
    alone (scores do not depend on their batch), the text what ``lm.generate`` decodes."""
    from setllm.evaluation.documents import answer_batch

    lm = SetLLM(sharp, tiny_tokenizer(), "causal-pe")
    rows = [docs.parse_row(r, "x") for r in gen.kv_retrieval(pairs=4, n=3, seed=2, key_length=6, value_length=4)]
    items = [(r, "0", tuple(range(4))) for r in rows]
    got = answer_batch(lm, items)
    prompts = [docs.render(r, order) for r, _, order in items]
    alone = [lm.score(p, [r.answer])[0].logprob for p, r in zip(prompts, rows)]
    assert [lp for _, lp, _, _ in got] == alone
    longest = max(len(lm.response_ids(p, r.answer)) for p, r in zip(prompts, rows))
    texts = lm.generate_many(prompts, max_new_tokens=longest + 8, stop=["\n"])
    assert [t for t, _, _, _ in got] == [t.strip() for t in texts]


def test_context_counts_positions_and_refuses_above_it():
    model, tok = tiny_model("llama", max_position_embeddings=256), tiny_tokenizer()
    record = docs.parse_row(gen.kv_retrieval(pairs=12, n=1, seed=3, key_length=8, value_length=8)[0], "x")
    prompt = docs.render(record, tuple(range(12)))
    with pytest.raises(DataError.__mro__[1], match="longer than the model's context \\(256 tokens\\)"):
        SetLLM(model, tok, "setmask-setpe").encode(prompt)  # SetPE resumes after the set at start + its tokens
    enc = SetLLM(model, tok, "prefix-nope").encode(prompt)  # every position 0: no position beyond the context
    assert len(enc) > 256


def test_per_position_accounting_on_a_hand_built_table():
    # Three rows, positions 0 and -1; row c was run once (an invariant variant): it counts everywhere.
    rows = [
        {"positions": ["0", "-1"], "correct": [True, False], "answer_logprob": [-1.0, -3.0], "one_run": False},
        {"positions": ["0", "-1"], "correct": [True, True], "answer_logprob": [-2.0, -2.0], "one_run": False},
        {"positions": ["*"], "correct": [False], "answer_logprob": [-4.0], "one_run": True},
    ]
    got = docs.position_accuracy(rows, ["0", "-1"])
    assert got["accuracy_by_gold_position"] == {"0": round(200 / 3, 4), "-1": round(100 / 3, 4)}
    assert got["gold_position_gap"] == pytest.approx(100 / 3, abs=1e-3) and got["gold_position_mean"] == 50.0
    assert got["answer_logprob_by_gold_position"] == {"0": round(-7 / 3, 4), "-1": -3.0}
    # The modes read generated answers as they read option picks: majority is the most
    # generated answer over positions, adversarial right at every position.
    r = QuestionResult("q", "two", ((0,), (1,), (2,)), ("two", "three", "two"))
    assert METRICS["majority"].per_question(r, 0) == 1.0 and METRICS["adversarial"].per_question(r, 0) == 0.0
    assert METRICS["random"].per_question(r, 0) == pytest.approx(2 / 3)


def test_normalised_exact_match():
    from reference import exact_match

    assert exact_match(" The Two.\nmore", "two") and not exact_match("two three", "two")


def test_training_rows_move_the_gold_document_seeded(tmp_path):
    path = tmp_path / "kv.jsonl"
    rows = gen.kv_retrieval(pairs=6, n=30, seed=2, key_length=4, value_length=4)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    examples, _ = load_examples([str(path)])
    again, _ = load_examples([str(path)])
    assert [e.prompt for e in examples] == [e.prompt for e in again]
    gold_at = []
    for row, e in zip(rows, examples):
        (elements,) = [s.elements for s in e.prompt.sets]
        assert e.response == row["answer"] and sorted(elements) == sorted(f"Document: {d}\n" for d in row["documents"])
        gold_at.append(elements.index(f"Document: {row['documents'][row['gold']]}\n"))
    assert len(set(gold_at)) > 3


def test_flex_and_sdpa_give_the_same_scores_on_a_long_set_prompt():
    from tiny import same_weights

    tok = tiny_tokenizer()
    flex = tiny_model("llama", attn="flex_attention", max_position_embeddings=2048)
    sdpa = same_weights(flex, "sdpa")
    record = docs.parse_row(gen.kv_retrieval(pairs=40, n=1, seed=5, key_length=8, value_length=8)[0], "x")
    prompt = docs.render(record, tuple(range(40)))
    a, b = SetLLM(flex, tok, "setmask-setpe"), SetLLM(sdpa, tok, "setmask-setpe")
    assert len(a.encode(prompt)) > 600
    sa, sb = a.score(prompt, [record.answer, "0000"]), b.score(prompt, [record.answer, "0000"])
    assert [x.logprob for x in sa] == pytest.approx([x.logprob for x in sb], abs=1e-5)
    # A second prompt length: on CPU each length compiles on its own (torch 2.13's dynamic-shape
    # flex kernel fails to compile; see flex.configure_compiler).
    shorter = docs.documents_prompt(list(record.documents[:30]), record.question)
    sa, sb = a.score(shorter, [record.answer]), b.score(shorter, [record.answer])
    assert sa[0].logprob == pytest.approx(sb[0].logprob, abs=1e-5)


def test_auto_attention_takes_flex_for_long_prompts_only(model_dir, monkeypatch):
    """Generation's prefill: scoring runs its own attention per request (setllm.core.attention.packed_attention)."""
    import setllm.core.forward.runtime as runtime
    from setllm.loading import options as load_options

    assert load_options.LONG_PROMPT_TOKENS == runtime.FLEX_FROM["cpu"]  # the --help text says the real threshold
    backends = []
    real = runtime.render
    monkeypatch.setattr(runtime, "render", lambda impl, *a: backends.append(impl) or real(impl, *a))
    monkeypatch.setitem(runtime.FLEX_FROM, "cpu", 100)
    auto = SetLLM.from_pretrained(model_dir, adapter=None, variant="setmask-setpe")  # attn_implementation="auto"
    sdpa = SetLLM.from_pretrained(model_dir, adapter=None, variant="setmask-setpe", attn_implementation="sdpa")
    record = docs.parse_row(gen.kv_retrieval(pairs=5, n=1, seed=4, key_length=6, value_length=6)[0], "x")
    long, short = docs.render(record, tuple(range(5))), docs.documents_prompt(["a b", "c d"], "Q?")
    assert len(auto.encode(long)) > 100 > len(auto.encode(short))
    auto.generate(long, max_new_tokens=3)
    assert backends[0] == "flex_attention" and auto.model.config._attn_implementation == "setllm:sdpa"  # the model unchanged by the prefill
    backends.clear()
    sdpa.generate(long, max_new_tokens=3)
    assert set(backends) == {"sdpa"}
    backends.clear()
    auto.generate(short, max_new_tokens=3)
    assert set(backends) == {"sdpa"}


def test_decoding_renders_one_mask_row_per_step(sharp, monkeypatch):
    """After a long set prompt each decoding step renders a [B, 1, 1, K] mask, not K x K."""
    import setllm.core.forward.runtime as runtime

    shapes = []
    real = runtime.render

    def spy(backend, spec, *a):
        shapes.append((spec.q_len, spec.layout.shape[1]))
        return real(backend, spec, *a)

    monkeypatch.setattr(runtime, "render", spy)
    record = docs.parse_row(gen.kv_retrieval(pairs=20, n=1, seed=1, key_length=6, value_length=6)[0], "x")
    lm = SetLLM(sharp, tiny_tokenizer(), "setmask-setpe")
    lm.generate(docs.render(record, tuple(range(20))), max_new_tokens=5, stop=["never"])
    n = len(lm.encode(docs.render(record, tuple(range(20)))))
    assert shapes[0] == (n, n) and shapes[1:] and all(q == 1 for q, _ in shapes[1:])


def test_answer_api_is_order_free(sharp):
    lm = SetLLM(sharp, tiny_tokenizer(), "setmask-setpe")
    d = ROW["documents"]
    assert lm.answer(d, ROW["question"], max_new_tokens=4) == lm.answer(d[::-1], ROW["question"], max_new_tokens=4)


def test_documents_default_to_sbp_with_its_documents_adapter():
    """Documents are read by default under sbp, with the adapter trained for it (the reading that
    answers the held-out lists best and caches); the setmask-setpe documents adapter stays a
    variant's name away; its other kinds of task and canonical read the base model under sbp."""
    from setllm import LoadOptions
    from setllm.api import default_adapter
    from setllm.loading.plan import plan_load
    from setllm.loading.record import read_record

    documents = default_adapter("documents")
    assert documents is not None and documents.endswith("smollm2-135m-documents-sbp")
    assert documents not in (default_adapter("choose"), default_adapter("judge"))
    assert plan_load(LoadOptions(), "documents").adapter == documents == default_adapter("documents", "sbp")
    assert read_record(documents).info.variant == "sbp"  # trained under the reading it is loaded for
    assert plan_load(LoadOptions(), "documents").reading.variant == "sbp"
    assert plan_load(LoadOptions(variant="sbp"), "documents").adapter == documents
    assert plan_load(LoadOptions(variant="causal-pe"), "documents").adapter is None  # the base model: no adapter
    assert plan_load(LoadOptions(variant="sbp"), "choose").adapter is None
    assert plan_load(LoadOptions(variant="canonical"), "documents").adapter is None
    assert plan_load(LoadOptions(variant="sbp", adapter="none"), "documents").adapter is None


def test_the_setmask_setpe_documents_adapter_is_a_variant_away():
    from setllm import LoadOptions
    from setllm.api import default_adapter
    from setllm.loading.plan import plan_load
    from setllm.loading.record import read_record

    setmask = plan_load(LoadOptions(variant="setmask-setpe"), "documents").adapter
    assert setmask is not None and setmask.endswith("smollm2-135m-documents") and setmask == default_adapter("documents", "setmask-setpe")
    assert read_record(setmask).info.variant == "setmask-setpe"
    assert plan_load(LoadOptions(variant="prefix-setpe"), "documents").adapter == setmask  # a trained variant: the one trained under one
    assert plan_load(LoadOptions(variant="setmask-setpe"), "choose").adapter == default_adapter("choose")


# -- CLI ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sharp_dir(tmp_path_factory, sharp):
    path = tmp_path_factory.mktemp("sharp")
    sharp.save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return str(path)


def _eval(capsys, sharp_dir, data, out, *extra):
    return run_cli(capsys, "eval", "--dataset", "documents", "--data-file", str(data), "--model", sharp_dir, "--adapter", "none",
                   "--out", str(out), "--no-progress", "--batch-size", "8", *extra)


def test_data_eval_report(capsys, tmp_path, sharp_dir):
    data = tmp_path / "kv.jsonl"
    code, _, err = run_cli(capsys, "data", "kv-retrieval", "--pairs", "6", "--n", "4", "--seed", "1", "--key-length", "6",
                           "--value-length", "4", "--out", str(data))
    assert code == 0 and err == f"wrote 4 kv-retrieval rows to {data}\n" and len(data.read_text().splitlines()) == 4  # one line
    code, out, err = _eval(capsys, sharp_dir, data, tmp_path / "causal", "--variant", "causal-pe", "--gold-positions", "0,2,-1")
    assert code == 0, err
    s = json.loads((tmp_path / "causal" / "summary.json").read_text())
    assert list(s["accuracy_by_gold_position"]) == ["0", "2", "-1"] and not s["one_run_per_question"]
    assert s["gold_position_gap"] == max(s["accuracy_by_gold_position"].values()) - min(s["accuracy_by_gold_position"].values())
    assert set(s["accuracy"]) == {"single", "random", "adversarial", "majority"} and "by gold position" in out
    assert "causal-pe: single" in out and "(modified)" not in out  # --template does not apply to documents rows
    assert s["max_logprob_diff"] > 1e-3  # the causal model's answer score moves with the gold document
    code, out, _ = _eval(capsys, sharp_dir, data, tmp_path / "set", "--variant", "setmask-setpe", "--gold-positions", "0,2,-1")
    s = json.loads((tmp_path / "set" / "summary.json").read_text())
    assert code == 0 and s["one_run_per_question"] and s["gold_position_gap"] == 0 and "one run per row" in out
    assert s["note"].startswith("invariant variant: one run per row")
    code, _, _ = _eval(capsys, sharp_dir, data, tmp_path / "verify", "--variant", "setmask-setpe", "--gold-positions", "0,2,-1",
                       "--verify-invariance")
    s = json.loads((tmp_path / "verify" / "summary.json").read_text())
    assert code == 0 and not s["one_run_per_question"] and s["invariance_flips"] == 0 and s["max_logprob_diff"] < 1e-4
    code, out, err = run_cli(capsys, "report", str(tmp_path / "causal"), str(tmp_path / "set"), "--plot-dir", str(tmp_path / "plots"))
    assert code == 0, err
    assert (tmp_path / "plots" / "gold_position_documents.png").stat().st_size > 1000 and "exact match by gold position" in out


def test_qa_lookup_cli_reads_a_benchmark(capsys, tmp_path):
    from pathlib import Path

    fixtures = Path(__file__).parents[1] / "fixtures" / "eval"
    out = tmp_path / "qa.jsonl"
    code, _, err = run_cli(capsys, "data", "qa-lookup", "--data-dir", str(fixtures), "--source", "arc_challenge", "--split", "test",
                           "--docs", "3", "--n", "4", "--out", str(out))
    assert code == 0, err
    rows = [docs.parse_row(json.loads(line), "x") for line in out.read_text().splitlines()]
    assert len(rows) == 4 and all(len(r.documents) == 3 and r.question in r.documents[r.gold] for r in rows)
    code, _, err = run_cli(capsys, "data", "qa-lookup", "--data-dir", str(fixtures), "--source", "arc_challenge", "--split", "test",
                           "--docs", "9", "--out", str(out))
    assert code == 2 and "fewer than --docs 9" in err


def test_bad_rows_through_the_cli_name_file_and_line(capsys, tmp_path, sharp_dir):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROW) + "\n" + json.dumps({**ROW, "id": "b", "gold": 9}) + "\n")
    code, _, err = _eval(capsys, sharp_dir, bad, tmp_path / "o")
    assert code == 2 and err.startswith(f"error: {bad}:2: 'gold' must be an index") and len(err.strip().splitlines()) == 1
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(ROW) + "\n")
    code, _, err = _eval(capsys, sharp_dir, good, tmp_path / "o2", "--gold-positions", "0,7")
    assert code == 2 and "gold position 7 is outside its 4 documents" in err
    code, _, err = _eval(capsys, sharp_dir, good, tmp_path / "o3", "--gold-positions", "0,x")
    assert code == 2 and "comma-separated integers" in err


def test_documents_under_sbp_are_read_once_across_orderings_and_say_what_it_saved(capsys, tmp_path, sharp_dir):
    """--variant sbp with --verify-invariance reads each row in every gold position: every
    document after the first ordering comes from the cache, and the answers are those of a
    run that reads every document afresh (--cache-mb 0)."""
    data = tmp_path / "kv.jsonl"
    run_cli(capsys, "data", "kv-retrieval", "--pairs", "5", "--n", "3", "--seed", "2", "--key-length", "6", "--value-length", "4",
            "--out", str(data))
    runs = {}
    for name, extra in (("cached", []), ("fresh", ["--cache-mb", "0"])):
        code, out, err = _eval(capsys, sharp_dir, data, tmp_path / name, "--variant", "sbp", "--gold-positions", "0,2,-1",
                               "--verify-invariance", *extra)
        assert code == 0, err
        runs[name] = (json.loads((tmp_path / name / "summary.json").read_text()), out)
    (cached, out), (fresh, _) = runs["cached"], runs["fresh"]
    c = cached["document_cache"]
    # One prefix and 3 rows of 5 documents computed once each; every row read in 3 orders, each order generated
    # and scored: 6 readings of 6 pieces a row, 108 lookups in all.
    assert c["misses"] == 1 + 3 * 5 and c["hits"] == 3 * 6 * 6 - 16 and c["saved_s_estimate"] > 0
    assert "documents cached: 92 pieces reused, 16 computed, about" in out and "document_cache" not in fresh
    assert cached["invariance_flips"] == 0 and cached["accuracy"] == fresh["accuracy"]
    assert cached["accuracy_by_gold_position"] == fresh["accuracy_by_gold_position"]


def test_a_second_eval_run_reads_the_documents_the_first_kept_on_disk(capsys, tmp_path, sharp_dir):
    """--cache-dir: the second run (a new process's model, a new memory cache) computes no
    document, finds every one on disk, and answers with the same bits."""
    data = tmp_path / "kv.jsonl"
    run_cli(capsys, "data", "kv-retrieval", "--pairs", "4", "--n", "2", "--seed", "3", "--key-length", "6", "--value-length", "4",
            "--out", str(data))
    runs = []
    for name in ("first", "second"):
        code, out, err = _eval(capsys, sharp_dir, data, tmp_path / name, "--variant", "sbp", "--gold-positions", "0,-1",
                               "--cache-dir", str(tmp_path / "kv-cache"))
        assert code == 0, err
        runs.append((json.loads((tmp_path / name / "summary.json").read_text()), out))
    (first, _), (second, out) = runs
    assert first["document_cache"]["disk_writes"] == 1 + 2 * 4 and first["document_cache"]["disk_hits"] == 0
    assert second["document_cache"]["misses"] == 0 and second["document_cache"]["disk_hits"] == 1 + 2 * 4
    assert "(9 from disk), 0 computed" in out
    assert second["answer_logprob_by_gold_position"] == first["answer_logprob_by_gold_position"]
