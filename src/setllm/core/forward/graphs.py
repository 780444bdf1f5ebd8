"""CUDA graphs for scoring's packed prefill: capture a forward once per fixed shape, replay it after.

On a GPU a short forward costs its kernel launches (hundreds per layer stack), not its
arithmetic. A CUDA graph records the kernels of one forward once and replays them with one
launch. Scoring's packed prefill (:func:`setllm.core.forward.scoring.packed_forward` on a fresh
cache) already has fixed shapes: its tokens are padded to whole row blocks, its attention
blocks to buckets, so the same shapes repeat across calls, and each repeat replays a graph.

One switch, off by default: :func:`enable` (``LoadOptions.cuda_graphs``, ``--cuda-graphs``),
refused on a model that is not on CUDA. Without it nothing here runs.

How a replay is made (:class:`Graphs`):

- the *inputs* of a forward are every tensor it reads that a call changes: the packed token
  ids, positions and kept rows, and the attention plan's device tensors (gather indices,
  masks), made on the device before the forward (:func:`setllm.core.attention.packed_attention.prime`)
  so the captured forward makes none;
- the *key* of a graph is the shapes and dtypes of those inputs, and the model's active
  adapters: two forwards of one key run the same Python, so the same kernels on the same
  shapes;
- at most :data:`MOST_GRAPHS` graphs are kept per model (each holds its buffers in GPU
  memory), the least recently replayed dropped first; a capture costs a few uncaptured
  forwards (warm-up and capture), so the switch pays where shapes repeat;
- the first forward of a key copies its inputs into *static* buffers, and the graph is
  captured reading those; a later forward of the key copies its inputs into the same buffers
  and replays. The outputs (logits, the KV cache's keys and values) live in the graph's own
  memory, which the next replay overwrites: they are cloned out before they are returned.

Same bits as uncaptured: a replay launches the very kernels the uncaptured forward of that
shape launches, on the same shapes and on the same values (copied into the buffers), so it
computes the same bits; setllm's fixed-row linears and per-request attention make those bits
the request's own, whatever else shares the forward, as uncaptured (:mod:`setllm.core.forward.scoring`).
What a graph cannot keep is anything the Python of the forward decides from values rather
than shapes: the forward reads none (the plan's device tensors are made before it, which
:meth:`Graphs.run` checks: a forward that makes one is refused, not captured).

The CPU has no graphs. Its tests run the same code with :class:`EagerRunner`, a stand-in
that "replays" by calling the captured function again on the static buffers and writing its
results into the same output buffers: the copying in, the keys, the reuse of an entry and the
cloning out are the code that runs on CUDA.

Not captured: forwards on an existing cache (option rows after the first
:data:`setllm.core.forward.scoring.OPTION_TOKENS`), prompts on flex attention, and decoding, whose
DynamicCache grows every step (it needs a static cache of a fixed length first).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ...errors import InputError
from ..model.owner import owner

Fn = Callable[[list[torch.Tensor]], list[torch.Tensor]]


class EagerRunner:
    """The CPU's stand-in for a CUDA graph: ``capture`` runs ``fn`` on the static buffers and
    keeps its outputs as the graph's output buffers; ``replay`` runs it again on the same
    buffers and writes the results into them, as a graph's replay does."""

    def capture(self, fn: Fn, static: list[torch.Tensor]) -> tuple[Callable[[], None], list[torch.Tensor]]:
        outputs = fn(static)

        def replay():
            for buffer, value in zip(outputs, fn(static)):
                buffer.copy_(value)

        return replay, outputs


class CUDARunner:
    """``torch.cuda.CUDAGraph``: warm up on a side stream (as PyTorch's docs ask: lazy
    initialisations happen outside the capture), then capture ``fn`` on the static buffers."""

    def __init__(self, warmup: int = 2):
        self.warmup = warmup
        self.pool = None  # one memory pool for every graph of the model

    def capture(self, fn: Fn, static: list[torch.Tensor]) -> tuple[Callable[[], None], list[torch.Tensor]]:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(self.warmup):
                fn(static)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            outputs = fn(static)
        self.pool = graph.pool()
        return graph.replay, outputs


# Graphs kept per model: each holds its buffers (inputs, logits, KV cache) in GPU memory, and
# shapes that do not repeat would otherwise pile up; the least recently replayed goes first.
MOST_GRAPHS = 64


@dataclass
class _Entry:
    static: list[torch.Tensor]
    replay: Callable[[], None]
    outputs: list[torch.Tensor]
    replays: int = 0


class Graphs:
    """Captured forwards of one model, one per key (see the module docstring). Calls on several
    threads take turns: an entry's buffers are shared."""

    def __init__(self, runner=None, most: int = MOST_GRAPHS):
        self.runner = runner if runner is not None else CUDARunner()
        self.entries: OrderedDict[tuple, _Entry] = OrderedDict()  # least recently replayed first
        self.most = most
        self.lock = threading.Lock()

    def run(self, key: tuple, inputs: Sequence[torch.Tensor], fn: Fn) -> list[torch.Tensor]:
        """``fn(inputs)`` by a graph of ``key`` (``key`` plus the inputs' shapes and dtypes):
        captured on the first call of the key, replayed after. ``fn`` must read the values a
        call changes only from the buffers it is given. The outputs are the caller's (cloned)."""
        key = (key, tuple((tuple(x.shape), x.dtype, x.device) for x in inputs))
        with self.lock:
            entry = self.entries.get(key)
            if entry is None:
                static = [x.clone() for x in inputs]
                replay, outputs = self.runner.capture(fn, static)
                entry = self.entries[key] = _Entry(static, replay, outputs)
                while len(self.entries) > self.most:  # the least recently replayed goes, with its buffers
                    self.entries.popitem(last=False)
            self.entries.move_to_end(key)
            for buffer, x in zip(entry.static, inputs):
                buffer.copy_(x)
            entry.replay()
            entry.replays += 1
            return [o.clone() for o in entry.outputs]


def enable(model, runner=None) -> Graphs:
    """Capture ``model``'s scoring forwards in CUDA graphs from now on (installed once, when the
    model is loaded, as :mod:`setllm.core.model.install` installs the linears). Refused on a model not
    on CUDA unless a ``runner`` is given (tests: :class:`EagerRunner`)."""
    if runner is None and model.device.type != "cuda":
        raise InputError(f"cuda_graphs needs a model on CUDA; this one is on {model.device.type} (leave cuda_graphs off)")
    graphs = owner(model).graphs = Graphs(runner)
    return graphs


def disable(model) -> None:
    owner(model).graphs = None


def of(model) -> Graphs | None:
    """The model's :class:`Graphs`, or None when the switch is off."""
    return owner(model).graphs

