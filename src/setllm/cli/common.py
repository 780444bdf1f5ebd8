"""Shared CLI pieces: subcommands built from config dataclasses, model options, one-line
user errors."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import json
import re
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, get_type_hints

from ..errors import InputError, OptionError, SetLLMError, SetLLMWarning

EXIT_USER_ERROR = 2


_interrupted = threading.Event()


def catch_interrupts() -> None:
    """Ctrl-C raises ``KeyboardInterrupt`` wherever Python is running, and where that is a
    finalizer or a callback (imports and model loading run many), Python prints it and goes
    on. So the interrupt is also remembered, and a long command stops at its next step
    (:func:`stop_if_interrupted`; ``serve``: before it listens) instead of running on."""
    def interrupt(signum, frame):
        _interrupted.set()
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, interrupt)


def stop_if_interrupted() -> None:
    if _interrupted.is_set():
        raise KeyboardInterrupt


class PlanShown(Exception):
    """``--dry-run``: what a command would load (its plan's lines), said instead of loading it."""


def run_guarded(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a command: a user's mistake (:class:`SetLLMError`) is one line and exit 2; a bug
    keeps its traceback."""
    try:
        return func(args) or 0
    except PlanShown as shown:  # --dry-run: the plan printed, nothing loaded
        print(shown)
        return 0
    except SetLLMError as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"error: {msg}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt as e:
        print("error: interrupted" + (f": {e}" if str(e) else ""), file=sys.stderr)
        return 130


class LightParser(argparse.ArgumentParser):
    """The top-level parser when no command is being built (``setllm --help``): one-line
    errors, and no transformers import (that alone costs about a second)."""

    def error(self, message: str):
        raise InputError(f"{message} (see `{self.prog} --help`)")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``(default: X)`` only where it tells the reader something: not after a help text that
    already says its default, nor for an absent value (None, ""), nor for an on/off flag.
    Every flag is shown dashed, as the CLI's own are written: the underscore spelling
    HfArgumentParser also makes from a field name (``--batch_size``) still parses, unshown."""

    def add_usage(self, usage, actions, groups, prefix=None):
        super().add_usage(usage, [_dashed(a) for a in actions], groups, prefix)

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(_dashed(action))

    def _get_help_string(self, action: argparse.Action) -> str | None:
        default, text = action.default, action.help or ""
        if default in (None, "", argparse.SUPPRESS) or isinstance(default, bool) or "default" in text:
            return action.help
        return super()._get_help_string(action)


def _dashed(action: argparse.Action) -> argparse.Action:
    """``action`` as help shows it: without an underscore flag that has a dashed twin."""
    shown = [o for o in action.option_strings if not (o.startswith("--") and "_" in o and "--" + o[2:].replace("_", "-") in action.option_strings)]
    if shown == action.option_strings:
        return action  # the same object: argparse finds mutually exclusive groups by identity
    view = copy.copy(action)
    view.option_strings = shown
    return view


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
    if any(cls.__name__ == "LoadOptions" for cls in configs):  # a command that loads a model
        p.add_argument("--dry-run", action="store_true", help="print what would be loaded (model, adapter, its setllm.json, the variant and "
                                                              "where it came from, the documents reading) and exit before loading it")
    p.set_defaults(_configs=tuple(configs))
    return p


def plain_help(text: str) -> str:
    """A docstring as help text: reST's roles (``:mod:`x```) and literals (````x````) as plain
    `x`, its ``::`` as ``:``, lines joined."""
    text = re.sub(r":\w+:`([^`]+)`", r"`\1`", text)
    return " ".join(text.replace("``", "`").replace("::", ":").split())


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
    from ..io.files import read_text

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


def load_plan(args: argparse.Namespace, kind: str = "choose"):
    """What the model flags (:class:`setllm.LoadOptions`) load for ``kind`` of task
    (:func:`setllm.loading.plan.plan_load`), planned once per command: the checks before the
    load, ``--dry-run`` and the load read the same plan."""
    from ..loading.options import LoadOptions
    from ..loading.plan import plan_load

    plans = vars(args).setdefault("_plans", {})
    if kind not in plans:
        plans[kind] = plan_load(config_from_args(LoadOptions, args), kind)
    return plans[kind]


def stop_if_dry_run(args: argparse.Namespace, plan, *more: str) -> None:
    """``--dry-run``: say the plan (and ``more`` lines) and stop before anything loads."""
    if getattr(args, "dry_run", False):
        raise PlanShown("\n".join([plan.describe(), *more]))


def load_setllm(args: argparse.Namespace, progress: bool = True, kind: str = "choose"):
    """A :class:`setllm.SetLLM` from the model flags' plan (:func:`load_plan`); with no
    ``--adapter`` the embedded model gets the adapter shipped for ``kind`` of task."""
    plan = load_plan(args, kind)
    stop_if_dry_run(args, plan)
    from ..api import SetLLM  # late, as every model import here: `setllm --help` loads no torch

    return SetLLM.build(plan, progress)


def add_file_job_flags(p: argparse.ArgumentParser, input_help: str, output_help: str) -> None:
    """``--input``/``--output`` and what goes with them, the same for every row-to-row command."""
    p.add_argument("--input", metavar="FILE", help=input_help)
    p.add_argument("--output", metavar="FILE", help=output_help + "; a rerun skips the rows already answered")
    p.add_argument("--skip-bad", action="store_true", help="skip malformed --input rows (counted, the first named) instead of stopping")
    p.add_argument("--overwrite", action="store_true", help="start --output over instead of resuming it")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar for --input")


def announce(lm, args: argparse.Namespace, kind: str = "choose", readout: str | None = None) -> None:
    """Say on stderr which model, adapter and variant answer (:func:`describe`), and warn
    when a model of the user's, left without an adapter (``--adapter auto``), is read as
    untrained Set-LLM: setllm ships adapters for the embedded model only."""
    print(describe(lm, kind, readout), file=sys.stderr)
    warn_if_untrained(lm, args)


def warn_if_untrained(lm, args: argparse.Namespace) -> None:
    """One warning where a model of the user's, left without an adapter (``--adapter
    auto``), is read as untrained Set-LLM."""
    if (getattr(args, "adapter", None) == "auto" and lm.origin.adapter is None and lm.variant.invariant and not lm.variant.training_free
            and lm.origin.trained_as.variant is None):
        warnings.warn(f"--model {lm.origin.model} has no shipped adapter: this is the untrained Set-LLM reading ({lm.variant.name}), "
                      "not a model trained on sets; pass --adapter DIR (`setllm train` makes one), --variant causal-pe for the "
                      "base model as it is, or --adapter none to read it so without this warning", SetLLMWarning, stacklevel=2)


def describe(lm, kind: str = "choose", readout: str | None = None) -> str:
    """Which model, adapter and variant answer (said on stderr by every answering command);
    a judge also says its readout (asked, else the one the adapter was trained for)."""
    said = f"setllm: {lm.origin.model}, adapter {lm.origin.adapter or 'none'}, variant {lm.variant.name}"
    return said + (f", readout {readout or lm.judge_readout}" if kind == "judge" else "")


def run_file_job(args: argparse.Namespace, parse_row, make_answer, single: tuple[str, ...], verb: str, kind: str = "choose",
                 settings: dict | None = None, fit=None, positional: tuple[str, ...] = ("question", "instruction")) -> int:
    """``--input rows.jsonl --output out.jsonl`` for a command that maps rows to rows: every
    row checked, the output checked against the input and writable before the model loads
    (and no model loads when nothing is left); then every row left checked against the
    loaded model (``fit(lm, row)`` raises :class:`setllm.io.records.DataError` naming a row that
    does not fit: an error, or skipped with ``--skip-bad``) before anything is written; then
    batched, resumable, in input order (:mod:`setllm.io.jsonl_job`). ``settings``: what else an
    answer depends on, as this run resolved it (an answer under other settings, or by another
    model, is refused, never resumed). ``make_answer(lm, rows)`` returns the batch function.
    ``single``: the arguments of one question (an error with ``--input``), ``positional`` among them."""
    from ..io import jsonl_job

    if not (args.input and args.output) or any(getattr(args, name) for name in single):
        flags = " or ".join(name.upper() if name in positional else f"--{name}" for name in single)
        raise InputError(f"--input FILE.jsonl and --output FILE.jsonl go together, without {flags}")
    read = jsonl_job.read_rows(args.input, parse_row, args.skip_bad, warn=False)
    jsonl_job.check_output(args.output, args.input)
    by = load_plan(args, kind).answer_fingerprint()  # answers by another model are not resumed
    left = jsonl_job.todo(read.rows, args.output, args.overwrite, by, settings, verb)
    if left:
        lm = load_setllm(args, progress=False, kind=kind)
        announce(lm, args, kind, (settings or {}).get("readout"))
        if fit is not None:
            left = _fitting(lm, left, fit, read, args.skip_bad)
        read.warn(args.input)
        if left:
            try:
                jsonl_job.run(left, args.output, make_answer(lm, left), lm.batch_size, args.progress, total=len(read.rows), by=by, settings=settings)
            except KeyboardInterrupt:
                saved = len(read.rows) - len(jsonl_job.todo(read.rows, args.output, False, by, settings, verb))
                raise KeyboardInterrupt(f"{saved} of {len(read.rows)} rows are saved in {args.output}; "
                                        "run the same command again to resume") from None
    else:
        read.warn(args.input)
    skipped = f", {len(read.skipped)} skipped as bad" if read.skipped else ""
    print(f"{len(left)} {verb}, {len(read.rows) - len(left)} already in {args.output}{skipped}", file=sys.stderr)
    return 0


def _fitting(lm, rows: list[dict], fit, read, skip_bad: bool) -> list[dict]:
    """``rows`` less those ``fit`` refuses (an error, unless ``skip_bad``: then counted in ``read``)."""
    from ..io.records import DataError

    kept, bad, errors = [], [], []
    for row in rows:
        try:
            fit(lm, row)
            kept.append(row)
        except DataError as e:
            if not skip_bad:
                raise
            bad.append(row)
            errors.append(str(e))
    read.skip(bad, errors)
    return kept


def check_fit(lm, row: dict, asks, parts: dict) -> None:
    """Refuse a row whose prompts (``asks``: ``(prompt, responses)`` pairs, each prompt with
    its longest response) do not fit the model's context, with a
    :class:`setllm.io.records.DataError` naming the row (``file:line`` and id) and, where it is too
    long, the longest of its ``parts`` (name -> text, or list of texts): the one to shorten."""
    from ..core.text.prompt import PromptError, PromptTooLong
    from ..io.records import DataError

    for prompt, responses in asks:
        try:  # the fit rule the scoring driver applies (setllm.core.model.fit.check_fits)
            lm.score_request(prompt, responses)
        except PromptError as e:
            hint = f"; {longest_part(lm, parts)}" if isinstance(e, PromptTooLong) else ""
            raise DataError(f"{row['where']} (id {row['id']!r}): {e}{hint}") from None


def longest_part(lm, parts: dict) -> str:
    """Which part of a row to shorten: the one of most tokens (a list counts all its texts)."""
    def tokens(value) -> int:
        texts = [value] if isinstance(value, str) else list(value or ())
        return sum(len(lm.codec.tokenize(t)) for t in texts if t)

    counts = {name: tokens(value) for name, value in parts.items()}
    name = max(counts, key=counts.get)
    if isinstance(parts[name], str):
        return f"its {name} is the longest part ({counts[name]:,} tokens): shorten it"
    return f"its {name} are the longest part ({counts[name]:,} tokens in all): shorten them"
