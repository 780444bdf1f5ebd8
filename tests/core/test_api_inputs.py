"""The Python API's shapes and refusals match the other surfaces: one prompt with a flat
options list gives flat scores (as HTTP ``/v1/score`` takes it), a list of prompts keeps the
nested form; ``answer`` refuses what the CLI and the data files refuse."""

import pytest
from tiny import tiny_model, tiny_tokenizer

from setllm import Set, SetLLM
from setllm.core.text.prompt import parse_markup
from setllm.errors import InputError


@pytest.fixture(scope="module")
def lm():
    return SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")


MARKUP = "Pick one:\n{{apple\n||dog\n}}Answer:"


def test_one_prompt_with_a_flat_options_list_gives_flat_scores(lm):
    flat = lm.score(MARKUP, options=["apple", "dog"])
    assert [s.text for s in flat] == ["apple", "dog"]
    [nested] = lm.score_many([MARKUP], [["apple", "dog"]])  # a list of prompts: one list of scores per prompt
    assert [s.logprob for s in flat] == [s.logprob for s in nested]
    assert [s.logprob for s in lm.score(MARKUP)] == [s.logprob for s in flat]  # default options: the set's elements
    assert [s.logprob for s in lm.score(["Pick one:\n", Set(["apple\n", "dog\n"]), "Answer:"], ["dog"])] == [flat[1].logprob]
    with pytest.warns(FutureWarning, match="score_many"):  # one prompt, options nested as for a list: as before
        [[a, b]] = lm.score(parse_markup(MARKUP), [["apple", "dog"]])
    assert [a.logprob, b.logprob] == [s.logprob for s in flat]
    with pytest.raises(InputError, match="options must be a list of strings, got str"):
        lm.score(MARKUP, options="apple")
    with pytest.raises(InputError, match=r"a list of 2 strings is read as 2 prompts"):
        lm.score([MARKUP, MARKUP], ["apple", "dog"])  # a list of prompts takes a list of options per prompt


def test_answer_refuses_no_documents_and_an_empty_question(lm):
    with pytest.raises(InputError, match="documents: answering needs at least one document, got none"):
        lm.answer([], "Q?")
    for question in ("", "  \n"):
        with pytest.raises(InputError, match="question must be non-empty text"):
            lm.answer(["doc"], question)
    with pytest.raises(InputError, match=r"documents\[1\] must be non-empty text"):
        lm.answer(["doc", " "], "Q?")
