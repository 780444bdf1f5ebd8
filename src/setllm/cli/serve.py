"""``setllm serve``: the model behind HTTP, loaded once (see docs/serving.md).

FastAPI and uvicorn are an extra (``pip install 'setllm[serve]'``), imported only when the
command runs. Until ``serve`` is listed in :data:`setllm.cli.COMMANDS`, run it as
``python -m setllm.cli.serve [flags]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

from ..errors import InputError
from ..loading.options import LoadOptions
from ..serve.config import ServeConfig
from .common import add_command, config_from_args, load_setllm, warn_if_untrained

HELP = "serve the model over HTTP: choose, score, generate, OpenAI-style completions"


def add_parser(sub, name: str = "serve"):
    p = add_command(sub, name, [ServeConfig, LoadOptions], help=HELP,
                    description="Load the model once and answer JSON requests on http://HOST:PORT (loopback by default): "
                                "/v1/choose, /v1/score, /v1/generate, /v1/completions (OpenAI-compatible), /health, /metrics. "
                                "Concurrent requests are batched without changing any score. SIGTERM or Ctrl-C drains and stops.")
    p.set_defaults(func=cmd_serve)
    return p


def cmd_serve(args: argparse.Namespace) -> int:
    config = config_from_args(ServeConfig, args)
    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise InputError(f"setllm serve needs {' and '.join(missing)}: pip install 'setllm[serve]'")
    from ..serve.app import create_app
    from ..serve.server import open_socket, serve

    sock = open_socket(config.host, config.port)  # a taken port fails before the model loads
    lm = load_setllm(args, progress=False)
    warn_if_untrained(lm, args)
    serve(create_app(lm, config, judge_model(args)), config, sock)
    return 0


def judge_model(args: argparse.Namespace):
    """What ``/v1/judge`` reads with when it is not the main model: with ``--adapter auto``
    the embedded model's shipped judge adapter, as ``setllm judge`` (one adapter for every
    task was measured to cost more than the set: docs/results.md). A second copy of the
    model, loaded by the first judge request (a server that is never asked to judge never
    holds it); None when both kinds resolve to the same adapter."""
    from ..api import SetLLM
    from ..loading import Origin
    from ..serve.service import DeferredModel

    options = config_from_args(LoadOptions, args)
    if options.adapter_path("judge") == options.adapter_path("choose"):
        return None
    return DeferredModel(Origin.loaded(*options.sources("judge")), lambda: SetLLM.load(options, "judge"))


def main(argv: list[str] | None = None) -> int:
    """``python -m setllm.cli.serve ARGS`` = ``setllm serve ARGS``."""
    from . import main as setllm_main

    return setllm_main(["serve", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
