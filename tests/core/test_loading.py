"""Loading, hardened: corrupt safetensors, adapters for another base model, portable adapters,
library noise, a hub that cannot be reached.

Tiny random models only (``tests/tiny.py``); ``$SETLLM_CACHE`` is a tmp dir in every test, and a
tiny model saved there stands in for the converted embedded model.
"""

from __future__ import annotations

import json
import socket
import time
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from tiny import tiny_model, tiny_tokenizer

from setllm import loading
from setllm.errors import SetLLMWarning
from setllm.loading import DEFAULT_MODEL, AdapterInfo, ModelLoadError, load_model

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Never the user's ~/.cache/setllm."""
    monkeypatch.setenv("SETLLM_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def embedded(tmp_path) -> Path:
    """A tiny model as the already-converted embedded model."""
    return save_base(tmp_path / "cache" / "SmolLM2-135M-Instruct")


def save_base(path: Path, seed: int = 0, **overrides) -> Path:
    tiny_model(seed=seed, **overrides).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


def save_adapter(out: Path, base: Path | None = None, record: str | None = None, **overrides) -> Path:
    """A LoRA adapter saved by PEFT: on the model loaded from ``base`` (PEFT then records that
    path, as after training), else on a fresh unnamed tiny model; ``record`` writes setllm.json."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    net = AutoModelForCausalLM.from_pretrained(str(base)) if base else tiny_model(**overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lora = LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False, task_type="CAUSAL_LM")
        get_peft_model(net, lora).save_pretrained(out)
    if record is not None:
        AdapterInfo(record, "setmask-setpe", "modified").write(out)
    return out


def one_line(e: pytest.ExceptionInfo) -> str:
    message = str(e.value)
    assert "\n" not in message, message
    return message


# -- 1. corrupt safetensors ------------------------------------------------------------------

CORRUPTIONS = {
    "truncated": (lambda f: f.write_bytes(f.read_bytes()[:-100]), "truncated: the tensors need"),
    "cut_in_header": (lambda f: f.write_bytes(f.read_bytes()[:40]), "the header claims"),
    "html_page": (lambda f: f.write_bytes(b"<!DOCTYPE html><html>502 Bad Gateway</html>"), "not safetensors"),
    "empty": (lambda f: f.write_bytes(b""), "too short"),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_corrupt_model_weights_are_one_line_naming_the_file(tmp_path, kind):
    corrupt, reason = CORRUPTIONS[kind]
    weights = save_base(tmp_path / "base") / "model.safetensors"
    corrupt(weights)
    with pytest.raises(ModelLoadError) as e:
        load_model(str(tmp_path / "base"))
    assert one_line(e).startswith(f"{weights} is not a valid safetensors file (") and reason in str(e.value)


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_corrupt_adapter_weights_are_one_line_naming_the_file(tmp_path, kind):
    corrupt, reason = CORRUPTIONS[kind]
    base = save_base(tmp_path / "base")
    weights = save_adapter(tmp_path / "adapter", base) / "adapter_model.safetensors"
    corrupt(weights)
    with pytest.raises(ModelLoadError) as e:
        load_model(str(base), str(tmp_path / "adapter"))
    assert one_line(e).startswith(f"{weights} is not a valid safetensors file (") and reason in str(e.value)


def test_corrupt_embedded_cache_is_converted_again(tmp_path, embedded, monkeypatch, capsys):
    """A truncated cached conversion is rebuilt, not loaded (the GGUF conversion itself, ~30 s,
    is replaced by saving a tiny model)."""
    weights = embedded / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    conversions = []

    def convert(gguf, dest):
        conversions.append(dest)
        save_base(Path(dest))

    monkeypatch.setattr(loading.sources, "embedded_gguf", lambda: tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf")
    monkeypatch.setattr(loading.convert, "convert_gguf", convert)
    net, _ = load_model()
    assert len(conversions) == 1 and "converting again" in capsys.readouterr().err
    loading.check_safetensors(weights)  # the rebuilt file is whole
    assert net.config.hidden_size == 32
    load_model()
    assert len(conversions) == 1  # a sound cache is not converted again
    assert not list((tmp_path / "cache").glob(".convert-*"))


# -- 2. an adapter trained on another base model -------------------------------------------------

def test_adapter_for_another_base_is_refused_naming_both(tmp_path):
    base, other = save_base(tmp_path / "base"), save_base(tmp_path / "other", seed=1)  # same shapes
    adapter = save_adapter(tmp_path / "adapter", base, record=str(base))
    with pytest.raises(ModelLoadError) as e:
        load_model(str(other), str(adapter))
    message = one_line(e)
    assert str(base) in message and str(other) in message and "allow_base_mismatch=True" in message


def test_adapter_for_another_base_applies_when_forced_with_a_warning(tmp_path):
    base, other = save_base(tmp_path / "base"), save_base(tmp_path / "other", seed=1)
    adapter = save_adapter(tmp_path / "adapter", base, record=str(base))
    with pytest.warns(SetLLMWarning, match="trained on .*base.*applying it anyway"):
        net, _ = load_model(str(other), str(adapter), allow_base_mismatch=True)
    assert hasattr(net, "peft_config")  # applied, unmerged (as every surface reads an adapter)
    plain, _ = load_model(str(other))
    with pytest.raises(ModelLoadError, match="was trained on"):  # load_adapter checks too, by the model's own path
        loading.load_adapter(plain, str(adapter))
    with pytest.warns(SetLLMWarning):
        loading.load_adapter(plain, str(adapter), allow_base_mismatch=True)


def test_base_recorded_only_by_peft_is_checked(tmp_path):
    """No setllm.json (an adapter trained outside setllm): adapter_config.json's base counts."""
    base, other = save_base(tmp_path / "base"), save_base(tmp_path / "other", seed=1)
    adapter = save_adapter(tmp_path / "adapter", base)
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base)
    with pytest.raises(ModelLoadError, match="was trained on"):
        load_model(str(other), str(adapter))
    load_model(str(base), str(adapter))


@pytest.mark.parametrize("content, problem", [
    (b'{"variant": ', "not a valid setllm.json"),
    (b'["setmask-setpe"]', "not a valid setllm.json (not a JSON object)"),
    (b'{"variant": "set"}', "unknown variant 'set'"),
    (b'\xff\xfe{}', "not a valid setllm.json"),
])
def test_a_bad_setllm_json_names_its_file(tmp_path, content, problem):
    from setllm import SetLLM

    base = save_base(tmp_path / "base")
    adapter = save_adapter(tmp_path / "adapter", base)
    (adapter / "setllm.json").write_bytes(content)
    for load in (lambda: load_model(str(base), str(adapter)), lambda: SetLLM.from_pretrained(str(base), str(adapter))):
        with pytest.raises(ModelLoadError) as e:
            load()
        assert one_line(e).startswith(f"{adapter / 'setllm.json'}: ") and problem in str(e.value)


def test_shape_mismatch_is_one_line_naming_the_adapter(tmp_path):
    base = save_base(tmp_path / "base")
    adapter = save_adapter(tmp_path / "wide", hidden_size=64)  # no base recorded anywhere
    with pytest.raises(ModelLoadError) as e:
        load_model(str(base), str(adapter))
    message = one_line(e)
    assert str(adapter) in message and "size mismatch" in message and "does not fit" in message
    AdapterInfo("/elsewhere/wide-model", "setmask-setpe").write(adapter)
    with pytest.raises(ModelLoadError, match="does not fit"), pytest.warns(SetLLMWarning):
        load_model(str(base), str(adapter), allow_base_mismatch=True)  # forcing cannot fix shapes


def test_same_base_under_other_spellings_is_accepted(tmp_path, embedded, monkeypatch):
    base = save_base(tmp_path / "base")
    monkeypatch.chdir(tmp_path)
    relative = save_adapter(tmp_path / "relative", base, record="./base/")
    moved = save_adapter(tmp_path / "moved", base, record="/home/someone/models/base")  # trained on another machine
    on_embedded = save_adapter(tmp_path / "embedded", embedded, record=DEFAULT_MODEL)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SetLLMWarning)
        load_model(str(tmp_path / "base" / ".." / "base"), str(relative))
        load_model(str(base), str(moved))
        load_model(None, str(on_embedded))
        load_model(DEFAULT_MODEL, str(on_embedded))
    names = [DEFAULT_MODEL, HUB_ID, str(embedded), str(tmp_path / "cache" / "." / "SmolLM2-135M-Instruct")]
    assert all(loading.same_base(a, b) for a in names for b in names)
    assert not loading.same_base(DEFAULT_MODEL, "HuggingFaceTB/SmolLM2-360M-Instruct")
    assert not loading.same_base("org-a/model", "org-b/model")
    assert not loading.same_base(str(base), str(save_base(tmp_path / "x" / "base")))  # two local models


# -- 3. portable adapters -----------------------------------------------------------------------

def test_portable_adapter_for_the_embedded_model(tmp_path, embedded):
    adapter = save_adapter(tmp_path / "adapter", embedded, record=DEFAULT_MODEL)
    assert str(embedded) in (adapter / "README.md").read_text()  # PEFT records the cache path
    assert loading.make_adapter_portable(adapter, None) == HUB_ID
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == HUB_ID
    card = (adapter / "README.md").read_text()
    assert str(tmp_path / "cache") not in card
    front = yaml.safe_load(card.split("---")[1])
    assert front["base_model"] == HUB_ID and f"base_model:adapter:{HUB_ID}" in front["tags"]
    assert AdapterInfo.read(adapter).base_model == DEFAULT_MODEL  # setllm's own name stays
    (adapter / "setllm.json").unlink()  # then the hub id in adapter_config.json counts: still the embedded model
    with warnings.catch_warnings():
        warnings.simplefilter("error", SetLLMWarning)
        load_model(None, str(adapter))
    with pytest.raises(ModelLoadError, match="was trained on"):
        load_model(str(save_base(tmp_path / "other", seed=1)), str(adapter))


def test_portable_adapter_for_gemma3_names_its_public_hub_id(tmp_path):
    gemma = save_base(tmp_path / "cache" / "gemma3-270m")  # stands in for the converted wheel
    names = ["gemma3-270m", "google/gemma-3-270m", str(gemma), str(tmp_path / "cache" / "." / "gemma3-270m")]
    assert all(loading.same_base(a, b) for a in names for b in names)
    assert not loading.same_base("gemma3-270m", DEFAULT_MODEL) and not loading.same_base("google/gemma-3-270m", HUB_ID)
    adapter = save_adapter(tmp_path / "adapter", gemma, record="gemma3-270m")
    assert str(gemma) in (adapter / "README.md").read_text()
    assert loading.make_adapter_portable(adapter, "gemma3-270m") == "google/gemma-3-270m"
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == "google/gemma-3-270m"
    assert str(tmp_path / "cache") not in (adapter / "README.md").read_text()
    assert AdapterInfo.read(adapter).base_model == "gemma3-270m"  # setllm's own name stays


def test_portable_adapter_for_a_local_base_loads_with_plain_peft(tmp_path):
    from peft import AutoPeftModelForCausalLM

    base = save_base(tmp_path / "base")
    adapter = save_adapter(tmp_path / "adapter", hidden_size=32)
    assert loading.make_adapter_portable(adapter, str(base)) == str(base)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        plain = AutoPeftModelForCausalLM.from_pretrained(str(adapter)).merge_and_unload()
    ours, _ = load_model(str(base), str(adapter))
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        torch.testing.assert_close(plain(ids).logits, ours(ids).logits)


# -- 4. noise -----------------------------------------------------------------------------------

def test_loading_prints_no_library_noise(tmp_path, capsys):
    from transformers.utils import logging as hf_logging

    base = save_base(tmp_path / "base")
    adapter = save_adapter(tmp_path / "adapter", base, record=str(base))
    hf_logging.enable_progress_bar()  # the library default, whatever ran before
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_model(str(base), str(adapter))
    assert "Loading weights" not in capsys.readouterr().err
    assert not [w for w in caught if "is_gradient_checkpointing" in str(w.message)]
    assert hf_logging.is_progress_bar_enabled()  # switched back afterwards
    load_model(str(base), progress=True)
    assert "Loading weights" in capsys.readouterr().err  # asked for: kept


# -- 5. the family's attention ------------------------------------------------------------------

@pytest.mark.parametrize("arch, own", [("llama", "sdpa"), ("gemma2", "eager")])
def test_the_default_attention_is_the_familys_own_and_reads_as_it(tmp_path, arch, own):
    """``sdpa`` asked (the default) loads as the family reads: gemma2, which sdpa cannot
    soft-cap, on eager, without a config read before the load; the same bits as the model
    built on that attention (one computation on the same weights)."""
    model = tiny_model(arch, attn=own)
    model.save_pretrained(tmp_path / arch)
    tiny_tokenizer().save_pretrained(tmp_path / arch)
    net, _ = load_model(str(tmp_path / arch))
    assert net.config._attn_implementation == own
    ids = torch.tensor([[5, 17, 42, 9, 3]])
    with torch.no_grad():
        assert torch.equal(net(ids).logits, model(ids).logits)


def test_a_verified_family_loaded_on_another_attention_is_switched_to_its_own():
    from setllm.core.model.families import fit_attention

    net = tiny_model("llama", attn="eager")
    fit_attention(net, "sdpa")
    assert net.config._attn_implementation == "sdpa"
    fit_attention(net, "eager")  # asked by name: kept as asked
    assert net.config._attn_implementation == "eager"


# -- 6. the hub ---------------------------------------------------------------------------------

def test_offline_hub_fails_fast_with_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(ModelLoadError) as e:
        load_model("nonexistent-org/nonexistent-model")
    assert time.monotonic() - start < 5
    message = one_line(e)
    assert "offline" in message and "local path" in message and "nonexistent-org/nonexistent-model" in message


def test_offline_the_public_id_of_a_packaged_model_names_setllms_copy(monkeypatch, tmp_path):
    """An exported adapter names its base by public hub id (for plain PEFT); offline, that id
    given as the model says how to read setllm's own copy instead."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelLoadError) as e:
        load_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert one_line(e).endswith("offline (HF_HUB_OFFLINE is set): it is the model setllm packages as embedded:SmolLM2-135M-Instruct "
                                "(quantized): leave out --model to read that copy without the hub, or pass a local path to a downloaded model")
    with pytest.raises(ModelLoadError, match="pass --model gemma3-270m to read that copy without the hub"):
        load_model("google/gemma-3-270m")


@pytest.mark.parametrize("base, fix", [(None, "with no --model: it was trained on the embedded model, the default"),
                                       ("org/other-model", "with --model org/other-model, the base it was trained on")])
def test_an_adapter_given_as_the_model_is_named_for_what_it_is(tmp_path, base, fix):
    """An exported adapter's adapter_config.json names a hub base, which transformers would
    fetch; setllm reads an adapter as --adapter, on the base its setllm.json records."""
    from setllm.loading import make_adapter_portable

    adapter = tmp_path / "exported"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "setllm.json").write_text(json.dumps({"base_model": base or "embedded:SmolLM2-135M-Instruct"}))
    make_adapter_portable(adapter, base)
    with pytest.raises(ModelLoadError) as e:
        load_model(str(adapter))
    assert one_line(e) == f"model {str(adapter)!r} is a PEFT adapter, not a model: pass it as --adapter {adapter} (Python: adapter=...) {fix}" + (
        " (or a local copy of it)" if base else "")


@pytest.fixture
def unreachable_hub(monkeypatch):
    """Online, but nothing answers: a closed local port stands in for the hub."""
    from huggingface_hub import constants

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{s.getsockname()[1]}"
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    return endpoint


def test_unreachable_hub_fails_on_the_first_try(unreachable_hub, capsys):
    """One try, not ~25 s of retries with a warning each."""
    start = time.monotonic()
    with pytest.raises(ModelLoadError) as e:
        load_model("nonexistent-org/nonexistent-model")
    assert time.monotonic() - start < 5
    assert "unreachable" in one_line(e) and "local path" in str(e.value)
    assert "Retry" not in capsys.readouterr().err


def hub_cache(tmp_path, monkeypatch) -> Path:
    """A tiny model as ``tiny-org/tiny-model`` in a Hugging Face cache of its own; its snapshot."""
    from huggingface_hub import constants

    commit = "0" * 40
    repo = tmp_path / "hf" / "models--tiny-org--tiny-model"
    save_base(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    return repo / "snapshots" / commit


def test_corrupt_weights_in_the_hub_cache_are_named(tmp_path, monkeypatch):
    weights = hub_cache(tmp_path, monkeypatch) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(ModelLoadError) as e:
        load_model("tiny-org/tiny-model")
    assert one_line(e).startswith(f"{weights} is not a valid safetensors file (truncated")


def test_hub_model_in_the_cache_loads_while_the_hub_is_unreachable(tmp_path, unreachable_hub, monkeypatch):
    hub_cache(tmp_path, monkeypatch)
    start = time.monotonic()
    net, _ = load_model("tiny-org/tiny-model")
    assert time.monotonic() - start < 5 and net.config.hidden_size == 32


def test_a_copied_folder_of_the_base_is_the_base(tmp_path, embedded):
    """An adapter trained on a model is accepted on a copy of that model's folder (the same
    weights under another name), the embedded model's converted folder too; a copy with one
    tensor changed is another model, refused."""
    import shutil

    from safetensors.torch import load_file, save_file

    base = save_base(tmp_path / "base")
    on_base = save_adapter(tmp_path / "on-base", base, record=str(base))
    on_embedded = save_adapter(tmp_path / "on-embedded", embedded, record=DEFAULT_MODEL)
    copy, embedded_copy = shutil.copytree(base, tmp_path / "copy"), shutil.copytree(embedded, tmp_path / "embedded-copy")
    with warnings.catch_warnings():
        warnings.simplefilter("error", SetLLMWarning)
        load_model(str(copy), str(on_base))
        load_model(str(embedded_copy), str(on_embedded))
    weights = load_file(copy / "model.safetensors")
    name = sorted(weights)[len(weights) // 2]
    weights[name] = weights[name] + 1e-3  # the same size, files and ends: only the content differs
    save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match="was trained on"):
        load_model(str(copy), str(on_base))
