"""The paper's evaluation protocol for multiple-choice benchmarks (``setllm eval`` / ``report``).

* The benchmarks themselves (templates, sources, columns) live in :mod:`setllm.tasks`.
* :mod:`.config`: the options of a run (``EvalConfig``).
* :mod:`.orderings`: which orderings of a question's options are tested.
* :mod:`.metrics`: the modes (single, random, adversarial, majority) as registered metrics.
* :mod:`.runner`: batched, resumable runs writing ``predictions.jsonl``; :mod:`.summary`
  turns them into ``summary.json``.
* :mod:`.report`: the paper-style markdown table and the majority-vote figures.
"""

from ..tasks import TASKS, MCTask, get_task, load_records
from .config import EvalConfig
from .metrics import (
    METRICS,
    MODES,
    Metric,
    QuestionResult,
    majority_vote,
    register_metric,
)
from .orderings import orderings
from .runner import run_eval

__all__ = [
    "METRICS", "MODES", "Metric", "QuestionResult", "majority_vote", "register_metric", "orderings", "EvalConfig",
    "run_eval", "TASKS", "MCTask", "get_task", "load_records",
]
