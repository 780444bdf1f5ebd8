"""``accelerate launch --num_processes 2 ... setllm eval``: questions sharded over two ranks
(gloo on CPU), gathered on rank 0; the run equals a one-process run and resumes across a
change in the number of processes (``predictions.jsonl`` is the record of what is done).

Each 2-process job is a real launch (``launcher.launch``: a subprocess, rendezvous on
127.0.0.1 at a free port); the one-process runs go through the same command line in this process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from launcher import launch
from tiny import saved, sharp_model

from setllm.cli import main
from setllm.errors import InputError
from setllm.evaluation.runner import sharded
from setllm.io import rundir

FIXTURES = Path(__file__).parents[1] / "fixtures" / "eval"
# An order-sensitive model under 6 orderings a question: predictions that differ by ordering.
# 8 prompts a forward = one question a chunk: 6 chunks dealt to the ranks in 3 rounds.
FLAGS = ["--dataset", "arc_challenge", "--data-dir", str(FIXTURES), "--adapter", "none", "--variant", "causal-pe",
         "--max-orderings", "6", "--batch-size", "8", "--no-progress"]
# What can differ between two runs of the same questions: timing, memory, when, how.
VOLATILE_SUMMARY = {"runtime_s", "peak_memory_mb", "wall_time_s", "finished", "memory_measure", "resumed_questions", "processes"}
VOLATILE_ROW = {"time_s", "peak_mb"}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    return saved(sharp_model(), tmp_path_factory.mktemp("sharp"))


@pytest.fixture(scope="module")
def reference(model, tmp_path_factory) -> Path:
    """All six questions in one process."""
    out = tmp_path_factory.mktemp("one")
    assert main(["eval", *FLAGS, "--model", model, "--out", str(out)]) == 0
    return out


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def rows(out: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k not in VOLATILE_ROW} for line in (out / "predictions.jsonl").read_text().splitlines()]


def stable(s: dict) -> dict:
    return {k: v for k, v in s.items() if k not in VOLATILE_SUMMARY}


@pytest.mark.multiprocess
def test_two_processes_give_the_one_process_run_and_one_can_finish_it(model, reference, tmp_path):
    res = launch(2, "eval", *FLAGS, "--model", model, "--limit", "4", "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr[-3000:]
    assert len([line for line in res.stdout.splitlines() if line.startswith("arc_challenge")]) == 1  # rank 0 reports
    two = summary(tmp_path)
    assert two["processes"] == 2 and two["n"] == 4 and two["ids"] == summary(reference)["ids"][:4]
    assert rows(tmp_path) == rows(reference)[:4]  # same predictions, log-likelihoods, order
    assert sum(r["predictions"] != [r["predictions"][0]] * len(r["predictions"]) for r in rows(tmp_path)) > 0  # orderings matter

    # One process finishes what two started: the last two questions only.
    assert main(["eval", *FLAGS, "--model", model, "--out", str(tmp_path)]) == 0
    done = summary(tmp_path)
    assert done["processes"] == 1 and done["resumed_questions"] == 4
    assert stable(done) == stable(summary(reference)) and rows(tmp_path) == rows(reference)


@pytest.mark.multiprocess
def test_two_processes_finish_what_one_started(model, reference, tmp_path):
    assert main(["eval", *FLAGS, "--model", model, "--limit", "1", "--out", str(tmp_path)]) == 0
    res = launch(2, "eval", *FLAGS, "--model", model, "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr[-3000:]
    s = summary(tmp_path)
    assert s["processes"] == 2 and s["resumed_questions"] == 1
    assert stable(s) == stable(summary(reference)) and rows(tmp_path) == rows(reference)
    assert not list(tmp_path.glob("*.tmp"))


class Scripted(rundir.World):
    """Rank ``rank`` of ``size``; each gather answers the other ranks from ``others[r]``, a
    list of their values round by round."""

    def __init__(self, rank: int, size: int, others: dict[int, list]):
        for name, value in (("rank", rank), ("size", size), ("local_rank", rank), ("others", {r: iter(v) for r, v in others.items()})):
            object.__setattr__(self, name, value)

    def all_gather(self, obj):
        return [obj if r == self.rank else next(self.others[r]) for r in range(self.size)]


def test_sharding_deals_chunks_round_robin_and_keeps_one_process_order():
    chunks = [[{"id": i}] for i in range(5)]
    seen = []

    def evaluate(chunk):
        seen.append(chunk[0]["id"])
        return chunk

    # Rank 1 of 2 scores chunks 1 and 3; rank 0's rows (0, 2, 4) come from the gather.
    world = Scripted(1, 2, {0: [([{"id": 0}], None), ([{"id": 2}], None), ([{"id": 4}], None)]})
    got = [[r["id"] for r in rows] for rows in sharded(world, chunks, evaluate)]
    assert seen == [1, 3] and got == [[0, 1], [2, 3], [4]]
    # One process: every chunk, in order, with no collective.
    seen.clear()
    assert [[r["id"] for r in rows] for rows in sharded(rundir.World(), chunks, evaluate)] == [[i] for i in range(5)]


def test_a_user_error_on_one_rank_stops_every_rank():
    def fails(chunk):
        raise InputError("question q1: too long")

    # The rank that failed raises its own error; the others raise it as one line naming the rank.
    with pytest.raises(InputError, match="too long"):
        list(sharded(Scripted(0, 2, {1: [([], None)]}), [[1], [2]], fails))
    with pytest.raises(InputError, match="rank 1: question q1: too long"):
        list(sharded(Scripted(0, 2, {1: [([], "rank 1: question q1: too long")]}), [[1], [2]], lambda c: c))
