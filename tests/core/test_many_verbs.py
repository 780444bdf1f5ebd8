"""The batched verbs: ``choose_many``, ``judge_many`` and ``answer_many`` take many rows in one
call and give each row what ``choose``, ``judge`` and ``answer`` give it alone, to the bit
(the scoring driver's shapes are fixed per request, and batched decoding equals one prompt at a
time), with the verbs' own checks; the CLI's ``--input`` jobs go through them."""

import json

import pytest
from tiny import run_cli, tiny_model, tiny_tokenizer

from setllm import SetLLM
from setllm.errors import InputError


@pytest.fixture(scope="module")
def lm():
    return SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe", batch_size=2)


QUESTIONS = [
    ("Which city is the capital of France?", ["Budapest", "Paris", "Zurich"]),
    ("Which is a fruit?", ["apple", "dog"], "Think of the kitchen."),
    ("Pick a colour.", ["red", "blue", "green", "seven"], None),
    ("Which is a fruit?", ["dog", "apple"]),  # the second row again, its options in another order
    ("Which number is even?", ["three", "four", "five", "nine", "eleven"]),
]
JUDGED = [
    ("Name a colour.", ["Red.", "A dog."]),
    ("Say hi", ["Hello!", "Go away.", "Hi there."], "politely"),
    ("Name a colour.", ["A dog.", "Red.", ""]),
]
DOCS = ["The backup server runs at 2 am.\n", "Lena leads the billing team.\n", "The office wifi password is maple-77.\n"]
ASKED = [(DOCS, "When does the backup server run?"), (DOCS[::-1], "Who leads the billing team?"), (DOCS[:2], "Who leads billing?")]


def test_choose_many_gives_each_question_the_bits_choose_gives_it_alone(lm, threads):
    for normalize in (False, True):
        alone = [lm.choose(q[0], q[1], *q[2:], normalize=normalize) for q in QUESTIONS]
        many = lm.choose_many(QUESTIONS, normalize=normalize)
        assert many == alone  # answers, indices and every option's log-likelihood, exactly
    assert many[1].answer == many[3].answer  # the set's order does not matter (exact mode)
    assert lm.choose_many([]) == []


def test_judge_many_gives_each_row_the_bits_judge_gives_it_alone(lm, threads):
    for readout in ("verdict", "pmi", None):
        alone = [lm.judge(r[0], r[1], input=r[2] if len(r) > 2 else None, readout=readout) for r in JUDGED]
        assert lm.judge_many(JUDGED, readout=readout) == alone


def test_answer_many_answers_as_answer_does_one_at_a_time(lm):
    alone = [lm.answer(d, q, max_new_tokens=5) for d, q in ASKED]
    assert lm.answer_many(ASKED, max_new_tokens=5) == alone
    assert lm.answer_many([]) == []


def test_answer_many_reads_with_the_reading_answer_reads_with(lm, monkeypatch):
    """Both go through ``documents_reader`` (the documents adapter, where one was loaded
    beside the model): here a reader of another variant stands in for it."""
    other = lm.with_variant("causal-pe")
    readers = []
    monkeypatch.setattr(SetLLM, "documents_reader", lambda self: readers.append(self) or other)
    many = lm.answer_many(ASKED, max_new_tokens=5)
    assert readers == [lm]  # asked once, for the whole call
    assert many == [lm.answer(d, q, max_new_tokens=5) for d, q in ASKED] == [
        t.strip() for t in other.generate_many([other_prompt(d, q) for d, q in ASKED], max_new_tokens=5, stop=["\n"])]


def other_prompt(documents, question):
    from setllm.tasks.documents import documents_prompt

    return documents_prompt(list(documents), question)


@pytest.mark.parametrize("call, rows, message", [
    ("choose_many", "Which?", r"choose_many takes a list of rows \(question, options\[, context\]\), got str; for one, call choose"),
    ("choose_many", [("Which?", ["a", "b"]), "Which?"], r"rows\[1\] must be a tuple \(question, options\[, context\]\), got str"),
    ("choose_many", [("Which?",)], r"rows\[0\] must be a tuple \(question, options\[, context\]\), got 1 items"),
    ("choose_many", [("Which?", ["a", "b"]), ("Which?", ["a", "a"])], r"rows\[1\]\.options: duplicate option 'a'"),
    ("choose_many", [("Which?", ["a", "b"]), (" ", ["a", "b"])], r"rows\[1\]\.question must be non-empty text"),
    ("judge_many", [("Say hi", ["Hello!", "Hi."], "politely", "x")], r"rows\[0\] must be a tuple \(instruction, candidates\[, input\]\)"),
    ("judge_many", [("Say hi", "Hello!")], r"rows\[0\]\.candidates must be a list of strings, got str"),
    ("answer_many", [(DOCS, "Q?"), ("Q?", DOCS)], r"rows\[1\]\.documents must be a list of strings, got str"),
    ("answer_many", [(DOCS, "Q?"), ([], "Q?")], r"rows\[1\]\.documents: answering needs at least one document"),
])
def test_a_bad_row_is_named_by_its_index(lm, call, rows, message):
    with pytest.raises(InputError, match=message):
        getattr(lm, call)(rows)


def test_the_many_verbs_keep_the_single_verbs_arguments_checks(lm):
    with pytest.raises(InputError, match="tie_margin must be >= 0"):
        lm.judge_many(JUDGED, tie_margin=-1)
    with pytest.raises(InputError, match=r"^max_new_tokens must be at least 1, got 0"):
        lm.answer_many(ASKED, max_new_tokens=0)
    with pytest.raises(TypeError):
        lm.choose_many([q for q, *_ in QUESTIONS], [o for _, o, *_ in QUESTIONS])  # two lists: normalize is keyword-only


def test_choose_many_warns_where_the_caller_asked(lm):
    from setllm.errors import SetLLMWarning

    with pytest.warns(SetLLMWarning, match=r"rows\[0\]\.options: leading/trailing whitespace stripped") as said:
        [spaced] = lm.choose_many([("Capital?", ["Paris ", "Rome"])])
    assert said[0].filename == __file__
    assert spaced == lm.choose("Capital?", ["Paris", "Rome"])


@pytest.mark.parametrize("verb", ["choose", "judge", "answer"])
def test_the_cli_input_jobs_go_through_the_many_verbs(verb, model_dir, capsys, tmp_path, monkeypatch):
    rows = {"choose": [{"question": q[0], "options": q[1], **({"context": q[2]} if len(q) > 2 and q[2] else {})} for q in QUESTIONS],
            "judge": [{"instruction": r[0], "candidates": r[1], **({"input": r[2]} if len(r) > 2 else {})} for r in JUDGED],
            "answer": [{"documents": d, "question": q} for d, q in ASKED]}[verb]
    calls = []
    many = getattr(SetLLM, f"{verb}_many")
    monkeypatch.setattr(SetLLM, f"{verb}_many", lambda self, batch, *a, **k: calls.append(len(batch)) or many(self, batch, *a, **k))
    src, out = tmp_path / "rows.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    extra = ("--max-new-tokens", "4") if verb == "answer" else ()
    code, _, err = run_cli(capsys, verb, "--input", str(src), "--output", str(out), "--model", model_dir, "--adapter", "none",
                           "--batch-size", "2", "--no-progress", *extra)
    assert code == 0, err
    assert calls == [len(rows[i : i + 2]) for i in range(0, len(rows), 2)]  # one call a chunk of rows
    got = [json.loads(line) for line in out.read_text().splitlines()]
    lm = SetLLM.from_pretrained(model_dir, adapter="none")
    if verb == "choose":
        assert [g["scores"] for g in got] == [[s.logprob for s in lm.choose(q[0], q[1], *q[2:]).scores] for q in QUESTIONS]
    elif verb == "judge":
        assert [g["scores"] for g in got] == [lm.judge(r[0], r[1], input=r[2] if len(r) > 2 else None).scores for r in JUDGED]
    else:
        assert [g["answer"] for g in got] == [lm.answer(d, q, max_new_tokens=4) for d, q in ASKED]
