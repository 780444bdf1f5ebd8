"""Where every surface puts the model: the GPU when there is one and none is named, the
device named otherwise, and a named GPU that is not there is one line and exit 2 (never a
silent run on the CPU)."""

from __future__ import annotations

import pytest
import torch
from tiny import run_cli

import setllm.loading.model as loading

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


class Loads:
    """Every load's asked ``device``; the model is then loaded where it already is, and the
    GPU reported by ``torch.cuda.is_available`` (``gpu``) is gone from then on: this machine
    may have none to put a model on, nor to pin memory for PEFT's adapter loading."""

    def __init__(self, monkeypatch):
        self.asked, self.gpu, load = [], False, loading._load

        def recording(*args, device=None, **kwargs):
            self.asked.append(device)
            self.gpu = False
            return load(*args, device=None, **kwargs)

        monkeypatch.setattr(loading, "_load", recording)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: self.gpu)


@pytest.mark.parametrize("gpu, named, placed", [(True, None, "cuda"), (False, None, None), (True, "cpu", "cpu")])
def test_a_model_goes_to_the_gpu_unless_another_device_is_named(model_dir, monkeypatch, gpu, named, placed):
    from setllm import SetLLM

    loads = Loads(monkeypatch)
    loads.gpu = gpu
    SetLLM.from_pretrained(model_dir, adapter="none", device=named)
    assert loads.asked == [placed]


def test_the_adapter_bank_of_the_server_goes_to_the_gpu_too(model_dir, monkeypatch, tmp_path):
    from setllm import AdapterBank

    adapter = _adapter(model_dir, tmp_path)
    loads = Loads(monkeypatch)
    loads.gpu = True
    bank = AdapterBank.from_pretrained(model_dir, adapters={"a": adapter})  # what `setllm serve --adapter NAME=PATH` loads
    assert loads.asked == ["cuda"] and bank.names == ["a"]


def _adapter(model_dir: str, tmp_path) -> str:
    """A LoRA adapter for the tiny model, as PEFT writes one."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    peft = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), LoraConfig(r=2, target_modules="all-linear"))
    peft.save_pretrained(tmp_path / "adapter")
    return str(tmp_path / "adapter")


@NO_GPU
@pytest.mark.parametrize("argv", [
    ["generate", "--prompt", "Pick:\n{{a\n||b\n}}Answer:", "--model", "MODEL", "--device", "cuda"],
    ["eval", "--data-file", "DATA", "--model", "MODEL", "--device", "cuda", "--out", "OUT"],
    ["serve", "--model", "MODEL", "--device", "cuda:0", "--port", "0"],
    ["judge", "Name a colour.", "--candidates", "Red.", "A dog.", "--model", "MODEL", "--device", "cuda"],
])
def test_asking_for_a_gpu_that_is_not_there_is_one_line(argv, model_dir, tmp_path, capsys):
    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "Which is a fruit?", "choices": ["apple", "dog"], "label": 0}\n')
    subs = {"MODEL": model_dir, "DATA": str(data), "OUT": str(tmp_path / "out")}
    code, _, err = run_cli(capsys, *[subs.get(a, a) for a in argv])
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: --device cuda") and "no CUDA GPU" in err, err
    assert not (tmp_path / "out").exists()  # nothing written before the refusal
