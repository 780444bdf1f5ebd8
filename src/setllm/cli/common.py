"""Shared CLI pieces: subcommands built from config dataclasses, model options, one-line
user errors."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, get_type_hints

from ..errors import InputError, SetLLMError
from ..load_options import LoadOptions, OptionError

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
    try:
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.init and hasattr(args, f.name)})
    except OptionError as e:
        raise e.named(lambda name: "--" + name.replace("_", "-")) from None


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


def validate(args: argparse.Namespace) -> None:
    """Build every config of the command once, so a bad flag fails before any work starts."""
    for cls in getattr(args, "_configs", ()):
        config_from_args(cls, args)


def load_setllm(args: argparse.Namespace, progress: bool = True, kind: str = "choose"):
    """A :class:`setllm.SetLLM` from the model flags (:class:`setllm.LoadOptions`); with no
    ``--adapter`` the embedded model gets the adapter shipped for ``kind`` of task."""
    from ..api import SetLLM

    return SetLLM.load(config_from_args(LoadOptions, args), kind, progress)


def add_file_job_flags(p: argparse.ArgumentParser, input_help: str, output_help: str) -> None:
    """``--input``/``--output`` and what goes with them, the same for every row-to-row command."""
    p.add_argument("--input", metavar="FILE", help=input_help)
    p.add_argument("--output", metavar="FILE", help=output_help + "; a rerun skips the rows already answered")
    p.add_argument("--skip-bad", action="store_true", help="skip malformed --input rows (counted, the first named) instead of stopping")
    p.add_argument("--overwrite", action="store_true", help="start --output over instead of resuming it")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar for --input")


def describe(lm, kind: str = "choose", readout: str | None = None) -> str:
    """Which model, adapter and variant answer (said on stderr by every answering command);
    a judge also says its readout (asked, else the one the adapter was trained for)."""
    said = f"setllm: {lm.origin.model}, adapter {lm.origin.adapter or 'none'}, variant {lm.variant.name}"
    return said + (f", readout {readout or lm.judge_readout}" if kind == "judge" else "")


def run_file_job(args: argparse.Namespace, parse_row, make_answer, single: tuple[str, ...], verb: str, kind: str = "choose",
                 settings: dict | None = None) -> int:
    """``--input rows.jsonl --output out.jsonl`` for a command that maps rows to rows: every
    row checked, the output checked against the input and writable before the model loads
    (and no model loads when nothing is left); then batched, resumable, in input order
    (:mod:`setllm.jsonl_job`; an answer given under other ``settings`` or by another model is not resumed). ``make_answer(lm, rows)`` returns the batch function (and may
    check the rows against the loaded model first)."""
    from .. import jsonl_job

    if not (args.input and args.output) or any(getattr(args, name) for name in single):
        flags = " or ".join(name.upper() if name in ("question", "instruction") else f"--{name}" for name in single)
        raise InputError(f"--input FILE.jsonl and --output FILE.jsonl go together, without {flags}")
    read = jsonl_job.read_rows(args.input, parse_row, args.skip_bad, settings)
    jsonl_job.check_output(args.output, args.input)
    by = config_from_args(LoadOptions, args).identity(kind)  # answers by another model are not resumed
    left = jsonl_job.todo(read.rows, args.output, args.overwrite, by)
    if left:
        lm = load_setllm(args, progress=False, kind=kind)
        print(describe(lm, kind, (settings or {}).get("readout")), file=sys.stderr)
        jsonl_job.run(left, args.output, make_answer(lm, left), lm.batch_size, args.progress, total=len(read.rows), by=by)
    skipped = f", {len(read.skipped)} skipped as bad" if read.skipped else ""
    print(f"{len(left)} {verb}, {len(read.rows) - len(left)} already in {args.output}{skipped}", file=sys.stderr)
    return 0
