"""Where lm-eval's tasks get their data under ``python -m setllm.lm_eval``.

By default each task downloads its ``dataset_path`` from the Hugging Face hub, as with
``lm_eval``. With ``SETLLM_DATA_DIR=D`` set, the shipped setllm tasks (``arc_challenge_set``,
``piqa_set``, ``commonsense_qa_set``, ``social_iqa_set``) read ``D/<dataset>/<split>.jsonl``
in setllm's record format instead: the same local copy ``setllm eval`` reads, through
setllm's own reader (a malformed record names its file and line; their templates accept both
a hub row and a record). A dataset that cannot be had (offline, unreachable, not cached, not
found) is one line, naming the task, the dataset and how to point at local files, instead of
lm-eval's traceback.

:func:`install` patches lm-eval's task factory and ``ConfigurableTask.download`` for this
process (idempotent); ``python -m setllm.lm_eval`` calls it, Python callers may too. On lm-eval's
command line it also checks the tasks' data before the model loads (:func:`check_data`).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from ..io.records import DataError
from ..loading.hub import hub_problem
from ..tasks import TASKS, load_records
from ..tasks.base import DATA_DIR_ENV, datasets_offline
from . import TASKS_DIR

# lm-eval task -> setllm task whose local files it reads (the shipped YAMLs' names).
SHIPPED = {f"{name}_set": name for name in TASKS}
SPLIT_KEYS = ("training_split", "validation_split", "test_split", "fewshot_split")
# `datasets` builders that read local files: nothing to ask the hub about.
LOCAL_BUILDERS = {"json", "csv", "parquet", "text", "arrow", "pandas"}
# The config's metadata key that marks a task as read from local files (kept in the results'
# config, so a result says which files it came from).
LOCAL_KEY = "setllm_local_files"


def is_shipped(cfg: dict) -> bool:
    """A task config loaded from the shipped YAMLs (a user's task of the same name, or one that
    includes a shipped YAML, keeps its own data)."""
    source = (cfg.get("metadata") or {}).get("config_source", "")
    return cfg.get("task") in SHIPPED and bool(source) and Path(source).resolve().parent == TASKS_DIR.resolve()


def local_config(cfg: dict, data_dir: str | Path) -> dict:
    """A shipped task's config reading ``data_dir/<dataset>/<split>.jsonl``: the split lm-eval
    evaluates (test, else validation) must be there; other splits absent locally are dropped
    (lm-eval then draws few-shot examples from what remains)."""
    task = TASKS[SHIPPED[cfg["task"]]]
    folder = Path(data_dir) / (task.folder or task.name)
    files = {split: str((folder / f"{split}.jsonl").resolve()) for split in {cfg.get(key) for key in SPLIT_KEYS} - {None}
             if (folder / f"{split}.jsonl").is_file()}
    evaluated = cfg.get("test_split") or cfg["validation_split"]
    if evaluated not in files:  # say where data comes from, in lm-eval's terms (no --data-dir here)
        have = sorted(p.stem for p in folder.glob("*.jsonl"))
        raise DataError(f"{DATA_DIR_ENV}: {folder / f'{evaluated}.jsonl'}: no such file (splits here: {', '.join(have) or 'none'}); "
                        f"lm-eval task {cfg['task']} reads D/{task.folder or task.name}/<split>.jsonl in setllm's record format "
                        f"when {DATA_DIR_ENV}=D is set (docs/lm_eval.md, 'Local data'); unset, it downloads {cfg['dataset_path']} "
                        "from the hub")
    dropped = {key: None for key in SPLIT_KEYS if cfg.get(key) and cfg[key] not in files}
    return {**cfg, **dropped, "dataset_path": "json", "dataset_name": None, "dataset_kwargs": {"data_files": files},
            "metadata": {**cfg.get("metadata", {}), LOCAL_KEY: files}}


def local_dataset(task: str, files: dict[str, str]):
    """A shipped task's local files as a ``DatasetDict`` of records, read by setllm's reader:
    the files' own extra fields (``choice_labels``, ...) may differ between splits, which
    ``datasets``' json loader refuses, and a bad record is named as ``setllm eval`` names it."""
    import datasets

    def rows(path: str) -> list[dict]:
        records, _ = load_records(TASKS[SHIPPED[task]], data_file=path)
        return [{"id": r.id, "question": r.question, "context": r.context, "choices": list(r.choices), "label": r.label}
                for r in records]

    return datasets.DatasetDict({split: datasets.Dataset.from_list(rows(path)) for split, path in files.items()})


def unloadable(task: str, path: str, error: Exception) -> str:
    """The one-line error for a dataset lm-eval could not load, with the way to local files."""
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if task in SHIPPED:
        name = TASKS[SHIPPED[task]].name
        how = (f"to read a local copy, set {DATA_DIR_ENV}=D holding D/{name}/<split>.jsonl in setllm's record format "
               "(see docs/lm_eval.md, 'Local data')")
    else:
        how = "offline, point the task at local files (dataset_path: json, dataset_kwargs: {data_files: ...}; see docs/lm_eval.md)"
    return f"lm-eval task {task}: could not load dataset {path} ({first}); {how}"


def install() -> None:
    """Make this process's lm-eval read the shipped tasks from ``$SETLLM_DATA_DIR`` when set,
    and turn a dataset that cannot be loaded into a :class:`DataError`."""
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._factory import TaskFactory

    if getattr(TaskFactory._load_full_config, "_setllm_local", False):
        return
    load_config, download = TaskFactory._load_full_config, ConfigurableTask.download

    @functools.wraps(load_config)
    def with_local_data(self, entry, overrides=None):
        cfg = load_config(self, entry, overrides)
        data_dir = os.environ.get(DATA_DIR_ENV)  # read per load: the variable as the run sees it
        return local_config(cfg, data_dir) if data_dir and is_shipped(cfg) else cfg

    @functools.wraps(download)
    def one_line_download(self, dataset_kwargs=None, **kwargs):
        import datasets
        from datasets.exceptions import DatasetsError

        files = (self.config.metadata or {}).get(LOCAL_KEY) if isinstance(self.config.metadata, dict) else None
        if files:
            self.dataset = local_dataset(self.config.task, files)
            return None
        path = self.config.dataset_path
        try:
            # Like setllm's own hub reads: one quick try first, so an unreachable hub fails at
            # once (only a cached copy can serve) instead of after `datasets`' retries.
            with datasets_offline(datasets, _hub_problem(path) is not None):
                return download(self, dataset_kwargs, **kwargs)
        except (OSError, DatasetsError) as e:  # offline, unreachable, not cached, not found
            raise DataError(unloadable(self.config.task, path, e)) from None

    with_local_data._setllm_local = True
    TaskFactory._load_full_config = with_local_data
    ConfigurableTask.download = one_line_download
    check_data_before_the_model()


def check_data_before_the_model() -> None:
    """Make lm-eval's command line check its tasks' data (:func:`check_data`) as soon as it has
    resolved their names: it loads the model first and the data after, so a missing dataset
    would otherwise wait seconds for a model it never uses."""
    from lm_eval.config.evaluate_config import EvaluatorConfig

    process_tasks = EvaluatorConfig.process_tasks
    if getattr(process_tasks, "_setllm_checked", False):
        return

    @functools.wraps(process_tasks)
    def checked(self, metadata=None):
        manager = process_tasks(self, metadata)
        check_data(manager, [t for t in self.tasks if isinstance(t, str)])
        return manager

    checked._setllm_checked = True
    EvaluatorConfig.process_tasks = checked


def check_data(manager, names: list[str]) -> None:
    """Each named task (a tag: each of its tasks) can get its data: its local files under
    ``$SETLLM_DATA_DIR`` (checked as its config loads), or, where the hub cannot answer, a
    cached copy (``datasets``' builder, offline: no data read). Else the :class:`DataError`
    the download would raise later. A group's tasks are left to the download."""
    from lm_eval.tasks._index import Kind

    index = manager.task_index
    entries = [index[n] for n in names if n in index]
    tasks = [e for e in entries if e.kind is Kind.TASK] + [index[t] for e in entries if e.kind is Kind.TAG
                                                            for t in sorted(e.tags) if t in index]
    for entry in tasks:
        cfg = manager._factory._load_full_config(entry)  # the local-data rule of install() applies here
        path = cfg.get("dataset_path")
        if (cfg.get("metadata") or {}).get(LOCAL_KEY) or _hub_problem(path) is None:
            continue
        import datasets
        from datasets.exceptions import DatasetsError

        try:
            with datasets_offline(datasets, True):
                datasets.load_dataset_builder(path, cfg.get("dataset_name"), **(cfg.get("dataset_kwargs") or {}))
        except (OSError, DatasetsError) as e:
            raise DataError(unloadable(cfg.get("task", entry.name), path, e)) from None


def _hub_problem(path: str | None) -> str | None:
    if not path or path in LOCAL_BUILDERS or Path(path).exists():
        return None
    return hub_problem(path, "dataset")
