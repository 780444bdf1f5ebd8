"""Run an evaluation: score each question under its orderings, write predictions as they
finish, and summarise every requested mode (:mod:`.summary`; options: :mod:`.config`).

The ladder: ``run_eval -> evaluate_chunk -> score_batch``. Questions go in chunks of
``batch_size``; within a chunk the due (question, ordering) pairs are scored
``batch_size`` prompts per forward. Only ``adversarial`` (without ``random``/``majority``)
stops a question at its first wrong answer, so it scores orderings round by round.

Several processes (``accelerate launch`` / ``torchrun``, see :func:`sharded`): the chunks
are dealt round-robin to the ranks, each round's rows gathered, and rank 0 alone writes
``predictions.jsonl`` (in one process's order) and ``summary.json`` (``processes``: N).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core.forward.values import OptionScore
from ..core.model.fingerprint import weights_fingerprint
from ..errors import InputError, SetLLMError
from ..io import rundir
from ..io.records import MCRecord
from ..policy import pick
from ..readouts import PROMPT_READOUTS, JudgeRow, candidate_scores
from ..tasks import JUDGE_TASKS, MCTask, Template, get_task, load_records
from ..tasks.base import shown
from . import store
from .config import EvalConfig
from .documents import run_documents
from .metrics import PLANS, QuestionResult, majority_vote, plan_for
from .orderings import Ordering, dataset_order, orderings
from .resources import peak_memory_mb, reset_peak_memory
from .summary import summarize


@dataclass
class _Question:
    """One question's due orderings and what scoring them gave so far."""

    record: MCRecord
    due: list[Ordering]
    picks: dict[Ordering, tuple[int, list[float], float, float]] = field(default_factory=dict)

    def next(self, plan: str) -> list[Ordering]:
        """Orderings to score in this round."""
        left = [o for o in self.due if o not in self.picks]
        if plan == "all":
            return left
        failed = any(p[0] != self.record.label for p in self.picks.values())
        if plan == "first":
            return left[:1] if not self.picks else []
        return [] if failed or not left else left[:1]

    def add(self, order: Ordering, scores, seconds: float, peak_mb: float, normalize: bool) -> None:
        logprobs = [0.0] * len(order)
        for position, s in enumerate(scores):
            logprobs[order[position]] = s.logprob  # back to the dataset's option order
        self.picks[order] = (order[pick(scores, normalize).index], logprobs, seconds, peak_mb)

    def row(self, plan: str, one_run: bool, seed: int) -> dict:
        tested = [o for o in self.due if o in self.picks]
        first = self.picks[tested[0]][1]
        diffs = [max(abs(a - b) for a, b in zip(self.picks[o][1], first)) for o in tested[1:]]
        predictions = [self.picks[o][0] for o in tested]
        pick_, votes = majority_vote(QuestionResult(self.record.id, self.record.label, tuple(tested), tuple(predictions)), seed)
        return {
            "id": self.record.id, "label": self.record.label, "n_choices": len(self.record.choices),
            "plan": "all" if one_run else plan, "one_run": one_run,
            "orderings": [list(o) for o in tested], "predictions": predictions,
            # Vote counts over the tested orderings (all of them only under plan "all").
            "votes": {str(k): v for k, v in votes.items()}, "majority": pick_,
            "logprobs": first, "max_logprob_diff": max(diffs) if diffs else None,
            "time_s": [round(self.picks[o][2], 6) for o in tested], "peak_mb": [round(self.picks[o][3], 1) for o in tested],
        }


def run_eval(lm, cfg: EvalConfig, records: Sequence[MCRecord] | None = None, meta: dict | None = None) -> dict:
    """Evaluate ``lm`` (a :class:`setllm.SetLLM`) as ``cfg`` says; returns the summary.

    ``records`` default to those ``cfg`` names. A rerun with the same ``--out`` resumes.
    """
    task = get_task(cfg.dataset)
    if cfg.readout is None and cfg.dataset in JUDGE_TASKS and lm.origin.trained_as.readout:  # read as trained (setllm.json)
        cfg = replace(cfg, readout=lm.origin.trained_as.readout)
    source = (meta or {}).get("source", "given")
    if records is None:
        records, source = load_records(task, cfg.split, cfg.data_dir, cfg.data_file, cfg.limit, cfg.subset_seed, cfg.skip_bad)
    if task.kind == "documents":  # generated answers by gold position: its own ladder
        if rundir.World.current().size > 1:  # its ladder writes from every process: not sharded yet
            raise InputError("--dataset documents runs in one process; start it without accelerate launch / torchrun")

        meta = {"model": getattr(lm.model.config, "_name_or_path", None), "adapter": None, **(meta or {})}
        return run_documents(lm, cfg, records, source, _settings(lm, cfg, task, source, meta))
    template = task.template(cfg.template)
    if cfg.readout not in (None, *PROMPT_READOUTS) and template is task.held_out:
        raise InputError(f"--readout {cfg.readout} reads the trained judge prompt; --template {cfg.template} takes {' or '.join(PROMPT_READOUTS)}")
    # Verifying means running every tested ordering, whatever the modes would need.
    plan = "all" if cfg.verify_invariance else plan_for(cfg.mode_list)
    one_run = not template.shows_options or (template.options_as_set and lm.variant.invariant and not cfg.verify_invariance)
    if template.orderings is None:
        _check_ordering_counts(records, one_run, cfg)
    meta = {"model": getattr(lm.model.config, "_name_or_path", None), "adapter": None, **(meta or {})}
    settings = _settings(lm, cfg, task, source, meta)
    world = rundir.World.start()
    # Everything is checked before anything in --out changes; one writer at a time (rank 0).
    with rundir.claimed(cfg.out, world) as out:
        error = None
        if world.is_main:
            try:
                if cfg.overwrite:
                    store.clear(out)
                store.check_settings(out, settings)
            except SetLLMError as e:
                if world.size == 1:
                    raise
                error = str(e)
        world.agree(error)
        return _run(lm, cfg, records, template, plan, one_run, settings, out, world)


def _run(lm, cfg: EvalConfig, records, template: Template, plan: str, one_run: bool, settings: dict, out: Path,
         world: rundir.World = rundir.World()) -> dict:
    # predictions.jsonl is the one record of what is done, whatever the number of processes
    # that wrote it: rank 0 reads it and tells the others what is left.
    done = store.load_predictions(out) if world.is_main else {}
    left = set(world.from_main([r.id for r in records if not _covers(done.get(r.id), plan)]))
    todo = [r for r in records if r.id in left]
    rescored = any(r.id in done for r in todo)  # a rerun that needs more orderings per question
    started = time.perf_counter()
    if cfg.verify_invariance and lm.variant.invariant:
        lm = lm.with_options(exact=False)  # verifying means reading the orderings unsorted
    with _progress(cfg, len(records), len(records) - len(todo), world) as bar:
        step = _questions_per_chunk(lm.batch_size, todo, one_run, cfg, template)
        chunks = [todo[lo : lo + step] for lo in range(0, len(todo), step)]
        for rows in sharded(world, chunks, lambda chunk: evaluate_chunk(lm, template, chunk, plan, one_run, cfg)):
            if world.is_main:
                store.append_predictions(out, rows, settings)
                done.update((row["id"], row) for row in rows)
            bar.update(len(rows))
    summary = None
    if world.is_main:
        if rescored:
            store.rewrite_predictions(out, done.values())  # one row per question
        summary = summarize([done[r.id] for r in records], cfg, settings, lm)
        summary.update(wall_time_s=round(time.perf_counter() - started, 3), resumed_questions=len(records) - len(todo),
                       processes=world.size)
        store.write_json(out / store.SUMMARY_FILE, summary)
    return world.from_main(summary)


def sharded(world: rundir.World, chunks: Sequence, evaluate: Callable[[Any], list[dict]]) -> Iterator[list[dict]]:
    """Run ``evaluate`` on the chunks, round-robin over the ranks, and yield on every rank
    each round's rows of all ranks in chunk order (one process: each chunk's rows).

    Rank r scores chunks r, r + N, r + 2N, ...: the chunks (hence the forward batches) are
    those one process would score, so N processes give its predictions bit for bit, and rank
    0 appends them in the order it would. Rows are gathered after every round, not at the
    end, so a killed run keeps every finished round. A user error on one rank stops all.
    """
    for lo in range(0, len(chunks), world.size):
        if world.size == 1:
            yield evaluate(chunks[lo])
            continue
        mine = lo + world.rank
        rows, error, raised = [], None, None
        try:
            rows = evaluate(chunks[mine]) if mine < len(chunks) else []
        except SetLLMError as e:
            error, raised = f"rank {world.rank}: {e}", e
        gathered = world.all_gather((rows, error))
        errors = [e for _, e in gathered if e]
        if raised is not None:
            raise raised
        if errors:
            raise InputError(errors[0])
        yield [row for rank_rows, _ in gathered for row in rank_rows]


MAX_ORDERINGS = 5040  # 7!: above this, --max-orderings must say how many to test


def _check_ordering_counts(records: Sequence[MCRecord], one_run: bool, cfg: EvalConfig) -> None:
    if one_run or cfg.max_orderings is not None:
        return
    for r in records:
        if math.factorial(len(r.choices)) > MAX_ORDERINGS:
            raise InputError(f"question {r.id} has {len(r.choices)} options: {math.factorial(len(r.choices))} orderings; "
                             f"pass --max-orderings N (at most {MAX_ORDERINGS} are run without it)")


def evaluate_chunk(lm, template: Template, records: Sequence[MCRecord], plan: str, one_run: bool, cfg: EvalConfig) -> list[dict]:
    """Score a chunk of questions under their due orderings; one row per question."""
    questions = [_Question(r, _due(r, one_run, cfg, template)) for r in records]
    while items := [(q, o) for q in questions for o in q.next(plan)]:
        for lo in range(0, len(items), lm.batch_size):
            score_batch(lm, template, items[lo : lo + lm.batch_size], cfg.normalize, cfg.readout)
    rows = [q.row(plan, one_run, cfg.seed) for q in questions]
    if cfg.log_samples:  # what was asked, as lm-eval's --log_samples keeps it
        for row, r in zip(rows, records):
            row.update(prompt=template.render(r, dataset_order(len(r.choices))).prompt.text(), choices=list(r.choices))
    return rows


def _questions_per_chunk(batch_size: int, todo: Sequence[MCRecord], one_run: bool, cfg: EvalConfig, template: Template) -> int:
    """Enough questions to fill a forward batch with their orderings, no more: with 24
    orderings a question, the progress bar then moves question by question."""
    if one_run or not todo:
        return batch_size * 4  # one prompt a question: several batches, so the scoring driver's length groups fill
    return max(1, batch_size // len(_due(todo[0], one_run, cfg, template)))


def score_batch(lm, template: Template, items: list[tuple[_Question, Ordering]], normalize: bool, readout: str | None = None) -> None:
    """One forward batch; records each item's pick, its share of the time, the batch's peak
    memory. ``readout``: judge rows, read through :mod:`setllm.readouts` (its score per
    candidate stands where a log-likelihood would)."""
    device = lm.model.device
    reset_peak_memory(device)
    start = time.perf_counter()
    if readout in (None, *PROMPT_READOUTS):  # the template's own prompt and options (summed, or per token)
        rendered = [template.render(q.record, o) for q, o in items]
        scores = lm.score_many([r.prompt for r in rendered], [r.options for r in rendered])
        if readout == "mean":  # exactly readouts' `mean` on the trained judge prompt, on any template
            scores = [[OptionScore(x.text, x.mean_logprob, x.mean_logprob, x.n_tokens) for x in row] for row in scores]
    else:
        scores = _readout_scores(lm, [(q.record, o) for q, o in items], readout)
    seconds = (time.perf_counter() - start) / len(items)
    peak = peak_memory_mb(device)
    for (q, order), s in zip(items, scores):
        q.add(order, s, seconds, peak, normalize)


def _readout_scores(lm, items: list[tuple[MCRecord, Ordering]], readout: str) -> list[list[OptionScore]]:
    rows = [JudgeRow(r.question, tuple(c.strip() for c in shown(r, o)), r.context) for r, o in items]
    return [[OptionScore(c, s, s, 0) for c, s in zip(row.candidates, got)] for row, got in zip(rows, candidate_scores(lm.score_many, rows, readout))]


def _due(record: MCRecord, one_run: bool, cfg: EvalConfig, template: Template | None = None) -> list[Ordering]:
    k = len(record.choices)
    if one_run:
        return [dataset_order(k)]
    if template is not None and template.orderings is not None:
        return template.orderings(k)
    return orderings(k, cfg.max_orderings, cfg.ordering_choice, cfg.seed, record.id)


def _covers(row: dict | None, plan: str) -> bool:
    return row is not None and PLANS.index(row["plan"]) >= PLANS.index(plan)


def _settings(lm, cfg: EvalConfig, task: MCTask, source: str, meta: dict) -> dict:
    """What makes two runs' predictions comparable; a resumed run must match them."""
    import torch

    return {
        "dataset": task.name, "split": cfg.split or task.eval_split, "source": source, "template": cfg.template,
        "variant": lm.variant.name, "invariant": lm.variant.invariant, "exact": lm.exact, "chat": lm.chat, "eos": lm.options.eos,
        "model": meta.get("model"), "adapter": meta.get("adapter"), "dtype": str(next(lm.model.parameters()).dtype),
        "max_orderings": cfg.max_orderings, "ordering_choice": cfg.ordering_choice, "verify_invariance": cfg.verify_invariance,
        "normalize": cfg.normalize, "seed": cfg.seed, "torch": torch.__version__, **({"readout": cfg.readout} if cfg.readout else {}),
        # The weights actually scored (an adapter is merged into them): retraining an adapter
        # in place and resuming must not mix its answers with the old ones.
        "weights": weights_fingerprint(lm.model),
    }


@contextmanager
def _progress(cfg: EvalConfig, total: int, initial: int, world: rundir.World = rundir.World()) -> Iterator:
    from tqdm.auto import tqdm

    bar = tqdm(total=total, initial=initial, desc=f"eval {cfg.dataset or 'custom'}", unit="q", disable=not cfg.progress or not world.is_main)
    try:
        yield bar
    finally:
        bar.close()
