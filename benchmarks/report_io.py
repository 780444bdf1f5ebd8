"""What every benchmark script does with its result: print it, and keep it as JSON on request."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence


def emit(report, json_path: str | None) -> None:
    """Print ``report`` as indented JSON; also write it to ``json_path`` if one was given."""
    text = json.dumps(report, indent=2)
    print(text)
    if json_path:
        with open(json_path, "w") as f:
            f.write(text)


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """The mean and its standard error (sample standard deviation / sqrt(n)), as every table
    here prints ``mean ± se``; a difference question by question gives the paired one."""
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((x - mean) ** 2 for x in values) / (len(values) - 1) / len(values))
