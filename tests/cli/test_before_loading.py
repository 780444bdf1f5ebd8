"""Errors that need no model come before it loads: each test makes loading fail loudly, so a
refusal that waited for the model would show as that failure instead of the one-line error."""

from __future__ import annotations

import json
import socket

import pytest
from tiny import run_cli

from setllm.api import SetLLM
from setllm.core.text.prompt import PromptError, parse_markup

ENDS_WITH_A_SET = r"Pick the fruit:\n{{car\n||apple\n}}"


class Loaded(Exception):
    """Raised in place of loading a model."""


@pytest.fixture
def no_loading(monkeypatch):
    def load(*args, **kwargs):
        raise Loaded("the model was loaded")

    monkeypatch.setattr(SetLLM, "build", load)  # every load builds from its plan


@pytest.mark.parametrize("flags", [[], ["--variant", "sbp"], ["--adapter", "none"]])
def test_generate_refuses_a_final_set_before_loading(no_loading, capsys, flags):
    code, out, err = run_cli(capsys, "generate", "--prompt", ENDS_WITH_A_SET, "--max-new-tokens", "2", *flags)
    assert code == 2 and out == "" and err == ('error: the prompt ends with a set: the response would be read from inside whichever '
                                               'element comes last; put text after the set, e.g. "Answer:"\n')


@pytest.mark.parametrize("flags", [["--variant", "causal-pe"], ["--chat"]])
def test_generate_lets_through_a_final_set_that_is_read_in_order_or_in_a_chat(no_loading, capsys, flags):
    with pytest.raises(Loaded):  # order-sensitive reading, or a template's text after the set: the model is needed
        run_cli(capsys, "generate", "--prompt", ENDS_WITH_A_SET, *flags)


def test_generate_reads_the_adapters_recorded_reading_before_loading(no_loading, capsys, tmp_path):
    """An adapter trained causally (its setllm.json) is read causally: nothing to refuse."""
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "setllm.json").write_text(json.dumps({"base_model": "x", "variant": "causal-pe"}))
    with pytest.raises(Loaded):
        run_cli(capsys, "generate", "--prompt", ENDS_WITH_A_SET, "--adapter", str(adapter))


def test_the_early_refusal_is_the_librarys(model_dir, capsys):
    """The same words as the codec's refusal after loading (`SetLLM.generate`)."""
    code, _, err = run_cli(capsys, "generate", "--prompt", ENDS_WITH_A_SET, "--model", model_dir, "--adapter", "none")
    lm = SetLLM.from_pretrained(model_dir, adapter=None)
    with pytest.raises(PromptError) as refused:
        lm.generate_many([parse_markup(ENDS_WITH_A_SET)])
    assert code == 2 and err == f"error: {refused.value}\n"


def test_serve_on_a_port_in_use_is_one_line_before_loading(no_loading, capsys):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = run_cli(capsys, "serve", "--port", str(port))
    assert code == 2 and err.startswith(f"error: cannot listen on 127.0.0.1:{port}: ") and err.count("\n") == 1, err


def test_an_interrupt_a_finalizer_swallowed_still_stops_the_command():
    """Ctrl-C raised inside a finalizer is printed and dropped by Python; the command still
    stops at its next step (serve: before it listens)."""
    import os
    import signal
    import time

    from setllm.cli import common

    before = signal.getsignal(signal.SIGINT)
    try:
        common.catch_interrupts()

        class Swallows:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)  # the handler runs here, inside the finalizer

        Swallows()  # dropped at once: its finalizer runs, the KeyboardInterrupt goes nowhere
        with pytest.raises(KeyboardInterrupt):
            common.stop_if_interrupted()
    finally:
        signal.signal(signal.SIGINT, before)
        common._interrupted.clear()
