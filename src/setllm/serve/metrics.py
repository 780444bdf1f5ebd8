"""Counters and histograms for ``GET /metrics``, in the Prometheus text format (0.0.4),
written by hand: a few numbers do not need a dependency.

Updated from the event loop (requests) and the model thread (batches), hence the lock.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


class Histogram:
    """Cumulative buckets, sum and count (one label set)."""

    def __init__(self, buckets: Sequence[float]):
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)  # last: above every bucket
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value

    def lines(self, name: str, labels: str = "") -> list[str]:
        out, total = [], 0
        sep = "," if labels else ""
        for bound, n in zip([*map(_num, self.buckets), "+Inf"], self.counts):
            total += n
            out.append(f'{name}_bucket{{{labels}{sep}le="{bound}"}} {total}')
        braces = f"{{{labels}}}" if labels else ""
        return [*out, f"{name}_sum{braces} {self.sum:.6f}", f"{name}_count{braces} {total}"]


class Metrics:
    """What the server counts: requests by endpoint and status, their latency, the size of
    each forward's batch."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        self.latency: dict[str, Histogram] = {}
        self.batch_sizes = Histogram(BATCH_BUCKETS)

    def observe_request(self, endpoint: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(endpoint, status)] += 1
            self.latency.setdefault(endpoint, Histogram(LATENCY_BUCKETS)).observe(seconds)

    def observe_batch(self, size: int) -> None:
        with self._lock:
            self.batch_sizes.observe(size)

    def render(self, gauges: dict[str, tuple[str, Callable[[], float]]]) -> str:
        """The exposition text; ``gauges`` maps name -> (help, current value)."""
        with self._lock:
            lines = _header("setllm_requests_total", "counter", "Requests answered, by endpoint and HTTP status.")
            lines += [f'setllm_requests_total{{endpoint="{_esc(e)}",status="{s}"}} {n}' for (e, s), n in sorted(self.requests.items())]
            lines += _header("setllm_request_duration_seconds", "histogram", "Time from request to response, by endpoint.")
            for endpoint, hist in sorted(self.latency.items()):
                lines += hist.lines("setllm_request_duration_seconds", f'endpoint="{_esc(endpoint)}"')
            lines += _header("setllm_batch_size", "histogram", "Requests per forward pass on the model.")
            lines += self.batch_sizes.lines("setllm_batch_size")
        for name, (help_, value) in gauges.items():
            lines += [*_header(name, "gauge", help_), f"{name} {_num(value())}"]
        return "\n".join(lines) + "\n"


def _header(name: str, kind: str, help_: str) -> list[str]:
    return [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _esc(label: str) -> str:
    return label.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
