"""A call never changes the model, so calls on one model run on several threads at once
(:mod:`setllm.core.model.install`): a thread watching the model sees nothing change while another
calls it, and two threads scoring at the same time get the bits each gets alone."""

from __future__ import annotations

import threading

import torch
from tiny import tiny_model, tiny_tokenizer

from setllm import GenerationConfig, SetLLM, mc_prompt

QUESTIONS = [("Which is a fruit?", ["apple", "dog", "the quick brown fox"]), ("What do plants need?", ["sunlight", "rocks"]),
             ("Which city is the capital of France?", ["Paris", "Budapest", "Zurich"])]


def snapshot(model) -> tuple:
    """What a call could change on the model: every module's instance forward and class, the
    attention implementation and the config's attributes."""
    modules = tuple((name, type(m), m.__dict__.get("forward")) for name, m in model.named_modules())
    config = tuple(sorted((k, repr(v)) for k, v in vars(model.config).items()))
    return modules, model.config._attn_implementation, config


def test_a_thread_watching_the_model_sees_no_change_while_another_calls_it():
    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")
    before = snapshot(lm.model)
    seen, done = [], threading.Event()

    def watch():
        while not done.is_set():
            seen.append(snapshot(lm.model))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for q, options in QUESTIONS:
            lm.score(mc_prompt(q, options), options)
            lm.generate(mc_prompt(q, options), GenerationConfig(max_new_tokens=3))
            lm.token_details(lm.encode(mc_prompt(q, options)), lm.response_ids(mc_prompt(q, options), options[0]))
    finally:
        done.set()
        watcher.join()
    assert len(seen) > 10  # the watcher sampled during the calls
    assert all(s == before for s in seen)


def test_two_threads_score_at_the_same_time_with_the_bits_of_each_alone():
    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), "setmask-setpe")
    views = [lm, lm.with_variant("causal-pe")]
    alone = [[v.score(mc_prompt(q, o), o) for q, o in QUESTIONS] for v in views]
    # Each thread's first forward waits at layer 0 for the other's: if one call held the model
    # while the other waited, the barrier would time out and break.
    barrier, first = threading.Barrier(2, timeout=30), threading.local()

    def meet(module, args):
        if not getattr(first, "met", False):
            first.met = True
            barrier.wait()

    handle = lm.model.model.layers[0].register_forward_pre_hook(meet)
    got, errors = [None, None], []

    def run(i):
        try:
            got[i] = [views[i].score(mc_prompt(q, o), o) for q, o in QUESTIONS]
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        handle.remove()
    assert not errors, errors
    assert got == alone  # the same bits (one thread count throughout: the module's fixture)
    assert torch.get_num_threads() == 1


def test_a_model_loaded_with_a_thread_count_computes_on_it_on_any_thread(model_dir):
    """Torch keeps a thread count per thread (a thread takes the process's count of the moment
    at its first parallel op), and a product's bits depend on it: a computation of a model
    loaded with ``threads`` runs on that many whatever the calling thread had."""
    from setllm import LoadOptions

    before = torch.get_num_threads()
    try:
        lm = SetLLM.load(LoadOptions(model_dir, "none", threads=2))
    finally:
        torch.set_num_threads(before)
    seen = []
    handle = lm.model.model.layers[0].register_forward_pre_hook(lambda m, a: seen.append(torch.get_num_threads()))

    def run():
        torch.set_num_threads(1)  # what a thread started during a one-thread stretch (the LoRA merge) keeps
        lm.score(mc_prompt(*QUESTIONS[0]), QUESTIONS[0][1])

    try:
        caller = threading.Thread(target=run)
        caller.start()
        caller.join()
    finally:
        handle.remove()
    assert seen and set(seen) == {2}
