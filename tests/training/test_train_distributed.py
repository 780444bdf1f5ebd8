"""``accelerate launch --num_processes 2 ... setllm train``: data-parallel training on CPU (gloo)
equals one process with the same global batch; rank 0 alone writes ``--out``.

The 2-process job is a real launch (``launcher.launch``: a subprocess, rendezvous on 127.0.0.1
at a free port); the one-process reference runs in this process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from launcher import launch
from safetensors.torch import load_file
from tiny import saved, tiny_model

from setllm.io import rundir
from setllm.training import TrainConfig, train

FIXTURES = Path(__file__).parents[1] / "fixtures" / "train"
STEPS = 3
# 12 examples of two lengths' worth of benchmarks; 2 x 2 per step = the one-process batch of 4.
ARGS = ["--data", "arc_challenge,piqa", "--data-dir", str(FIXTURES), "--max-steps", str(STEPS), "--lr", "1e-2", "--lora-alpha", "16",
        "--logging-steps", "1", "--save-steps", str(STEPS), "--no-progress"]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> str:
    return saved(tiny_model(), tmp_path_factory.mktemp("base"))


def log_rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


@pytest.mark.multiprocess
def test_two_processes_train_like_one_with_the_same_global_batch(base, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    flags = dict(data="arc_challenge,piqa", data_dir=str(FIXTURES), model=base, max_steps=STEPS, learning_rate=1e-2, lora_alpha=16,
                 logging_steps=1, save_steps=STEPS, disable_tqdm=True)
    ref = train(TrainConfig(output_dir=str(one), per_device_train_batch_size=4, **flags))
    res = launch(2, "train", *ARGS, "--model", base, "--batch-size", "2", "--out", str(two))
    assert res.returncode == 0, res.stderr[-3000:]

    ref_log, log = log_rows(one), log_rows(two)
    losses = [r["loss"] for r in log if "loss" in r]
    ref_losses = [r["loss"] for r in ref_log if "loss" in r]
    assert len(losses) == len(ref_losses) == STEPS
    assert max(abs(a - b) for a, b in zip(losses, ref_losses)) < 1e-4, (losses, ref_losses)
    assert {r["world_size"] for r in log} == {2} and {r["world_size"] for r in ref_log} == {1}
    # Tokens are counted over both ranks: the same examples were trained on.
    assert [r["tokens"] for r in log if "tokens" in r] == [r["tokens"] for r in ref_log if "tokens" in r]

    # One adapter, written once, equal to the one-process adapter.
    a, b = load_file(one / "adapter_model.safetensors"), load_file(two / "adapter_model.safetensors")
    assert a.keys() == b.keys() and max((a[k] - b[k]).abs().max().item() for k in a) < 1e-4
    info = json.loads((two / "setllm.json").read_text())
    assert info["training"]["steps"] == STEPS and info["training"]["tokens"] == ref.tokens
    results = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert len(results) == 1 and results[0]["steps"] == STEPS  # one result line, from rank 0
    assert sorted(p.name for p in (two / f"checkpoint-{STEPS}").glob("rng_state*")) == ["rng_state_0.pth", "rng_state_1.pth"]


@pytest.mark.multiprocess
def test_a_held_out_dir_stops_every_rank_with_one_line(base, tmp_path):
    """Rank 0 finds --out locked by another job: every rank stops (none waits at a collective)."""
    out = rundir.prepare_dir(tmp_path / "busy")
    with rundir.locked(out):
        res = launch(2, "train", *ARGS, "--model", base, "--batch-size", "2", "--out", str(out), timeout=90)
    assert res.returncode != 0
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert errors and all("another setllm process is writing there" in e for e in errors), res.stderr[-2000:]
    assert not (out / "train_log.jsonl").exists()


class FakeGroup(rundir.World):
    """Rank ``rank`` of ``size`` whose gathers answer the other ranks from ``others`` (no processes)."""

    def __init__(self, rank: int, size: int, others: list):
        for name, value in (("rank", rank), ("size", size), ("local_rank", rank), ("others", others)):
            object.__setattr__(self, name, value)

    def all_gather(self, obj):
        return [obj if r == self.rank else self.others[r] for r in range(self.size)]


def test_only_rank_zero_takes_the_lock(tmp_path):
    out = rundir.prepare_dir(tmp_path)
    with rundir.locked(out):  # another job holds it
        with rundir.locked(out, FakeGroup(1, 2, [None, None])):
            pass  # rank 1 does not touch the lock when rank 0 got it
        with pytest.raises(Exception, match="another setllm process"):
            with rundir.locked(out, FakeGroup(1, 2, ["--out x: another setllm process is writing there", None])):
                pass  # ... and stops when rank 0 says it could not
        with pytest.raises(Exception, match="another setllm process"):
            with rundir.locked(out, FakeGroup(0, 2, [None, None])):
                pass


def test_each_rank_gets_its_own_gpu_only_when_there_are_several():
    rank1 = rundir.World(1, 2, 1)
    assert rank1.device(None, cuda_available=True) == rank1.device("cuda", cuda_available=True) == "cuda:1"
    assert rank1.device(None, cuda_available=False) is None and rank1.device("cpu", cuda_available=True) == "cpu"
    assert rank1.device("cuda:0", cuda_available=True) == "cuda:0"  # an explicit index is kept
    assert rundir.World().device(None, cuda_available=True) is None  # one process: the usual default
    assert rundir.World().device("cuda", cuda_available=True) == "cuda"


def test_world_from_the_launcher_environment(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert rundir.World.current() == rundir.World(3, 4, 1)
    monkeypatch.setenv("WORLD_SIZE", "four")
    with pytest.raises(Exception, match="WORLD_SIZE"):
        rundir.World.current()
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name)
    assert rundir.World.current() == rundir.World() and torch.distributed.is_available()
