import os

# Tests never reach the network: the hub is unreachable here and must not be waited on.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_thread(request):
    """Tiny models run faster on one thread (thread overhead dominates their small matmuls,
    ~15x on two busy cores); real-model tests (marked slow) keep all threads."""
    if request.node.get_closest_marker("slow"):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
