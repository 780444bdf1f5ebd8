"""What imports no torch: the verbs (a request's checks, on every surface) and the Ray
ingress with what it reads per request (its documents, the routes' declarations, the routing
decision). Importing torch cost the ingress about a CPU-second at every fleet start, for
nothing it uses. Each check runs in a fresh interpreter: this one has torch already."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "safetensors", "peft")
LIGHT = ["setllm", "setllm.verbs", "setllm.serve.ray.ingress", "setllm.serve.ray.documents", "setllm.serve.ray.routing"]


def heavy_modules_after(code: str) -> list[str]:
    """The heavy modules a fresh interpreter holds after running ``code``."""
    probe = f"import sys\n{code}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.parametrize("module", LIGHT)
def test_importing_it_leaves_torch_out(module):
    assert heavy_modules_after(f"import {module}") == []


def test_what_ray_ships_to_the_ingress_loads_without_torch(tmp_path):
    """The ingress replica unpickles its deployment class, its arguments and the request
    router (which runs in the ingress's process), as the driver pickled them."""
    pytest.importorskip("ray")
    cloudpickle = pytest.importorskip("cloudpickle")
    from setllm.serve.config import ServeConfig
    from setllm.serve.ray.ingress import Ingress
    from setllm.serve.ray.router import DocumentRouter

    shipped = tmp_path / "ingress.pkl"
    shipped.write_bytes(cloudpickle.dumps((Ingress, ServeConfig(), DocumentRouter)))
    assert pickle.loads(shipped.read_bytes())[0] is Ingress
    assert heavy_modules_after(f"import pickle; pickle.loads(open({str(shipped)!r}, 'rb').read())") == []


LAUNCHER = """
import sys
from setllm.serve.ray import launch
def connect(options, cpus=None):  # stop where Ray would start
    raise SystemExit(0)
launch.connect = connect
from setllm.cli import main
try:
    main(["serve", "--replicas", "2", "--port", "0", "--adapter", "none", "--variant", "sbp"])
except SystemExit:
    pass
"""


def test_a_fleets_launcher_reaches_rays_start_without_torch():
    """`setllm serve --replicas N` parses its flags, checks its port and starts Ray without
    torch: it loads no model (each replica does), and torch cost it a second of every start.
    (transformers' argument parser builds every command's flags; it imports no torch.)"""
    pytest.importorskip("ray")
    assert "torch" not in heavy_modules_after(LAUNCHER)
