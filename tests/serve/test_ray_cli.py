"""`setllm serve --replicas N` without Ray: one line and exit 2; without --replicas nothing
of Ray is imported; the Ray flags are checked before anything loads."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys

import pytest
from tiny import run_cli


def test_replicas_without_ray_is_refused_in_one_line(capsys, monkeypatch, model_dir):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name.split(".")[0] == "ray" else find_spec(name, *a))
    code, out, err = run_cli(capsys, "serve", "--model", model_dir, "--replicas", "2", "--port", "0")
    assert code == 2 and out == ""
    assert err.strip() == "error: --replicas needs Ray Serve (ray[serve]==2.60.0): pip install -e '.[serve,ray]' in setllm's checkout"


@pytest.mark.parametrize("flags, message", [
    (["--replicas", "0"], "error: --replicas must be an integer >= 1, got 0"),
    (["--max-replicas", "3"], "error: --max-replicas needs --replicas N"),
    (["--ray-address", "auto"], "error: --ray-address needs --replicas N"),
    (["--replicas", "2", "--max-replicas", "3", "--scale-down-s", "-1"], "error: --scale-down-s must be a number of seconds >= 0, got -1.0"),
    (["--replicas", "4", "--max-replicas", "3"], "error: --replicas 4 must lie between --min-replicas 4 and --max-replicas 3"),
])
def test_ray_flags_are_checked_before_anything_loads(capsys, flags, message):
    code, _, err = run_cli(capsys, "serve", "--model", "/no/such/model", *flags)
    assert code == 2 and err.strip() == message


def test_a_cluster_nobody_runs_is_one_line(capsys, model_dir):
    pytest.importorskip("ray.serve")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there
    code, _, err = run_cli(capsys, "serve", "--model", model_dir, "--replicas", "1", "--ray-address", f"127.0.0.1:{port}", "--port", "0")
    assert code == 2 and err.startswith(f"error: --ray-address 127.0.0.1:{port}: cannot join the Ray cluster (") and err.count("\n") == 1


def test_one_server_imports_nothing_of_ray(model_dir):
    script = f"""
import sys
from setllm.cli import main
try:
    main(["serve", "--help"])
except SystemExit:
    pass
from setllm.cli.serve import replica_app
from setllm.cli import build_parser
from setllm.cli.common import config_from_args
from setllm.serve import ServeConfig
args = build_parser("serve")[1].parse_args(["--model", {model_dir!r}, "--adapter", "none"])
replica_app(args, config_from_args(ServeConfig, args))
print(sorted(m for m in sys.modules if m == "ray" or m.startswith("ray.")))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def engine_config(options, **config):
    """The engine deployment's Ray Serve config for ``options`` (nothing started)."""
    pytest.importorskip("ray.serve")
    from setllm.serve import ServeConfig
    from setllm.serve.ray.deployments import application

    ingress = application(print, ServeConfig(**config), options)._bound_deployment
    engine = ingress.init_args[0]._bound_deployment
    return engine._deployment_config, engine.ray_actor_options


def test_autoscaling_bounds_the_router_and_a_gpu_per_replica_pass_to_ray_serve():
    from setllm.serve.ray.options import RayOptions

    scaled, _ = engine_config(RayOptions(replicas=2, min_replicas=1, max_replicas=4, target_in_flight=3, scale_up_s=5, scale_down_s=20),
                              max_queue=10, max_batch_size=4)
    a = scaled.autoscaling_config
    assert (a.min_replicas, a.initial_replicas, a.max_replicas, a.target_ongoing_requests) == (1, 2, 4, 3)
    assert (a.upscale_delay_s, a.downscale_delay_s) == (5, 20)
    assert scaled.max_ongoing_requests == 14  # past the replica's own queue it answers 503 itself
    assert scaled.request_router_config.request_router_class == "setllm.serve.ray.router.DocumentRouter"
    fixed, actor = engine_config(RayOptions(replicas=3, router="power-of-two"))
    assert fixed.autoscaling_config is None and fixed.num_replicas == 3 and fixed.request_router_config.is_default_request_router()
    first, _ = engine_config(RayOptions(replicas=2, router="first-document", imbalance=7))
    assert first.request_router_config.request_router_kwargs == {"imbalance": 7, "first_only": True}
    assert actor["num_gpus"] == 0
    from setllm.serve import ServeConfig
    from setllm.serve.ray.deployments import application

    on_gpu = application(print, ServeConfig(), RayOptions(replicas=2), gpus=1.0)._bound_deployment.init_args[0]._bound_deployment
    assert on_gpu.ray_actor_options["num_gpus"] == 1
