"""Shared CLI pieces: subcommands built from config dataclasses, model options, one-line
user errors."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from ..errors import InputError, SetLLMError
from ..variants import ATTENTION_BACKENDS, LONG_PROMPT_TOKENS, VARIANTS, check_attention

EXIT_USER_ERROR = 2


def run_guarded(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a command: a user's mistake (:class:`SetLLMError`) is one line and exit 2; a bug
    keeps its traceback."""
    try:
        return func(args) or 0
    except SetLLMError as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"error: {msg}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


class LightParser(argparse.ArgumentParser):
    """The top-level parser when no command is being built (``setllm --help``): one-line
    errors, and no transformers import (that alone costs about a second)."""

    def error(self, message: str):
        raise InputError(f"{message} (see `{self.prog} --help`)")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``(default: X)`` only where it tells the reader something: not after a help text that
    already says its default, nor for an absent value (None, ""), nor for an on/off flag."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        default, text = action.default, action.help or ""
        if default in (None, "", argparse.SUPPRESS) or isinstance(default, bool) or "default" in text:
            return action.help
        return super()._get_help_string(action)


class RawHelpFormatter(argparse.RawDescriptionHelpFormatter, HelpFormatter):
    """:class:`HelpFormatter` that keeps the description and epilog as written (examples)."""


@functools.cache
def parser_class() -> type:
    """transformers' dataclass parser (imported only when a command is built), with the
    same one-line errors and :class:`HelpFormatter` for every (sub)command."""
    from transformers import HfArgumentParser

    def __init__(self, dataclass_types=None, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)  # HfArgumentParser's own prints "(default: None)"
        HfArgumentParser.__init__(self, dataclass_types, **kwargs)

    return type("Parser", (HfArgumentParser,), {"error": LightParser.error, "__init__": __init__})


def add_command(sub, name: str, configs: Sequence[type], config_file: bool = False, **kwargs) -> argparse.ArgumentParser:
    """A subcommand whose flags are the fields of ``configs`` (dataclasses), built by
    :class:`transformers.HfArgumentParser`: one ``--flag`` per field, help and choices from
    ``field(metadata=...)``, defaults from the dataclass (never typed twice).

    A tri-state ``bool | None`` field (None: decided later, e.g. by the adapter) gets
    ``--flag`` and ``--no-flag``. With ``config_file``, ``--config FILE`` (YAML/JSON, keys =
    field names) fills what the command line does not say.
    """
    p = sub.add_parser(name, dataclass_types=list(configs), **kwargs)
    for cls in configs:
        hints = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.init and hints[f.name] == (bool | None) and f.default is None:
                p.add_argument(f"--no-{f.name.replace('_', '-')}", dest=f.name, action="store_false", help=f"turn off --{f.name.replace('_', '-')}")
    for action in p._actions:  # HfArgumentParser gives a True-by-default flag's --no_X the help of X itself
        if any(o.startswith("--no_") for o in action.option_strings) and isinstance(action.help, str):
            action.help = f"turn off --{action.dest.replace('_', '-')}"
    if config_file:
        p.add_argument("--config", metavar="FILE", help="YAML or JSON file of options (keys: the flag names); flags override it")
    p.set_defaults(_configs=tuple(configs))
    return p


def apply_config_file(parser: argparse.ArgumentParser, path: str) -> None:
    """Make a config file's values the parser's defaults, so flags still override them.

    Values become strings and go through each flag's own type, so a wrong type in the file
    fails like a wrong flag would.
    """
    values = load_config_file(path)
    # A key is a field name or any of its flags (``lr`` for ``--lr``, an alias of learning_rate).
    actions = {}
    for a in parser._actions:
        if a.dest not in ("help", "config", "_configs") and a.option_strings and not a.option_strings[0].startswith("--no"):
            for name in {a.dest, *(o.lstrip("-").replace("-", "_") for o in a.option_strings)}:
                actions[name] = a
    unknown = sorted(set(values) - set(actions))
    if unknown:
        raise InputError(f"{path}: unknown config keys {unknown}; keys are the flag names (see --help)")
    parser.set_defaults(**{actions[k].dest: _as_flag_text(v, actions[k], path) for k, v in values.items()})


def config_from_args(cls: type, args: argparse.Namespace):
    """Build dataclass ``cls`` from the parsed flags (its fields are among them)."""
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.init and hasattr(args, f.name)})


def load_config_file(path: str) -> dict[str, Any]:
    from ..files import read_text

    text = read_text(path, "config file")
    yaml_file = Path(path).suffix in (".yaml", ".yml")
    try:
        data = _parse_yaml(text) if yaml_file else json.loads(text)
    except ValueError as e:
        raise InputError(f"{path}: not valid {'YAML' if yaml_file else 'JSON'} ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: a config file holds one mapping of option -> value")
    return {k.replace("-", "_"): v for k, v in data.items()}


def _parse_yaml(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:  # not a ValueError: re-raise as one, with its first line
        raise ValueError(str(e).replace("\n", " ")) from None


def _as_flag_text(value: Any, action: argparse.Action, path: str) -> Any:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        value = ",".join(map(str, value))
    if isinstance(value, (dict, list)):
        raise InputError(f"{path}: {action.dest} must be a single value, got {type(value).__name__}")
    return str(value).lower() if isinstance(value, bool) else str(value)


DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16"}


def tristate(help_: str) -> dict:
    """Metadata for a ``bool | None`` field: ``--flag`` alone means True, ``--no-flag`` False
    (added by :func:`add_command`), absent None."""
    return {"help": help_, "nargs": "?", "const": True}


@dataclass
class ModelOptions:
    """Which model to run and how to read prompts."""

    model: str | None = field(default=None, metadata={"help": "a local folder, a .gguf file (converted once) or a hub id of a causal LM; default: the embedded SmolLM2-135M-Instruct", "metavar": "M"})
    adapter: str | None = field(default=None, metadata={"help": "local PEFT adapter dir ('none' = no adapter); default: the shipped Set-LLM adapter with the embedded model", "metavar": "A"})
    variant: str | None = field(default=None, metadata={"help": "variant; default: the adapter's, else setmask-setpe", "choices": list(VARIANTS)})
    attn: str = field(default="auto", metadata={"help": f"attention implementation: auto (sdpa; flex_attention for prompts of {LONG_PROMPT_TOKENS}+ tokens), "
                                                        f"{', '.join(ATTENTION_BACKENDS)} (flash_attention_2 takes no set mask)", "metavar": "IMPL"})
    device: str | None = field(default=None, metadata={"help": "torch device, e.g. cpu or cuda", "metavar": "DEV"})
    chat: bool = field(default=False, metadata={"help": "wrap prompts in the model's chat template"})
    exact: bool | None = field(default=None, metadata=tristate("sort set elements first (bit-identical outputs; invariant variants only); default: on for invariant variants"))
    allow_untested: bool = field(default=False, metadata={"help": "try a model type setllm has not verified"})
    allow_pickle: bool = field(default=False, metadata={"help": "allow loading pickled (non-safetensors) weights"})
    allow_base_mismatch: bool = field(default=False, metadata={"help": "apply an adapter trained on another base model (with a warning)"})
    eos: bool | None = field(default=None, metadata=tristate(
        "score options as text + EOS, as the paper does and training teaches (--no-eos: the text alone); default: what the adapter was trained with, else on"))
    batch_size: int = field(default=8, metadata={"help": "prompts per forward pass", "metavar": "N"})
    dtype: str = field(default="float32", metadata={"help": "weight dtype (float32 on CPU: it has no fast bf16)", "choices": list(DTYPES)})

    def __post_init__(self) -> None:
        if self.attn != "auto":
            check_attention(self.attn)
        if self.batch_size < 1:
            raise InputError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.device is not None:
            check_device(self.device)


def check_device(device: str) -> None:
    """A device torch knows and this machine has, or one line saying which is wrong."""
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError:
        raise InputError(f"--device {device!r} is not a torch device (e.g. cpu, cuda, cuda:1, mps)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"--device {device}: this torch build or machine has no CUDA GPU; use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise InputError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"--device {device}: MPS is not available here")


def validate(args: argparse.Namespace) -> None:
    """Build every config of the command once, so a bad flag fails before any work starts."""
    for cls in getattr(args, "_configs", ()):
        config_from_args(cls, args)


def load_setllm(args: argparse.Namespace, progress: bool = True, kind: str = "choose"):
    """A :class:`setllm.SetLLM` from the model flags; with no ``--adapter`` the embedded model
    gets the adapter shipped for ``kind`` of task (:func:`setllm.api.default_adapter`)."""
    import torch

    from ..api import SetLLM, embedded_or

    opts = config_from_args(ModelOptions, args)
    opts.model = embedded_or(opts.model)  # the embedded model's own .gguf by path is the embedded model
    adapter = None if opts.adapter == "none" else (opts.adapter or shipped_adapter(opts, kind))
    return SetLLM.from_pretrained(
        opts.model, adapter, opts.variant, dtype=getattr(torch, DTYPES[opts.dtype]), attn_implementation=opts.attn, device=opts.device,
        allow_pickle=opts.allow_pickle, allow_base_mismatch=opts.allow_base_mismatch,
        exact=opts.exact, batch_size=opts.batch_size, progress=progress, allow_untested=opts.allow_untested,
        **({"chat": True} if opts.chat else {}), **({"eos": opts.eos} if opts.eos is not None else {}),
    )


def shipped_adapter(opts: ModelOptions, kind: str) -> str | None:
    """What no ``--adapter`` means: ``"auto"`` (the choose adapter with the embedded model, none
    for an order-sensitive variant), or the shipped adapter of another kind of task when the
    embedded model is read under an invariant variant."""
    from ..api import default_adapter
    from ..variants import get_variant

    invariant = opts.variant is None or get_variant(opts.variant).invariant
    if kind == "choose" or opts.model is not None or not invariant:
        return "auto"
    return default_adapter(kind) or "auto"


def add_file_job_flags(p: argparse.ArgumentParser, input_help: str, output_help: str) -> None:
    """``--input``/``--output`` and what goes with them, the same for every row-to-row command."""
    p.add_argument("--input", metavar="FILE", help=input_help)
    p.add_argument("--output", metavar="FILE", help=output_help + "; a rerun skips the rows already answered")
    p.add_argument("--skip-bad", action="store_true", help="skip malformed --input rows (counted, the first named) instead of stopping")
    p.add_argument("--overwrite", action="store_true", help="start --output over instead of resuming it")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar for --input")


def describe(lm) -> str:
    """Which model, adapter and variant answer (said on stderr by every answering command)."""
    return f"setllm: {lm.origin.model}, adapter {lm.origin.adapter or 'none'}, variant {lm.variant.name}"


def run_file_job(args: argparse.Namespace, parse_row, make_answer, single: tuple[str, ...], verb: str, kind: str = "choose") -> int:
    """``--input rows.jsonl --output out.jsonl`` for a command that maps rows to rows: every
    row checked, the output checked against the input and writable before the model loads
    (and no model loads when nothing is left); then batched, resumable, in input order
    (:mod:`setllm.jsonl_job`). ``make_answer(lm, rows)`` returns the batch function (and may
    check the rows against the loaded model first)."""
    from .. import jsonl_job

    if not (args.input and args.output) or any(getattr(args, name) for name in single):
        flags = " or ".join(name.upper() if name in ("question", "instruction") else f"--{name}" for name in single)
        raise InputError(f"--input FILE.jsonl and --output FILE.jsonl go together, without {flags}")
    read = jsonl_job.read_rows(args.input, parse_row, args.skip_bad)
    jsonl_job.check_output(args.output, args.input)
    left = jsonl_job.todo(read.rows, args.output, args.overwrite)
    if left:
        lm = load_setllm(args, progress=False, kind=kind)
        print(describe(lm), file=sys.stderr)
        jsonl_job.run(left, args.output, make_answer(lm, left), lm.batch_size, args.progress, total=len(read.rows))
    skipped = f", {len(read.skipped)} skipped as bad" if read.skipped else ""
    print(f"{len(left)} {verb}, {len(read.rows) - len(left)} already in {args.output}{skipped}", file=sys.stderr)
    return 0
