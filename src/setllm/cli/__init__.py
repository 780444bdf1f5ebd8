"""The ``setllm`` command: one entry point, one subcommand per module in COMMANDS."""

from __future__ import annotations

import argparse
import importlib
import sys

from .common import run_guarded

# Each module defines ``add_parser(subparsers)``; its parser sets ``func(args) -> int``.
COMMANDS = ["setllm.cli.infer", "setllm.cli.train", "setllm.cli.evaluate"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="setllm", description="Order-invariant prompting for decoder-only LLMs (Set-LLM).")
    from setllm import __version__

    parser.add_argument("--version", action="version", version=f"setllm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
