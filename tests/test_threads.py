"""A SetLLM shared by threads gives what serial calls give.

A computation switches the shared model while it runs (every linear layer's forward, the
attention implementation, a bank's active adapter); every view of one model's weights takes
the model's one lock around each computation (setllm.sharing), so concurrent calls take
turns. Each call below is the same computation on a thread as serially (same prompt, same
shapes, one torch thread), so its result has the same bits.
"""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from tiny import tiny_adapter, tiny_model, tiny_tokenizer

from setllm import AdapterBank, SetLLM, mc_prompt
from setllm.sharing import model_lock

QUESTIONS = [
    ("Which is a fruit?", ["apple", "dog", "car", "water"]),
    ("Which city is the capital of France?", ["Budapest", "Paris", "Zurich"]),
    ("What do plants need to make food?", ["sunlight", "soil", "rocks"]),
]
THREADS = 8


@pytest.fixture(scope="module")
def lm():
    return SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")


@pytest.fixture(scope="module")
def bank(model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("thread-adapters")
    return AdapterBank.from_pretrained(model_dir, {n: tiny_adapter(model_dir, root / n, s) for s, n in enumerate("ab", start=1)})


def calls(views: dict[str, SetLLM]) -> list[tuple[str, object]]:
    """(name, zero-argument call) for every kind of computation on every view."""
    out = []
    for view_name, v in views.items():
        for i, (question, options) in enumerate(QUESTIONS):
            prompt = mc_prompt(question, options)
            out += [
                (f"{view_name} score {i}", lambda v=v, p=prompt, o=options: [s.logprob for s in v.score(p, o)]),
                (f"{view_name} choose {i}", lambda v=v, q=question, o=options: (lambda c: (c.answer, c.scores))(v.choose(q, o))),
                (f"{view_name} generate {i}", lambda v=v, p=prompt: v.generate(p, max_new_tokens=4)),
                (f"{view_name} judge {i}", lambda v=v, q=question, o=options: (lambda j: (j.ranking, j.scores))(v.judge(q, o[:3]))),
            ]
    return out


def run_threaded(work: list[tuple[str, object]], repeats: int = 2) -> dict[str, list]:
    """Every call ``repeats`` times, shuffled over :data:`THREADS` threads started together."""
    jobs = work * repeats
    random.Random(0).shuffle(jobs)
    start = threading.Barrier(THREADS)
    got: dict[str, list] = {}

    def worker(k: int):
        start.wait()  # all threads at once: calls overlap from the first
        return [(name, fn()) for name, fn in jobs[k::THREADS]]

    with ThreadPoolExecutor(THREADS) as pool:
        for part in pool.map(worker, range(THREADS)):
            for name, result in part:
                got.setdefault(name, []).append(result)
    return got


def test_threads_give_the_serial_results(lm):
    views = {"setmask-setpe": lm, **{name: lm.with_variant(name) for name in ("causal-pe", "sbp", "canonical")}}
    work = calls(views)
    serial = {name: fn() for name, fn in work}
    threaded = run_threaded(work)
    assert len(threaded) == len(serial) and sum(map(len, threaded.values())) == 2 * len(work)
    for name, results in threaded.items():
        assert all(r == serial[name] for r in results), name  # the same computation: the same bits


def test_bank_views_and_variant_views_share_one_lock(bank):
    """A bank's views (each switching the adapter) and their with_variant views on threads:
    one lock for all of them, taken twice on one thread (view, then bank) without deadlock."""
    views = {"a": bank["a"], "b": bank["b"], "base": bank.base, "a causal-pe": bank["a"].with_variant("causal-pe")}
    assert len({id(v._lock) for v in views.values()}) == 1 and views["a"]._lock is model_lock(bank.model)
    work = [c for c in calls(views) if " generate " not in c[0] or c[0].endswith(" 0")]  # fewer generations: they are slow
    serial = {name: fn() for name, fn in work}
    threaded = run_threaded(work)
    for name, results in threaded.items():
        assert all(r == serial[name] for r in results), name


def test_views_of_one_model_share_its_lock(lm):
    """The lock belongs to the weights: every view of them, and a PEFT wrapper and the model it wraps, hold one."""
    assert lm.with_variant("causal-pe")._lock is lm._lock is model_lock(lm.model)
    other = SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")
    assert other._lock is not lm._lock  # another model runs on its own
