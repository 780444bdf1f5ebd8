"""``setllm serve``: the model behind HTTP, loaded once (see docs/serving.md).

FastAPI and uvicorn are an extra (``pip install -e '.[serve]'``), imported only when the
command runs. Until ``serve`` is listed in :data:`setllm.cli.COMMANDS`, run it as
``python -m setllm.cli.serve [flags]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import re
import sys
import warnings
from pathlib import Path

from ..errors import InputError, SetLLMWarning
from ..loading.options import LoadOptions
from ..serve.config import ServeConfig
from ..serve.ray.options import RAY_INSTALL, RAY_PIN, RayOptions
from .common import add_command, config_from_args, load_plan, load_setllm, stop_if_dry_run, stop_if_interrupted, warn_if_untrained

HELP = "serve the model over HTTP: choose, score, judge, generate, answer, OpenAI-style completions, chat and responses"


def add_parser(sub, name: str = "serve"):
    p = add_command(sub, name, [ServeConfig, LoadOptions, RayOptions], help=HELP,
                    description="Load the model once and answer JSON requests on http://HOST:PORT (loopback by default): "
                                f"{served_routes()} (a generation streams with \"stream\": true). "
                                "Several adapters share one copy of the base weights: a request names its adapter "
                                "(field 'adapter'; OpenAI routes: 'model'; GET /v1/models lists the names). Concurrent requests "
                                "are batched without changing any score. SIGTERM or Ctrl-C drains and stops.")
    flag = next(a for a in p._actions if "--adapter" in a.option_strings)  # LoadOptions' flag, made repeatable here
    flag.__class__, flag.metavar = AdapterFlag, "A | NAME=PATH"
    flag.help += (". NAME=PATH (repeatable): one more adapter served beside it under NAME, on the same base weights; with "
                  "the embedded model and 'auto', its shipped adapters are served as choose, judge and documents; every server with several adapters "
                  "also serves none (no adapter, read as --adapter none) and base (the base model as it is, read causally: "
                  "--variant causal-pe)")
    p.set_defaults(func=cmd_serve, named_adapters=[])
    return p


def served_routes() -> str:
    """The routes the app serves, read from the routers it includes (setllm's, the OpenAI-compatible
    ones, the playground page), grouped as ``POST a, b; GET c``: a new route is listed by being served."""
    if importlib.util.find_spec("fastapi") is None:
        return "the routes of docs/serving.md (pip install -e '.[serve]')"
    from ..serve import openai, page, routes

    groups = [_by_method([routes.router]), "OpenAI-compatible " + _by_method(openai.ROUTERS)]
    return "; ".join(groups) + "; the playground page at " + ", ".join(r.path for r in page.router.routes)


def _by_method(routers) -> str:
    """The routers' paths as ``POST a, b and GET c`` (POST first)."""
    paths: dict[str, list[str]] = {}
    for route in (r for router in routers for r in router.routes):
        for method in sorted(route.methods - {"HEAD"}, reverse=True):
            paths.setdefault(method, []).append(route.path)
    return " and ".join(f"{m} {', '.join(p)}" for m, p in sorted(paths.items(), reverse=True))


class AdapterFlag(argparse.Action):
    """``--adapter A`` sets the main adapter (a folder, none, auto); ``--adapter NAME=PATH``
    adds a named one (a path's own '=' comes after a '/', so it is never read as a name)."""

    def __call__(self, parser, namespace, value, option_string=None):
        name, sep, path = value.partition("=")
        if sep and NAME.fullmatch(name):
            if not path:
                parser.error(f"--adapter {value}: NAME=PATH needs a path")
            namespace.named_adapters = [*namespace.named_adapters, (name, path)]
        else:
            setattr(namespace, self.dest, value)


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def cmd_serve(args: argparse.Namespace) -> int:
    config = with_env_key(config_from_args(ServeConfig, args))
    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        raise InputError(f"setllm serve needs {' and '.join(missing)}: pip install -e '.[serve]'")
    if args.dry_run:
        served_models(args)  # says the plan and stops: no socket, no Ray, no model
    replicas = config_from_args(RayOptions, args)
    if replicas.replicas is not None:
        return serve_on_ray(args, config, replicas)
    from ..serve.app import create_app
    from ..serve.server import open_socket, serve

    sock = open_socket(config.host, config.port)  # a taken port fails before the model loads
    lm, judge, adapters = served_models(args)
    if not warn_if_no_default(args):
        warn_if_untrained(lm, args)
    warn_if_cache_unused(lm, config)
    app = create_app(lm, config, judge, adapters)
    stop_if_interrupted()  # a Ctrl-C that loading swallowed: never start listening after it
    serve(app, config, sock)
    return 0


def warn_if_no_default(args: argparse.Namespace) -> bool:
    """Several ``--adapter NAME=PATH`` and no main adapter: which one a request naming none
    reads with cannot be guessed; said once at start, with how to choose (True: said)."""
    if args.adapter != "auto" or len(args.named_adapters) < 2 or load_plan(args).adapter:
        return False
    names = ", ".join(n for n, _ in args.named_adapters)
    warnings.warn(f"--adapter NAME=PATH: {names} served, none of them the default: a request naming no adapter reads with 'none' "
                  f"(no adapter, the untrained Set-LLM reading); name one in each request ('model' on the OpenAI routes, 'adapter' "
                  f"on setllm's), or make one the default with --adapter PATH", SetLLMWarning, stacklevel=2)
    return True


def warn_if_cache_unused(lm, config: ServeConfig) -> None:
    """``--cache-mb`` asked for under a reading that cannot reuse documents: said once at
    start, not at the first request (requests that ask for ``variant: sbp`` still use it)."""
    from ..core.doccache import variant_problem

    why = variant_problem(lm.variant)
    if config.cache_mb and why:
        warnings.warn(f"--cache-mb {config.cache_mb:g}: documents are read afresh: {why}; only requests read under 'sbp' use the cache",
                      SetLLMWarning, stacklevel=2)


def with_env_key(config: ServeConfig) -> ServeConfig:
    """``--api-key``, else ``$SETLLM_API_KEY``; a server reachable from the network without
    a key serves anyone who reaches it: said once at start."""
    from ..serve.auth import ENV_VAR

    if config.api_key is None and os.environ.get(ENV_VAR):
        try:
            config = dataclasses.replace(config, api_key=os.environ[ENV_VAR])
        except InputError:
            raise InputError(f"${ENV_VAR} must be non-empty, without leading or trailing spaces") from None
    if config.api_key is None and not config.loopback:
        warnings.warn(f"--host {config.host} makes the server reachable from the network without an API key: anyone who can "
                      f"connect can use the model; set --api-key KEY (or ${ENV_VAR})", SetLLMWarning, stacklevel=2)
    return config


def served_models(args: argparse.Namespace):
    """``(main model, judge model or None, adapters by name)``. One adapter (or none): the
    model as every other command loads it. Several (the embedded model's shipped ones, or any
    named with NAME=PATH): one :class:`setllm.AdapterBank` on one copy of the base weights;
    the main model is the main adapter's view (``--adapter none``: the base model), the
    judge the ``judge`` adapter's. Every adapter is read unmerged either way, as everywhere
    in setllm: a request gets the library's bits."""
    from ..bank import AdapterBank

    banked = served_adapters(args)
    if banked is None:
        return load_setllm(args, progress=False), None, {}
    paths, main_name = banked
    stop_if_dry_run(args, load_plan(args), *(f"served adapter {n}: {p}" for n, p in paths.items()), f"default reading: {main_name}")
    bank = AdapterBank.load(config_from_args(LoadOptions, args), paths)
    views = dict(bank)  # every adapter, then none and base
    return views[main_name], views.get("judge"), views


def served_adapters(args: argparse.Namespace) -> tuple[dict[str, str], str] | None:
    """``(adapters by name, the default reading's name)`` of a server with several adapters,
    decided from the flags' plan before anything loads; None: one model, loaded as every
    other command loads it."""
    from ..bank import BASE, NONE, shipped_adapters

    named = dict(args.named_adapters)
    if len(named) != len(args.named_adapters):
        raise InputError("--adapter NAME=PATH: each NAME once")
    main = load_plan(args).adapter
    shipped = shipped_adapters() if args.adapter == "auto" and main is not None else {}
    if not named and len(shipped) < 2:
        return None
    if shipped:  # the main adapter is one of them (auto: the choose one)
        paths, main_name = dict(shipped), next(n for n, p in shipped.items() if p == main)
    elif main:  # --adapter DIR beside NAME=PATH ones: served under its folder's name
        main_name = Path(main).name
        paths = {main_name: main}
    elif args.adapter == "auto" and len(named) == 1:  # no adapter shipped for this model: the user's one is the default reading
        paths, main_name = {}, next(iter(named))
    else:  # --adapter none (or several of the user's, none picked): every adapter off, read as --adapter none reads everywhere
        paths, main_name = {}, NONE
    clash = set(named) & {*paths, NONE, BASE}
    if clash:
        raise InputError(f"--adapter NAME=PATH: {', '.join(sorted(clash))} is already the name of a served adapter")
    return {**paths, **named}, main_name


# -- --replicas N: the same server as N replicas on Ray Serve (setllm.serve.ray) ----------------

def serve_on_ray(args: argparse.Namespace, config: ServeConfig, options: RayOptions) -> int:
    """``setllm serve --replicas N``: each replica loads the model as this command would
    (:func:`replica_app`), behind one endpoint on ``--host``/``--port``."""
    import functools

    ray = importlib.util.find_spec("ray")  # finding ray.serve would import ray, before --ray-address can set it up
    if ray is None or not any((Path(p) / "serve").is_dir() for p in ray.submodule_search_locations or ()):
        raise InputError(f"--replicas needs Ray Serve ({RAY_PIN}): {RAY_INSTALL}")
    from ..serve.server import open_socket

    sock = open_socket(config.host, config.port)  # a taken port fails before Ray starts; port 0 picks one
    config = dataclasses.replace(config, port=sock.getsockname()[1])
    sock.close()
    plan = load_plan(args)  # planned here, once: the replicas build from this plan (it travels with the flags)
    from ..serve.ray.launch import serve_until_signal

    serve_until_signal(functools.partial(replica_app, _plain(args), config), config, options, plan.options.device)
    return 0


def replica_app(args: argparse.Namespace, config: ServeConfig):
    """One replica's server: the models this command serves, in the app it serves them with."""
    from ..serve.app import create_app

    lm, judge, adapters = served_models(args)
    return create_app(lm, config, judge, adapters)


def _plain(args: argparse.Namespace) -> argparse.Namespace:
    """The flags alone, to send to the replicas."""
    return argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "func"})


def main(argv: list[str] | None = None) -> int:
    """``python -m setllm.cli.serve ARGS`` = ``setllm serve ARGS``."""
    from . import main as setllm_main

    return setllm_main(["serve", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
