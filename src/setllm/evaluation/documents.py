"""``setllm eval --dataset documents``: answers generated from documents read as a set, with
the gold document moved to each asked position (the task: :mod:`setllm.tasks.documents`).

The ladder: ``run_documents -> evaluate_rows -> answer_batch``. Each (row, gold position) is
one prompt: the answer is generated greedily up to a newline and compared by normalised
exact match, and the gold answer's log-likelihood is scored as the response. An invariant
variant runs each row once (the data's order; in exact mode the documents are sorted
anyway), which stands for every position; ``--verify-invariance`` runs every position, with
the documents unsorted. Rows land in ``predictions.jsonl`` in the layout the multiple-choice
runs use (``label`` = the normalised answer, ``predictions`` = the normalised generations,
one per tested ordering), so the modes of :mod:`.metrics` read them unchanged: ``single`` is
the first asked position, ``random`` the mean over positions, ``adversarial`` right at every
position, ``majority`` the most generated answer over positions. Beside exact match, the
summary counts answers that hold the gold string (``answer_in_text``) and the failure modes
of :func:`setllm.tasks.documents.failure_modes` per gold position; questions no document
answers (``"answer": null``) are answered once, in the data's order, and only counted by what
the reader said (``unanswerable``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from .. import verbs
from ..core import doccache
from ..errors import InputError
from ..io import rundir
from ..tasks import documents as docs
from . import store
from .config import EvalConfig
from .metrics import QuestionResult, majority_vote
from .resources import peak_memory_mb, reset_peak_memory
from .summary import summarize

EXTRA_TOKENS = 8  # generated tokens allowed beyond the longest gold answer (a stop at "\n" ends most sooner)


def run_documents(lm, cfg: EvalConfig, records: Sequence[docs.DocRecord], source: str, settings: dict) -> dict:
    """Evaluate ``records``; resumable like every ``setllm eval`` run (same ``--out``)."""
    positions = docs.parse_positions(cfg.gold_positions)
    keys = [str(p) for p in positions] if positions is not None else [str(i) for i in range(max(len(r.documents) for r in records))]
    for r in records:  # every asked position must exist in every row, before any work
        docs.row_positions(r, positions)
    one_run = lm.variant.invariant and not cfg.verify_invariance
    settings = {**settings, "gold_positions": cfg.gold_positions}
    # Every row reads its documents as one set: under sbp they are read once, whatever the order.
    cache = lm.cache_documents(cfg.cache_mb, cfg.cache_dir, cfg.cache_dir_mb) if doccache.variant_problem(lm.variant) is None else None
    with rundir.claimed(cfg.out) as out:
        if cfg.overwrite:
            store.clear(out)
        store.check_settings(out, settings)
        return _run(lm, cfg, records, positions, keys, one_run, settings, out, cache)



def _run(lm, cfg: EvalConfig, records, positions, keys: list[str], one_run: bool, settings: dict, out: Path, cache=None) -> dict:
    from tqdm.auto import tqdm

    done = store.load_predictions(out)
    todo = [r for r in records if r.id not in done and r.answerable]
    unasked = [r for r in records if r.id not in done and not r.answerable]
    if cfg.verify_invariance and lm.variant.invariant:
        lm = lm.with_options(exact=False)  # verifying means reading the documents unsorted
    started = time.perf_counter()
    step = max(1, lm.batch_size if one_run else lm.batch_size // len(keys))
    with tqdm(total=len(records), initial=len(records) - len(todo), desc="eval documents", unit="q", disable=not cfg.progress) as bar:
        for lo in range(0, len(todo), step):
            rows = evaluate_rows(lm, todo[lo : lo + step], positions, one_run, cfg)
            store.append_predictions(out, rows, settings)
            done.update((row["id"], row) for row in rows)
            bar.update(len(rows))
        for lo in range(0, len(unasked), lm.batch_size):
            rows = unanswerable_rows(lm, unasked[lo : lo + lm.batch_size])
            store.append_predictions(out, rows, settings)
            done.update((row["id"], row) for row in rows)
            bar.update(len(rows))
    answerable = [r for r in records if r.answerable]
    if not answerable:
        raise InputError("every row's 'answer' is null: nothing to score (at least one row needs an answer)")
    rows = [done[r.id] for r in answerable]
    summary = summarize(rows, cfg, settings, lm)
    summary.update(docs.position_accuracy(rows, keys if positions is not None else _common_keys(rows)))
    summary.update(answer_in_text(rows), failure_modes=_failure_modes(answerable, rows),
                   unanswerable=_said(done[r.id] for r in records if not r.answerable))
    summary.update(gold_positions=cfg.gold_positions, wall_time_s=round(time.perf_counter() - started, 3),
                   resumed_questions=len(records) - len(todo), **_cache_summary(cache),
                   note=("invariant variant: one run per row stands for every gold position" if one_run else
                         "every asked gold position run; majority = the most generated answer over them"))
    store.write_json(out / store.SUMMARY_FILE, summary)
    return summary


def answer_in_text(rows: Sequence[dict]) -> dict:
    """The share (%) of answers holding the gold string, over every run of every row and at
    the first asked position (exact match's ``single``)."""
    runs = [h for row in rows for h in row["holds"]]
    return {"answer_in_text": {"single": round(100.0 * sum(row["holds"][0] for row in rows) / len(rows), 4),
                               "random": round(100.0 * sum(runs) / len(runs), 4)}}


def _failure_modes(records: Sequence[docs.DocRecord], rows: Sequence[dict]) -> dict:
    """:func:`docs.failure_modes` of each ordering slot the rows ran (the first asked gold
    position, the second, ...), and their mean: a reading that collapses in one order only
    shows it there."""
    slots = min(len(row["generated"]) for row in rows)
    per = [docs.failure_modes([(r, row["generated"][i]) for r, row in zip(records, rows)]) for i in range(slots)]
    keys = rows[0]["positions"][:slots]
    return {"by_gold_position": dict(zip(keys, per)), "mean": {k: round(sum(p[k] for p in per) / slots, 3) for k in per[0]}}


def _said(rows) -> dict:
    """How the reader answered the questions no document answers."""
    said = [row["said"] for row in rows]
    return {"n": len(said), **{k: said.count(k) for k in ("empty", "abstains", "from_a_document", "other")}}


def unanswerable_rows(lm, records: Sequence[docs.DocRecord]) -> list[dict]:
    """Questions no document answers, each answered once in the data's order."""
    asked = [verbs.answer(list(r.documents), r.question, EXTRA_TOKENS * 4) for r in records]
    texts = lm.generate_many([a.prompt for a in asked], asked[0].config)
    return [{"id": r.id, "answerable": False, "generated": [a.text(t)], "said": docs.unanswered_kind(a.text(t), r.documents)}
            for r, a, t in zip(records, asked, texts)]


def _cache_summary(cache) -> dict:
    """What the document cache did in this run (the cache lives with the model: counts since it was made)."""
    if cache is None:
        return {}
    s = cache.stats()
    return {"document_cache": {"hits": s.hits, "misses": s.misses, "evictions": s.evictions, "bytes": s.bytes,
                               "reused_tokens": s.reused_tokens, "computed_tokens": s.computed_tokens,
                               "computed_s": round(s.computed_s, 3), "saved_s_estimate": round(s.saved_s, 3),
                               **({"disk_hits": s.disk_hits, "disk_writes": s.disk_writes, "disk_refused": s.disk_refused,
                                   "disk_bytes": s.disk_bytes} if cache.disk is not None else {})}}


def _common_keys(rows: Sequence[dict]) -> list[str]:
    """Without ``--gold-positions``: the positions every row has (rows may differ in k)."""
    k = min(row["n_documents"] for row in rows)
    return [str(i) for i in range(k)]


def evaluate_rows(lm, records: Sequence[docs.DocRecord], positions: list[int] | None, one_run: bool, cfg: EvalConfig) -> list[dict]:
    """One finished prediction row per record."""
    items = []
    for r in records:
        due = docs.row_positions(r, positions)
        items += [(r, "*", tuple(range(len(r.documents))))] if one_run else [(r, key, order) for key, order in due]
    results = []
    for lo in range(0, len(items), lm.batch_size):
        results += answer_batch(lm, items[lo : lo + lm.batch_size])
    by_id: dict[str, list] = {}
    for (r, key, order), res in zip(items, results):
        by_id.setdefault(r.id, []).append((key, order, *res))
    return [_row(r, by_id[r.id], one_run, cfg) for r in records]


def answer_batch(lm, items: list[tuple[docs.DocRecord, str, tuple[int, ...]]]) -> list[tuple[str, float, float, float]]:
    """Generate (greedy, up to a newline) and score the gold answer for a batch of (record,
    key, ordering): ``(generated text, answer log-likelihood, seconds, peak MB)`` each. The
    answer is scored by the one scoring driver, as ``lm.score`` scores it anywhere."""
    prompts = [docs.render(r, order) for r, _, order in items]
    longest = max(len(lm.response_ids(p, r.answer)) for p, (r, _, _) in zip(prompts, items))
    # SetLLM.answer's request, its documents in the run's order: the same prompt, stop and strip
    asked = [verbs.answer([r.documents[i] for i in order], r.question, longest + EXTRA_TOKENS) for r, _, order in items]
    device = lm.model.device
    reset_peak_memory(device)
    start = time.perf_counter()
    texts = lm.generate_many([a.prompt for a in asked], asked[0].config)
    logps = [s[0].logprob for s in lm.score_many(prompts, [[r.answer] for r, _, _ in items])]
    seconds = (time.perf_counter() - start) / len(items)
    peak = peak_memory_mb(device)
    return [(a.text(t), lp, seconds, peak) for a, t, lp in zip(asked, texts, logps)]


def _row(record: docs.DocRecord, runs: list, one_run: bool, cfg: EvalConfig) -> dict:
    keys, orders, texts, logps, secs, peaks = (list(x) for x in zip(*runs))
    predictions = [docs.normalise(t) for t in texts]
    label = docs.normalise(record.answer)
    pick, votes = majority_vote(QuestionResult(record.id, label, tuple(orders), tuple(predictions)), cfg.seed)
    return {
        "id": record.id, "label": label, "answer": record.answer, "gold": record.gold, "n_documents": len(record.documents),
        "plan": "all", "one_run": one_run, "positions": keys, "orderings": [list(o) for o in orders],
        "generated": texts, "predictions": predictions, "correct": [p == label for p in predictions],
        "holds": [docs.holds_answer(t, record.answer) for t in texts],
        "answer_logprob": logps, "votes": votes, "majority": pick,
        "logprobs": [logps[0]], "max_logprob_diff": max(abs(x - logps[0]) for x in logps) if len(logps) > 1 else None,
        "time_s": [round(s, 6) for s in secs], "peak_mb": [round(p, 1) for p in peaks],
    }
