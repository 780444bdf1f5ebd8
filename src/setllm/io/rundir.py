"""A run directory (``setllm eval --out``, ``setllm train --out``): created and checked
writable before any work, and locked for the run so that two jobs never write one.

Under ``accelerate launch`` / ``torchrun`` one job is N processes (ranks). Rank 0 is the
only writer: it alone takes the lock, and what it finds (the lock held by another job) is
told to every rank, so all of them stop with the same one-line error instead of the others
waiting forever at their first collective. :class:`World` is that "who am I, tell the
others" in one place, with the same methods for one process (where they do nothing).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError

LOCK_FILE = ".lock"


@dataclass(frozen=True)
class World:
    """This process's rank among ``size`` processes of one job (``size`` 1: no job around it)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def current(cls) -> World:
        """From ``torch.distributed`` if a process group is up, else from the launcher's
        ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` (1 process when they are unset)."""
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size(), _env_int("LOCAL_RANK", dist.get_rank()))
        return cls(_env_int("RANK", 0), _env_int("WORLD_SIZE", 1), _env_int("LOCAL_RANK", 0))

    @classmethod
    def start(cls, cpu: bool | None = None) -> World:
        """:meth:`current`, with the process group brought up first when a launcher started
        several processes and nothing has yet (accelerate's ``PartialState``: gloo on CPU,
        nccl on CUDA; the Trainer uses the same state)."""
        world = cls.current()
        if world.size > 1:
            import torch
            import torch.distributed as dist

            if not dist.is_initialized():
                from accelerate import PartialState

                PartialState(cpu=not torch.cuda.is_available() if cpu is None else cpu)
            world = cls.current()
        return world

    def device(self, asked: str | None, cuda_available: bool) -> str | None:
        """The device this rank runs on: with several ranks, ``cuda`` (or nothing, where
        there are GPUs) means this rank's own GPU, ``cuda:LOCAL_RANK``, not all on GPU 0.
        A device with an index, or one process, keeps what was asked (None: the default)."""
        if self.size > 1 and (asked == "cuda" or (asked is None and cuda_available)):
            return f"cuda:{self.local_rank}"
        return asked

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank (a collective: all ranks call it)."""
        if self.size == 1:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def from_main(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (a collective)."""
        if self.size == 1:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def agree(self, error: str | None) -> None:
        """Raise on every rank if any rank met a (user) error: the first one, by rank."""
        errors = [e for e in self.all_gather(error) if e]
        if errors:
            raise InputError(errors[0])

    def barrier(self) -> None:
        if self.size > 1:
            import torch.distributed as dist

            dist.barrier()


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        raise InputError(f"environment variable {name}={os.environ[name]!r} is not an integer (set by the launcher)") from None


def prepare_dir(out: str | Path) -> Path:
    """``--out`` created if need be, and writable, or one line saying why not."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"--out {out}: cannot create it ({e.strerror})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise InputError(f"--out {out}: not writable")
    return out


@contextmanager
def locked(out: Path, world: World | None = None) -> Iterator[None]:
    """Hold ``out``'s lock for the run: a second job writing the same ``--out`` is refused
    instead of interleaving its predictions with ours. With several ranks only rank 0
    locks (the ranks of one job are one writer); every rank learns whether it could."""
    world = world or World.start()
    f, error = None, None
    if world.is_main:
        f = (out / LOCK_FILE).open("a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            f, error = None, f"--out {out}: another setllm process is writing there (lock {out / LOCK_FILE})"
    world.agree(error)
    try:
        yield
    finally:
        if f is not None:
            f.close()  # closing releases the lock


@contextmanager
def claimed(out: str | Path, world: World | None = None) -> Iterator[Path]:
    """:func:`prepare_dir` then :func:`locked`, yielding the directory. A run that stops on an
    error before writing anything (bad data, a model that does not load) leaves no trace of
    an ``--out`` it created: otherwise an empty folder with a stale ``.lock`` looks like a run
    to resume. A directory that existed before, or holds anything else, is left as it is."""
    out = Path(out)
    created = not out.exists()
    out = prepare_dir(out)
    world = world or World.start()
    with locked(out, world):
        try:
            yield out
        except BaseException:
            if created and world.is_main:
                _remove_if_untouched(out)
            raise


def _remove_if_untouched(out: Path) -> None:
    if [p.name for p in out.iterdir()] == [LOCK_FILE]:
        (out / LOCK_FILE).unlink()
        out.rmdir()
