"""What every generator's flags have in common: how many rows, the seed, where to write;
checked alike, so each generator adds only its own fields and checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..io.records import DataError


@dataclass
class GeneratorConfig:
    """The flags of one ``setllm data`` generator (a subclass adds its own fields and
    :meth:`check`). ``n`` may be 0 where a generator reads 0 as "all" (``min_n``)."""

    n: int = field(default=500, metadata={"help": "questions to generate", "metavar": "N"})
    seed: int = field(default=0, metadata={"help": "random seed (same seed, same file)", "metavar": "S"})
    out: str = field(default="", metadata={"help": "output JSONL file (required)", "metavar": "FILE"})

    min_n = 1

    def __post_init__(self) -> None:
        if self.n < self.min_n:
            raise DataError(f"--n must be at least {self.min_n}{' (0: all)' if self.min_n == 0 else ''}, got {self.n}")
        self.check()
        if not self.out:
            raise DataError("no output file: pass --out FILE.jsonl")

    def check(self) -> None:
        """The generator's own checks (a :class:`DataError` naming the flag)."""


def at_least(**values: tuple[int, int]) -> None:
    """``flag=(value, lowest)`` for each flag: a :class:`DataError` for the first too small."""
    for name, (value, low) in values.items():
        if value < low:
            raise DataError(f"--{name.replace('_', '-')} must be at least {low}, got {value}")
