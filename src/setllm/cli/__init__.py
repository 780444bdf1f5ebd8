"""The ``setllm`` command: one entry point, one subcommand per entry of COMMANDS.

Only the subcommand being run is built in full (and imports what it needs): ``setllm --help``
and ``setllm choose`` never import the trainer.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
import warnings

from ..errors import SetLLMWarning
from .common import LightParser, apply_config_file, catch_interrupts, parser_class, run_guarded, validate

# name -> (module defining ``add_parser(subparsers)``, one-line help). Each parser sets
# ``func(args) -> int``.
COMMANDS = {
    "choose": ("setllm.cli.infer", "answer a multiple-choice question, options as a set"),
    "generate": ("setllm.cli.infer", "generate a response to a set prompt"),
    "answer": ("setllm.cli.answer", "answer a question from documents read as a set"),
    "judge": ("setllm.cli.judge", "judge candidate responses as a set: no order or label bias"),
    "serve": ("setllm.cli.serve", "serve the model over HTTP: choose, score, generate, OpenAI-style completions"),
    "demo": ("setllm.cli.infer", "show the base model's order sensitivity next to Set-LLM's invariance"),
    "train": ("setllm.cli.train", "train a Set-LLM adapter (LoRA) or model on set prompts"),
    "eval": ("setllm.cli.evaluate", "evaluate a model on a multiple-choice benchmark under option orderings"),
    "report": ("setllm.cli.evaluate", "paper-style table and figures from `setllm eval` run directories"),
    "data": ("setllm.cli.data", "generate document-set data: key-value retrieval, benchmark lookups (seeded, no download)"),
    "export": ("setllm.cli.export", "write a benchmark split as training data, or a trained adapter for shipping"),
}


def build_parser(command: str | None = None) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser | None]:
    """The top-level parser, with ``command``'s subparser built in full (the others as
    names and one-line help); returns it and that subparser."""
    from setllm import __version__

    cls = parser_class() if command else LightParser  # `setllm --help` never imports transformers
    parser = cls(prog="setllm", description="Order-invariant prompting for decoder-only LLMs (Set-LLM).")
    parser.add_argument("--version", action="version", version=f"setllm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    full = None
    for name, (module, help_) in COMMANDS.items():
        if name == command:
            full = importlib.import_module(module).add_parser(sub, name)
        else:
            sub.add_parser(name, help=help_, add_help=False)
    return parser, full


def main(argv: list[str] | None = None) -> int:
    catch_interrupts()
    try:
        return _main(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:  # Ctrl-C while a command is still being built (its imports take seconds)
        print("error: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str]) -> int:
    command = next((a for a in argv if not a.startswith("-")), None)
    unknown = [a for a in argv[: argv.index(command) if command else len(argv)] if a not in ("-h", "--help", "--version")]
    if unknown:  # argparse would only say that COMMAND is missing
        print(f"error: unknown option {unknown[0]}; a command comes first: setllm COMMAND [options] (see `setllm --help`)", file=sys.stderr)
        return 2
    parser, sub = build_parser(command if command in COMMANDS else None)

    def run(_):
        if sub is not None and any(a == "--config" or a.startswith("--config=") for a in argv):
            config = parser.parse_known_args(argv)[0].config
            if config:
                apply_config_file(sub, config)
        args = parser.parse_args(argv)
        validate(args)
        with bars_on_a_terminal_only(args):
            return args.func(args)

    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        warnings.simplefilter("once", SetLLMWarning)
        return run_guarded(run, None)


@contextlib.contextmanager
def bars_on_a_terminal_only(args: argparse.Namespace):
    """Progress bars go to a terminal only (:func:`setllm.loading.quiet.on_terminal`): in a
    log every command prints plain lines. ``--no-progress`` turns them off on a terminal too.
    transformers' switch is put back after the command (a command run in-process, by a test)."""
    from transformers.utils import logging as hf_logging

    from ..loading.quiet import on_terminal

    if getattr(args, "disable_tqdm", False) is None:  # train: the Trainer's bar, unless --no-progress
        args.disable_tqdm = not on_terminal()
    bars = hf_logging.is_progress_bar_enabled()
    if not on_terminal():
        if getattr(args, "progress", None) is True:
            args.progress = False
        hf_logging.disable_progress_bar()  # transformers' and the hub's bars (loading, downloading) for the whole command
    try:
        yield
    finally:
        if bars and not hf_logging.is_progress_bar_enabled():
            hf_logging.enable_progress_bar()


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """setllm's own warnings as one line ``warning: ...``; others keep their usual form."""
    if issubclass(category, SetLLMWarning):
        print(f"warning: {message}", file=sys.stderr)
    else:
        _DEFAULT_SHOW(message, category, filename, lineno, file, line)


_DEFAULT_SHOW = warnings.showwarning


if __name__ == "__main__":
    sys.exit(main())
