"""Shared CLI pieces: dataclass-built flags, model options, one-line user errors."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from ..variants import VARIANTS

EXIT_USER_ERROR = 2


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that are the user's input, not our bug: printed as one line, exit 2."""
    from ..data import DataError
    from ..loading import ModelLoadError
    from ..prompt import PromptError
    from ..runtime import UnsupportedModelError

    return (PromptError, DataError, ModelLoadError, UnsupportedModelError, ValueError, FileNotFoundError, IsADirectoryError, KeyError)


def run_guarded(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return func(args) or 0
    except user_errors() as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"error: {msg.strip(chr(39))}" if isinstance(e, KeyError) else f"error: {msg}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = ()) -> None:
    """One ``--flag`` per dataclass field; help from ``field(metadata={"help": ...})``.

    Defaults are left as None so that a ``--config`` file can fill what the command line
    does not say (see :func:`dataclass_from_args`).
    """
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip or f.metadata.get("cli") is False:
            continue
        flag = "--" + f.name.replace("_", "-")
        help_ = f.metadata.get("help", "")
        default = _default(f)
        kind = hints[f.name]
        if kind is bool or kind == bool | None:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=f"{help_} (default: {default})")
            continue
        choices = f.metadata.get("choices")
        parser.add_argument(flag, dest=f.name, type=_scalar_type(kind), default=None, choices=choices, metavar=f.metadata.get("metavar"),
                            help=f"{help_} (default: {default})")


def dataclass_from_args(cls: type, args: argparse.Namespace, config_file: str | None = None):
    """Build ``cls`` from a JSON/YAML config file, overridden by flags given on the command line."""
    values: dict[str, Any] = load_config_file(config_file) if config_file else {}
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - names
    if unknown:
        raise ValueError(f"{config_file}: unknown config keys {sorted(unknown)}")
    for name in names:
        v = getattr(args, name, None)
        if v is not None:
            values[name] = v
    return cls(**values)


def load_config_file(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"config file {path} not found")
    text = p.read_text()
    if p.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config file holds one mapping of option -> value")
    return {k.replace("-", "_"): v for k, v in data.items()}


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return "required"


def _scalar_type(kind) -> Callable[[str], Any]:
    text = str(kind)
    if kind is int or "int" in text and "float" not in text and "str" not in text:
        return int
    if kind is float or "float" in text and "str" not in text:
        return float
    return str


@dataclass
class ModelOptions:
    """Which model to run and how to read prompts."""

    model: str | None = field(default=None, metadata={"help": "local path or hub id of a causal LM; default: the embedded SmolLM2-135M-Instruct", "metavar": "M"})
    adapter: str | None = field(default=None, metadata={"help": "local PEFT adapter dir ('none' = no adapter); default: the shipped Set-LLM adapter with the embedded model", "metavar": "A"})
    variant: str | None = field(default=None, metadata={"help": "variant; default: the adapter's, else setmask-setpe", "choices": list(VARIANTS)})
    attn: str = field(default="sdpa", metadata={"help": "attention implementation", "choices": ["sdpa", "eager", "flex_attention"]})
    device: str | None = field(default=None, metadata={"help": "torch device, e.g. cpu or cuda", "metavar": "DEV"})
    chat: bool = field(default=False, metadata={"help": "wrap prompts in the model's chat template"})
    exact: bool | None = field(default=None, metadata={"help": "sort set elements first (bit-identical outputs; invariant variants only)"})
    allow_untested: bool = field(default=False, metadata={"help": "try a model type setllm has not verified"})
    allow_pickle: bool = field(default=False, metadata={"help": "allow loading pickled (non-safetensors) weights"})
    eos: bool | None = field(default=None, metadata={"help": "score options as text + EOS, as the paper does and training teaches (--no-eos: the text alone); default: what the adapter was trained with, else on"})
    batch_size: int = field(default=8, metadata={"help": "prompts per forward pass"})


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataclass_arguments(parser.add_argument_group("model"), ModelOptions)


def load_setllm(args: argparse.Namespace, progress: bool = True):
    """A :class:`setllm.SetLLM` from the model flags."""
    from ..api import SetLLM

    opts = dataclass_from_args(ModelOptions, args)
    adapter = None if opts.adapter == "none" else (opts.adapter or "auto")
    return SetLLM.from_pretrained(
        opts.model, adapter, opts.variant, attn_implementation=opts.attn, device=opts.device, allow_pickle=opts.allow_pickle,
        exact=opts.exact, batch_size=opts.batch_size, progress=progress, allow_untested=opts.allow_untested,
        **({"chat": True} if opts.chat else {}), **({"eos": opts.eos} if opts.eos is not None else {}),
    )
