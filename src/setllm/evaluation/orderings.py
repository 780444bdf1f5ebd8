"""Which orderings of a question's options an evaluation tests.

An ordering is a tuple ``perm`` of option indices: the options are shown as
``[choices[i] for i in perm]``, and a pick at position ``p`` means option ``perm[p]``.
The dataset's own order (the identity) is always tested first, so the first tested
ordering is the ``single`` run.

All ``k!`` orderings are tested unless ``cap`` is smaller. Then ``choice`` says which:

* ``random`` (default): the identity plus ``cap - 1`` other orderings drawn without
  replacement by ``random.Random(f"{seed}:{key}")``, ``key`` being the question id, so every
  question gets its own sample, reproducible whatever subset or order questions run in.
* ``first``: the first ``cap`` orderings in lexicographic order (``itertools.permutations``).
  This is what the paper did for CommonsenseQA (the first 24 of 120). Note that with
  ``cap <= (k-1)!`` these all keep option 0 in first place.
"""

from __future__ import annotations

import itertools
import math
import random

from ..errors import InputError
from ..tasks.base import Ordering

ORDERING_CHOICES = ("random", "first")
# Up to this many permutations, sample from the full list (exact, fast); above, reject duplicates.
_ENUMERATE_UP_TO = 40320  # 8!


def dataset_order(k: int) -> Ordering:
    return tuple(range(k))


def count_orderings(k: int, cap: int | None = None) -> int:
    """How many orderings of ``k`` options are tested under ``cap``."""
    total = math.factorial(k)
    return total if cap is None else min(total, cap)


def orderings(k: int, cap: int | None = None, choice: str = "random", seed: int = 0, key: str = "") -> list[Ordering]:
    """The orderings tested for a question with ``k`` options, identity first."""
    if k < 1:
        raise InputError(f"a question needs at least one option, got k={k}")
    if cap is not None and cap < 1:
        raise InputError(f"the ordering cap must be at least 1, got {cap}")
    if choice not in ORDERING_CHOICES:
        raise InputError(f"unknown ordering choice {choice!r}; choose one of: {', '.join(ORDERING_CHOICES)}")
    n = count_orderings(k, cap)
    if n == math.factorial(k) or choice == "first":
        return list(itertools.islice(itertools.permutations(range(k)), n))
    return [dataset_order(k)] + _sample_others(k, n - 1, random.Random(f"{seed}:{key}"))


def _sample_others(k: int, n: int, rng: random.Random) -> list[Ordering]:
    """``n`` distinct non-identity orderings of ``k`` options."""
    if math.factorial(k) <= _ENUMERATE_UP_TO:
        others = list(itertools.permutations(range(k)))[1:]
        return rng.sample(others, n)
    picked: list[Ordering] = []
    seen = {dataset_order(k)}
    while len(picked) < n:  # k! > 40320 >> n in practice: duplicates are rare
        perm = list(range(k))
        rng.shuffle(perm)
        if tuple(perm) not in seen:
            seen.add(tuple(perm))
            picked.append(tuple(perm))
    return picked
