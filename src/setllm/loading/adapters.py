"""Adapters: which base model one belongs to (what it records: :mod:`.record`), checks before
its weights load, PEFT's loading made one line, and portable copies."""

from __future__ import annotations

import json
import re
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelLoadError, SetLLMWarning
from .checks import check_safetensors, first_problem
from .hub import looks_local
from .quiet import quiet_loading
from .record import METADATA_FILE, READOUT_NAMES, AdapterInfo  # noqa: F401  (their home; exported here as before)
from .sources import DEFAULT_MODEL, PUBLIC_IDS, file_hash, packaged_targets


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


def recorded_base(adapter_dir: str | Path, info: AdapterInfo | None = None) -> str | None:
    """The base model an adapter was trained on: ``setllm.json``'s record (``info``: as a
    plan read it), else PEFT's ``base_model_name_or_path`` (adapters trained outside
    setllm), else None (unknown)."""
    info = AdapterInfo.read(adapter_dir) if info is None else info
    if info.base_model:
        return info.base_model
    config = read_json(Path(adapter_dir) / "adapter_config.json")
    return config.get("base_model_name_or_path") or None


def same_base(recorded: str, loaded: str) -> bool:
    """Whether two names denote the same base model: the embedded model under any of its
    names (``embedded:``, its hub id, its cache directory), local paths resolved. A path
    that is not on this machine (an adapter trained elsewhere), or a hub id against a local
    copy, can only be compared by the model's directory name."""
    a, b = base_key(recorded), base_key(loaded)
    if a == b:
        return True
    if not (looks_local(recorded) or looks_local(loaded) or Path(a).exists() or Path(b).exists()):
        return False  # two different hub ids
    if Path(a).exists() and Path(b).exists():
        return False  # two different local models
    return _short_name(a) == _short_name(b)


def base_key(name: str) -> str:
    """One spelling per model: setllm's name for a packaged one (under its name, its public
    hub id or its cache folder), a resolved path for a local one, a hub id (or a path not on
    this machine) as given."""
    for key, hub_id in PUBLIC_IDS.items():
        if name in (key, hub_id):
            return key
    path = Path(name).expanduser()
    if not path.exists():
        return name.rstrip("/\\") or name
    path = path.resolve()
    packaged = {target.expanduser().resolve(): key for key, target in packaged_targets().items()}
    return packaged.get(path, str(path))


def _short_name(key: str) -> str:
    return re.split(r"[/\\:]", key.rstrip("/\\"))[-1]


def check_adapter_base(adapter: str | Path, base_model: str | None, allow_mismatch: bool = False, info: AdapterInfo | None = None) -> None:
    """Refuse an adapter recorded as trained on another base model (by name, unless the two
    are folders here with the same weights, :func:`same_weights`): with matching shapes it
    would apply silently and give a meaningless model. ``allow_mismatch`` applies it anyway,
    with a :class:`SetLLMWarning`. Nothing to check when either side is unknown. ``info``:
    its ``setllm.json`` as a plan read it (None: read here)."""
    recorded = recorded_base(adapter, info)
    if recorded is None or not base_model or same_base(recorded, base_model) or same_weights(recorded, base_model):
        return
    message = f"adapter {str(adapter)!r} was trained on {recorded!r}, not on {base_model!r}"
    if not allow_mismatch:
        raise ModelLoadError(f"{message}: load it with its base model, or pass --allow-base-mismatch (Python: allow_base_mismatch=True) to apply it anyway")
    warnings.warn(f"{message}; applying it anyway as asked (allow_base_mismatch=True)", SetLLMWarning, stacklevel=4)


def same_weights(recorded: str, loaded: str) -> bool:
    """Whether two models named differently are on this machine with the same weights: a
    copied or moved folder of the base an adapter was trained on (the embedded model's
    converted folder included) is that base. Every ``*.safetensors`` file of both folders,
    compared by name, size and then content (SHA-256; read in full: a model differing in
    one tensor is another model)."""
    a, b = _local_folder(recorded), _local_folder(loaded)
    if a is None or b is None:
        return False
    files = [_weights_files(a), _weights_files(b)]
    if not files[0] or [(f.name, f.stat().st_size) for f in files[0]] != [(f.name, f.stat().st_size) for f in files[1]]:
        return False
    return all(file_hash(x) == file_hash(y) for x, y in zip(*files))


def _local_folder(name: str) -> Path | None:
    """The folder on this machine a model name loads from: a packaged model's converted folder, a local directory."""
    key = base_key(name)
    folder = packaged_targets().get(key, Path(key))
    return folder if folder.is_dir() else None


def _weights_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def check_adapter(adapter: str | Path, base_model: str | None, allow_pickle: bool = False,
                  allow_base_mismatch: bool = False, info: AdapterInfo | None = None) -> Path:
    """Everything about an adapter directory that can be refused before loading any weights:
    its files, its safetensors header, its base model (``info``: its ``setllm.json`` as a
    plan read it). Returns the directory."""
    adir = Path(adapter)
    if not (adir / "adapter_config.json").exists():
        raise ModelLoadError(f"adapter {str(adapter)!r}: no adapter_config.json there (expected a PEFT adapter directory)")
    _check_adapter_config(adir, adapter)
    weights = adir / "adapter_model.safetensors"
    if weights.exists():
        check_safetensors(weights)
    elif not allow_pickle:
        raise ModelLoadError(f"adapter {str(adapter)!r} has no adapter_model.safetensors; pickled weights load only with --allow-pickle")
    check_adapter_base(adir, base_model, allow_base_mismatch, info)
    return adir


def _check_adapter_config(adir: Path, adapter: str | Path) -> None:
    """``adapter_config.json`` is one JSON object: else one line naming the file (PEFT's own
    error would read as an adapter for another base model)."""
    try:
        config = json.loads((adir / "adapter_config.json").read_text(encoding="utf-8"))
    except OSError as e:
        raise ModelLoadError(f"adapter {str(adapter)!r}: adapter_config.json cannot be read ({e.strerror})") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"adapter {str(adapter)!r}: adapter_config.json is not valid JSON ({str(e).splitlines()[0]})") from None
    if not isinstance(config, dict):
        raise ModelLoadError(f"adapter {str(adapter)!r}: adapter_config.json is not a JSON object")


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"{path}: not a readable JSON file ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path}: not a JSON object")
    return data


def portable_base(base_model: str | None) -> str:
    """The name anyone can load the base by: a packaged model's public hub id (``embedded:``,
    ``gemma3-270m`` and a cache path mean nothing outside this machine's setllm), any other
    model as given."""
    key = base_key(base_model or DEFAULT_MODEL)
    return PUBLIC_IDS.get(key, base_model or key)


def make_adapter_portable(adapter_dir: str | Path, base_model: str | None) -> str:
    """Make a trained adapter loadable by plain PEFT elsewhere
    (``AutoPeftModelForCausalLM.from_pretrained(adapter_dir)``): ``adapter_config.json`` names
    a loadable base, and the model card PEFT writes (README.md) no longer records this
    machine's cache path. ``setllm.json`` keeps setllm's own name for the base (setllm's loader
    takes either). Returns the base name written."""
    adir = Path(adapter_dir)
    name = portable_base(base_model)
    config_path = adir / "adapter_config.json"
    config = read_json(config_path)
    config["base_model_name_or_path"] = name
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    readme = adir / "README.md"
    if readme.is_file():
        readme.write_text(_portable_card(readme.read_text(encoding="utf-8"), name), encoding="utf-8")
    return name


def _portable_card(text: str, name: str) -> str:
    """The model card with its base model named ``name``, and no path to a packaged model's
    cache (PEFT records the path the base was loaded from)."""
    roots = {str(p) for t in packaged_targets().values() for p in (t.expanduser(), t.expanduser().resolve())}
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


def load_adapter(model, adapter: str, allow_pickle: bool = False, merge: bool = False, *,
                 base_model: str | None = None, allow_base_mismatch: bool = False):
    """Put a local PEFT adapter on ``model`` (safetensors only unless ``allow_pickle``).

    By default the adapter stays unmerged (PEFT's wrapper), as every setllm surface reads it:
    the function it was trained as. ``merge=True`` folds the LoRA weights into the base
    weights (a plain transformers model; the same function up to float rounding, ~1e-5 in
    summed log-likelihoods, other bits; ``benchmarks/bench_merge.py`` measures both).

    ``base_model`` names the model for the base-model check (default: the path or id it was
    loaded from, if it says); an adapter recorded for another base is refused unless
    ``allow_base_mismatch``.
    """
    name = base_model or getattr(getattr(model, "config", None), "_name_or_path", None) or None
    adir = check_adapter(adapter, name, allow_pickle, allow_base_mismatch)
    return apply_adapter(model, adir, name, merge)


def apply_adapter(model, adir: Path, base_name: str | None, merge: bool = False, name: str = "default", trainable: bool = False):
    """PEFT's loading, its errors for an adapter that does not fit this model made one line
    (its own is a ``size mismatch`` line per tensor): the one adapter loader of reading and
    of training (``trainable``: training continues it). On a model PEFT already wraps, the
    adapter is added beside the others under ``name`` (unmerged: they share the base weights)."""
    try:
        from peft import PeftModel
    except ImportError:
        raise ModelLoadError("loading an adapter needs peft, a core dependency of setllm: reinstall setllm") from None
    try:
        with quiet_loading(progress=False):
            if isinstance(model, PeftModel):
                model.load_adapter(str(adir), adapter_name=name, is_trainable=trainable)
                return model
            peft_model = PeftModel.from_pretrained(model, str(adir), adapter_name=name, is_trainable=trainable)
    except (RuntimeError, ValueError) as e:
        if isinstance(e, RuntimeError) and "size mismatch" not in str(e):
            raise
        model_name = f"model {base_name!r}" if base_name else "this model"
        problem = first_problem(e)
        raise ModelLoadError(f"adapter {str(adir)!r} does not fit {model_name} (trained on another base model?): {problem}") from None
    if not merge:
        return peft_model
    with one_thread():
        return peft_model.merge_and_unload()


@contextmanager
def one_thread():
    """Merging is ~200 tiny matrix products (rank 8): on a busy CPU, thread hand-offs cost
    far more than the arithmetic (measured with SmolLM2 beside another job: 6.5 s on two
    threads, 0.6 s on one)."""
    import torch  # here: an adapter's record and checks are read without torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
