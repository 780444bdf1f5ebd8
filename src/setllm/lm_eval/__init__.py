"""setllm inside lm-evaluation-harness: the ``setllm`` model and the set-template tasks.

Importing this package registers the model as ``setllm`` with lm-eval. From the shell::

    python -m setllm.lm_eval --model setllm --model_args variant=setmask-setpe --tasks arc_challenge_set

(every ``lm_eval`` flag works; the shipped tasks in :data:`TASKS_DIR` are included). From
Python::

    import lm_eval
    from lm_eval.tasks import TaskManager
    from setllm.lm_eval import TASKS_DIR, SetLLMLM

    results = lm_eval.simple_evaluate(model=SetLLMLM(variant="setmask-setpe"), tasks=["arc_challenge_set"],
                                      task_manager=TaskManager(include_path=str(TASKS_DIR)))

See docs/lm_eval.md.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import SetLLMError

# The shipped task YAMLs (ARC-Challenge, PIQA, CSQA, SIQA with the options as a set, and a
# template for lettered tasks).
TASKS_DIR = Path(__file__).parent / "tasks"

try:
    import lm_eval.models  # noqa: F401  (lm-eval's own models, registered lazily: --model hf stays available)
except ImportError:
    raise SetLLMError("the lm-evaluation-harness backend needs lm_eval: pip install -e '.[lm-eval]'") from None

from .model import BackendOptions, SetLLMLM  # noqa: E402  (registers --model setllm)

__all__ = ["TASKS_DIR", "BackendOptions", "SetLLMLM"]
