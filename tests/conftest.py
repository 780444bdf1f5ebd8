import os
import sys
import tempfile
from pathlib import Path

# Tests never reach the network: the hub is unreachable here and must not be waited on.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Tests never write to the user's ~/.cache: the embedded model is converted (once, ~30 s) into
# a cache of the tests' own under the system temp dir, kept between runs; likewise HF's caches.
_CACHE = Path(tempfile.gettempdir()) / "setllm-tests"
os.environ["SETLLM_CACHE"] = str(_CACHE / "setllm")
os.environ["HF_HOME"] = str(_CACHE / "hf")
os.environ["MPLCONFIGDIR"] = str(_CACHE / "matplotlib")  # else its font cache lands in ~/.cache/matplotlib

sys.path.insert(0, str(Path(__file__).parent))

import pytest
import torch

# The files that take longest (measured, 2026-12-02, 2 workers of one thread), handed out first,
# so that no long file starts last while the other worker has nothing left to do.
LONGEST_FIRST = ("ray", "tests/core/test_real_model.py", "tests/test_docs.py", "tests/lm_eval/test_lm_eval_cli.py",
                 "tests/test_gpu_e2e.py", "tests/serve/test_soak.py", "tests/lm_eval/test_lm_eval_local_data.py",
                 "tests/serve/test_playground.py", "tests/test_gpu_check.py", "tests/serve/test_clients.py")


def _unit(nodeid: str) -> str:
    """The unit a worker runs whole: a test's file, or ``"ray"`` for every Ray file."""
    path = nodeid.split("::")[0]
    return "ray" if Path(path).name.startswith("test_ray") else path


def pytest_collection_modifyitems(config, items):
    """On an xdist worker, the longest files first (:data:`LONGEST_FIRST`), each file's tests in
    their order; the scheduler hands units out in this order."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(_unit(item.nodeid), len(rank)))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent without it
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (``make test`` runs ``-n 2``) a file's tests run on one worker, in
    order, so its module fixtures (a model, a server) are built once; the Ray files share one
    worker, so that two Ray sessions never start side by side."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    config.option.loadscopereorder = False  # in collection order (longest first), not by test count
    return ByFile(config, log)


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


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """Run a bit-equality test at 1 and at 2 threads: the thread count is part of a BLAS's
    kernel choice, so a test that passes only on one kernel path fails here, not on the
    next machine. Results are compared within one thread count, never across."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny llama and its tokenizer saved as a model directory (for ``--model DIR``)."""
    from tiny import save_model_dir

    return save_model_dir(tmp_path_factory.mktemp("tiny-llama"))
