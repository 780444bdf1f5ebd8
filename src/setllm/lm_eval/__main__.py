"""``python -m setllm.lm_eval <lm_eval arguments>``: lm-eval's own command line, with the
``setllm`` model registered and the shipped tasks on the task path.

lm-eval discovers no models from other packages, so this wrapper imports the backend (which
registers it) and then hands the arguments to lm-eval unchanged: ``run``, ``ls``,
``validate`` and every flag work as with ``lm_eval``. The shipped task directory is added to
every task manager, before a ``--include_path`` of the user's (whose tasks then win a name clash).
With ``SETLLM_DATA_DIR`` set, the shipped tasks read its local files (:mod:`.local`).
"""

from __future__ import annotations

import functools
import inspect
import sys

from ..errors import SetLLMError


def include_shipped_tasks() -> None:
    """Make every lm-eval ``TaskManager`` in this process also index :data:`TASKS_DIR`."""
    from lm_eval.tasks import manager

    from . import TASKS_DIR

    init = manager.TaskManager.__init__
    if getattr(init, "_setllm_tasks", False):
        return
    signature = inspect.signature(init)

    @functools.wraps(init)
    def with_shipped(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        given = bound.arguments.get("include_path")
        given = [] if given is None else list(given) if isinstance(given, (list, tuple)) else [given]
        bound.arguments["include_path"] = [str(TASKS_DIR), *given]
        init(*bound.args, **bound.kwargs)

    with_shipped._setllm_tasks = True
    manager.TaskManager.__init__ = with_shipped


def quiet_git_hash() -> None:
    """lm-eval records ``git describe --always`` of the working directory in its results, with
    git's stderr let through: outside a git checkout every run printed ``fatal: not a git
    repository``. The same command and fallback (lm-eval's ``get_git_commit_hash``), git's
    stderr discarded; the hash recorded is the same."""
    import os
    import subprocess

    from lm_eval import evaluator
    from lm_eval.loggers.utils import get_commit_from_path

    def get_git_commit_hash() -> str | None:
        try:
            return subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL).strip().decode()
        except (subprocess.CalledProcessError, FileNotFoundError):  # not a checkout, or no git
            return get_commit_from_path(os.getcwd())

    evaluator.get_git_commit_hash = get_git_commit_hash


def setllm_defaults() -> None:
    """Two of lm-eval's command-line defaults, for ``--model setllm`` only: ``--batch_size``
    left out (lm-eval then passes 1) is the backend's own default
    (:data:`~setllm.lm_eval.model.DEFAULT_BATCH_SIZE`, or ``batch_size`` in ``--model_args``);
    and a run is named by :func:`~setllm.lm_eval.model.run_name` (model, adapter, variant),
    in its results and its ``--output_path`` folder, not by lm-eval's fixed random id."""
    from lm_eval.config.evaluate_config import EvaluatorConfig
    from lm_eval.loggers.evaluation_tracker import GeneralConfigTracker
    from lm_eval.utils import handle_arg_string, sanitize_model_name

    from .model import DEFAULT_BATCH_SIZE, run_name

    from_cli = EvaluatorConfig.from_cli.__func__
    if getattr(from_cli, "_setllm", False):
        return

    def with_batch_size(cls, namespace):
        cfg = from_cli(cls, namespace)
        given = "batch_size" in vars(namespace) or "batch_size" in (cls.load_yaml_config(namespace.config) if getattr(namespace, "config", None) else {})
        if cfg.model == "setllm" and not given:
            args = cfg.model_args if isinstance(cfg.model_args, dict) else {}
            cfg.batch_size = handle_arg_string(str(args.get("batch_size", DEFAULT_BATCH_SIZE)))
        return cfg

    with_batch_size._setllm = True
    EvaluatorConfig.from_cli = classmethod(with_batch_size)
    log = GeneralConfigTracker.log_experiment_args

    def named(self, model_source, model_args, *args, **kwargs):
        log(self, model_source, model_args, *args, **kwargs)
        if model_source == "setllm":
            self.model_name = run_name(model_args)
            self.model_name_sanitized = sanitize_model_name(self.model_name)

    GeneralConfigTracker.log_experiment_args = named


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        from . import SetLLMLM, local  # noqa: F401  (registers --model setllm)

        include_shipped_tasks()
        local.install()  # SETLLM_DATA_DIR: the shipped tasks read local files; an unloadable dataset is one line
        quiet_git_hash()
        setllm_defaults()
        from lm_eval._cli import HarnessCLI
        from lm_eval.utils import setup_logging

        setup_logging()
        sys.argv = ["lm-eval", *argv]  # lm-eval's parser reads sys.argv (and inserts `run` if absent)
        parser = HarnessCLI()
        parser.execute(parser.parse_args())
    except SetLLMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
