"""The paper's evaluation protocol for multiple-choice benchmarks (``setllm eval`` / ``report``).

* :mod:`.tasks`: ARC-Challenge, PIQA, CommonsenseQA, Social IQa as small specs, each with
  the paper's original and modified template; loading local JSONL, a user's file or the hub.
* :mod:`.orderings`: which orderings of a question's options are tested.
* :mod:`.metrics`: the modes (single, random, adversarial, majority) as registered metrics.
* :mod:`.runner`: batched, resumable runs writing ``predictions.jsonl`` and ``summary.json``.
* :mod:`.report`: the paper-style markdown table and the majority-vote figures.
"""

from .metrics import METRICS, MODES, Metric, QuestionResult, majority_vote, register_metric
from .orderings import orderings
from .runner import EvalConfig, run_eval
from .tasks import TASKS, TaskSpec, get_task, load_records

__all__ = [
    "METRICS", "MODES", "Metric", "QuestionResult", "majority_vote", "register_metric", "orderings", "EvalConfig",
    "run_eval", "TASKS", "TaskSpec", "get_task", "load_records",
]
