"""What imports no torch: the verbs (a request's checks, on every surface) and the Ray
ingress with what it reads per request (its documents, the routes' declarations, the routing
decision). Importing torch costs the ingress ~2.3 CPU-seconds at every fleet start for
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
