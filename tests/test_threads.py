"""A SetLLM shared by threads gives what serial calls give.

A computation never changes the model (setllm.core.model.install): views of one model run on
several threads at once; only a bank's views, which switch the shared active adapter, take
the model's lock around each computation (setllm.sharing) and take turns. Each call below
is the same computation on a thread as serially (same prompt, same shapes, one torch
thread), so its result has the same bits.
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
    each computation holds the one lock of the bank's weights from its adapter switch to its end."""
    views = {"a": bank["a"], "b": bank["b"], "base": bank.base, "a causal-pe": bank["a"].with_variant("causal-pe")}
    work = [c for c in calls(views) if " generate " not in c[0] or c[0].endswith(" 0")]  # fewer generations: they are slow
    serial = {name: fn() for name, fn in work}
    threaded = run_threaded(work)
    for name, results in threaded.items():
        assert all(r == serial[name] for r in results), name


def test_views_of_one_model_take_no_lock_but_bank_views_do(lm, bank):
    """A view of a model (no adapters to switch) computes while another thread holds the model's
    lock; a bank's view waits for it (its adapter must stay active through its forward)."""
    prompt, options = mc_prompt(*QUESTIONS[0]), QUESTIONS[0][1]
    done = {}
    held, release = threading.Event(), threading.Event()

    def hold(model):
        with model_lock(model):
            held.set()
            release.wait(30)

    for name, view in (("plain", lm.with_variant("causal-pe")), ("bank", bank["a"])):
        holder = threading.Thread(target=hold, args=(view.model,))
        holder.start()
        held.wait(30)
        caller = threading.Thread(target=lambda n=name, v=view: done.setdefault(n, v.score(prompt, options)))
        caller.start()
        caller.join(10 if name == "plain" else 2)
        finished = name in done
        release.set()
        holder.join()
        caller.join()
        held.clear()
        release.clear()
        assert finished == (name == "plain"), name
