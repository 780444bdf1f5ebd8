"""Start, serve and stop ``setllm serve --replicas N``: join or start Ray, deploy the
application (:mod:`.deployments`) on ``--host``/``--port``, wait for a signal, drain, stop."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...errors import InputError
from ..config import ServeConfig
from .options import RayOptions

APP_NAME = "setllm"


def connect(options: RayOptions, cpus: int | None = None) -> str:
    """Join ``options.ray_address``, or start a local Ray instance with room for every
    replica (``cpus``: its CPUs; default: this machine's, at least one per replica). Says
    which, in words."""
    if options.ray_address:
        return _join(options.ray_address)
    return _start_local(cpus or max(os.cpu_count() or 1, options.bounds[1]))


def _join(address: str) -> str:
    _reachable(address)
    _token_auth_if_token()  # before Ray reads its configuration, on import
    import ray

    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise InputError(f"--ray-address {address}: cannot join the Ray cluster ({str(e).splitlines()[0]})") from None
    return f"the Ray cluster at {address}"


def _start_local(cpus: int) -> str:
    import ray

    _absolute_pythonpath()  # replicas inherit this process's environment (threads, offline hub, where setllm is)
    with _out_of_this_group(), _only_what_serve_needs():
        # "local": a new instance, even where `ray start` left one running here (joining it is --ray-address auto)
        ray.init(address="local", num_cpus=cpus, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    return "a local Ray instance"


@contextlib.contextmanager
def _out_of_this_group() -> Iterator[None]:
    """Ray's own processes (GCS, raylet, their agents) start out of this process's group (as
    ``setsid`` starts a program): a SIGTERM (or SIGINT) to the whole group, as a terminal, a shell's
    ``kill -- -PGID`` or a supervisor sends it, reaches this process alone, which drains and
    then stops Ray; otherwise Ray died at once under the requests in flight. Where the kernel
    ties a child's life to its parent's (Linux: Ray's fate sharing), they still end with this
    process however it ends; elsewhere Ray's reaper needs them in its group, so they stay."""
    from ray._private import services, utils

    if not sys.platform.startswith("linux") or not utils.detect_fate_sharing_support():
        yield
        return
    popen = services.ConsolePopen

    class OwnGroup(popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "start_new_session": True})

    services.ConsolePopen = OwnGroup
    try:
        yield
    finally:
        services.ConsolePopen = popen


@contextlib.contextmanager
def _only_what_serve_needs() -> Iterator[None]:
    """A local instance without the three processes Ray starts for a cluster and Serve does
    not use: the dashboard's API server (``ray.init`` waits for it to come up: 1.8 s of a
    3.8 s start here, even with ``include_dashboard=False``), the autoscaler's monitor (it
    adds nodes to a cluster; Serve scales replicas itself) and the log monitor (it forwards
    workers' logs to this process, which ``log_to_driver=False`` declines). Ray 2.60's
    ``ray.init`` has no switch for them, so its node is told here; a Ray without these hooks
    starts whole."""
    from ray._private import node

    start, init = getattr(node.Node, "start_api_server", None), node.Node.__init__
    if start is None:
        yield
        return

    def lean_init(self, ray_params, *args, **kwargs):
        ray_params.no_monitor, ray_params.include_log_monitor = True, False
        init(self, ray_params, *args, **kwargs)

    def no_api_server(self, **_) -> None:
        self._webui_url = None  # as where the dashboard fails to start: the raylet and Serve go on without one

    node.Node.__init__, node.Node.start_api_server = lean_init, no_api_server
    try:
        yield
    finally:
        node.Node.__init__, node.Node.start_api_server = init, start


def _reachable(address: str) -> None:
    """A ``HOST:PORT`` nobody listens on is one line now (Ray would retry for minutes)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # auto, or a form Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as e:
        raise InputError(f"--ray-address {address}: cannot join the Ray cluster ({e.strerror or e})") from None


def _token_auth_if_token() -> None:
    """A cluster started by ``ray start`` authenticates with the token it saved in
    ``~/.ray/auth_token``; Ray 2.60 sends it for ``--ray-address auto`` but not for an explicit
    address unless ``RAY_AUTH_MODE=token`` says so."""
    if "RAY_AUTH_MODE" not in os.environ and (os.environ.get("RAY_AUTH_TOKEN") or (Path.home() / ".ray" / "auth_token").exists()):
        os.environ["RAY_AUTH_MODE"] = "token"


def _absolute_pythonpath() -> None:
    """Replicas start in other folders: a relative ``$PYTHONPATH`` entry would point nowhere."""
    if os.environ.get("PYTHONPATH"):
        os.environ["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in os.environ["PYTHONPATH"].split(os.pathsep) if p)


def deploy(make_app: Callable[[], Any], config: ServeConfig, options: RayOptions, gpus: float = 0.0,
           took: dict[str, float] | None = None) -> str:
    """Deploy on ``config.host``/``config.port`` and wait until every replica has loaded;
    the endpoint's URL. ``took`` gets the seconds of Serve's start (its controller and
    proxy) and of the replicas' (each loads the model, side by side)."""
    from ray import serve

    from .deployments import application

    logging.getLogger("ray.serve").setLevel(logging.WARNING)  # its INFO lines: the announcement says it
    # one endpoint, on the head node (Ray's default puts a proxy on every node with a replica, each on
    # --port: another entry point per node, and two nodes on one machine would both take the port)
    took = {} if took is None else took
    begin = time.monotonic()
    serve.start(proxy_location="HeadOnly", http_options={"host": config.host, "port": config.port}, logging_config={"log_level": "WARNING"})
    took["serve"], begin = time.monotonic() - begin, time.monotonic()
    try:
        serve.run(application(make_app, config, options, gpus), name=APP_NAME, route_prefix="/", logging_config={"log_level": "WARNING"})
    except RuntimeError:
        why = _replica_error(serve.status())
        if why is None:
            raise
        raise InputError(why) from None
    took["replicas"] = time.monotonic() - begin
    host = f"[{config.host}]" if ":" in config.host else config.host
    return f"http://{host}:{config.port}"


def _replica_error(status) -> str | None:
    """The message of the setllm error a replica failed to start with (a model that is not
    there, say), as the single server would print it; None if it was something else."""
    app = status.applications.get(APP_NAME)
    for deployment in app.deployments.values() if app else ():
        last = deployment.message.strip().splitlines()[-1:] if deployment.message else []
        found = re.match(r"setllm\.errors\.\w+: (.*)", last[0]) if last else None
        if found:
            return found.group(1)
    return None


def shutdown(joined: bool) -> None:
    """Stop the application: on a cluster that was ``joined``, delete it (replicas finish what
    they accepted; Serve and the cluster stay); the local instance stops whole."""
    import ray
    from ray import serve

    if joined:
        serve.delete(APP_NAME)
    ray.shutdown()


def serve_until_signal(make_app: Callable[[], Any], config: ServeConfig, options: RayOptions, device: str | None = None) -> None:
    """The whole life of ``setllm serve --replicas N`` in this process. A signal drains as the
    single server does: new requests get 503, accepted ones finish (up to ``--drain-s``, by
    default ``--timeout-s``); a second signal, or the limit, answers the rest with a JSON 503
    (:meth:`.ingress.Ingress.stop`); then every replica stops, and a local Ray whole.
    ``device``: the replicas' (``--device``; None: a GPU wherever the cluster has them)."""
    started = time.monotonic()
    where = connect(options)
    took = {"ray": time.monotonic() - started}
    from ray import serve  # after connect(): Ray reads its configuration (the token) when imported
    gpus = replica_gpus(device)
    signals, serving = threading.Semaphore(0), threading.Event()

    def on_signal(sig, frame) -> None:
        if not serving.is_set():  # still starting (replicas loading, waiting for room): end now, as one server does
            raise KeyboardInterrupt if sig == signal.SIGINT else SystemExit(128 + sig)
        signals.release()

    for sig in (signal.SIGINT, signal.SIGTERM):  # after Ray's start, which installs handlers of its own
        signal.signal(sig, on_signal)
    try:
        url = deploy(make_app, config, options, gpus, took)
        serving.set()
        scaling = f"{options.bounds[0]} to {options.bounds[1]} (autoscaling)" if options.autoscaling else str(options.replicas)
        print(f"setllm serve: {scaling} replica(s) on Ray Serve ({where}), router {options.router}; ready in "
              f"{time.monotonic() - started:.1f} s (Ray {took['ray']:.1f} s, Serve {took['serve']:.1f} s, the replicas loading side by side "
              f"{took['replicas']:.1f} s)\nsetllm serve: listening on {url}; Ctrl-C stops", file=sys.stderr, flush=True)
        ingress = serve.get_app_handle(APP_NAME)  # found and used now: a stop may find Ray's control plane gone, the endpoint up
        _ask(ingress.busy)
        while not signals.acquire(timeout=0.5):  # a timeout: so Python runs the handler soon after the signal
            pass
        drain(ingress, config.drain_limit, forced=lambda: signals.acquire(blocking=False))
    finally:
        shutdown(joined=options.ray_address is not None)
    print("setllm serve: stopped", file=sys.stderr, flush=True)


def replica_gpus(device: str | None) -> float:
    """GPUs a replica asks Ray for: one on CUDA (``--device cuda...``, or no ``--device`` on a
    cluster that has GPUs, as a replica's torch would pick CUDA there). Ray counts the GPUs;
    this process never imports torch (a second off every start)."""
    import ray

    if device is not None:
        return 1.0 if device.startswith("cuda") else 0.0
    return 1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0


ABORT_GRACE_S = 3.0  # after a forced stop: time for the ingress's 503s to go out
SETTLE_S = 0.5  # the ingress has answered: time for the proxy to write the last answer out
ASK_S = 10.0  # the ingress answers its drain counts at once; longer: Ray itself is gone


def drain(ingress, limit_s: float, forced: Callable[[], bool]) -> None:
    """New requests get 503 from now on; wait until those accepted are answered (at most
    ``limit_s``, or until ``forced()``), then answer any still open with a JSON 503.
    ``ingress``: the application's handle."""
    try:
        busy = _ask(ingress.drain)
    except Exception as e:  # noqa: BLE001 - Ray or the ingress is gone: nothing is left to answer
        print(f"setllm serve: stopping; the endpoint does not answer ({_first_line(e)})", file=sys.stderr, flush=True)
        return
    print(f"setllm serve: stopping; finishing {busy} request(s) in flight, new ones get 503 (a second Ctrl-C answers them 503 now)",
          file=sys.stderr, flush=True)
    deadline, pressed = time.monotonic() + limit_s, False
    try:
        while busy and time.monotonic() < deadline and not (pressed := forced()):
            time.sleep(0.05)
            busy = _ask(ingress.drain)
        if busy:
            why = "second signal" if pressed else f"drain limit of {limit_s:g} s reached"
            print(f"setllm serve: {why}: answering {busy} unfinished request(s) with 503", file=sys.stderr, flush=True)
            busy = _ask(ingress.stop)
            end = time.monotonic() + ABORT_GRACE_S
            while busy and time.monotonic() < end:
                time.sleep(0.05)
                busy = _ask(ingress.stop)
    except Exception as e:  # noqa: BLE001 - as above
        print(f"setllm serve: the endpoint stopped answering ({_first_line(e)})", file=sys.stderr, flush=True)
        return
    time.sleep(SETTLE_S)


def _ask(method) -> int:
    return method.remote().result(timeout_s=ASK_S)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
