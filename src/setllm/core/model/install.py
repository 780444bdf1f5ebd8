"""What setllm installs on a model, once, and how each call selects it: no call changes the model.

Installed when a model is wrapped (:func:`install`, idempotent):

- every linear layer (``nn.Linear``; gpt2's ``Conv1D``) gets a forward that reads the call's
  :class:`RowPlan`: with none it is the layer's own forward, unchanged; with one it multiplies
  its input as blocks of exactly the plan's rows (:func:`blocked_linear`);
- the model's attention becomes ``setllm:<its own>`` (``setllm:sdpa``, ``setllm:eager``, ...),
  registered in transformers' ``AttentionInterface`` with the mask function of its own
  implementation: with no attention chosen by the call it is that implementation, exactly;
  a call picks another (packed attention, flex for a long prompt, sdpa for steps on a flex
  prefill) through :func:`attention`.

A call's choices live in ``ContextVar`` s, which belong to the thread (and task) that set
them: two threads running calls on one model each see their own plan, and a user's own code
calling the model sees it as transformers built it.

Shapes: M rows, R the plan's rows per block, in/out the layer's widths.
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .owner import owner, weights

PREFIX = "setllm:"


@dataclass(frozen=True)
class RowPlan:
    """The fixed row blocks of one call's linear layers: ``rows`` for every layer, ``head_rows``
    for the output ``head`` (the module, compared by identity)."""

    rows: int
    head_rows: int
    head: object


_ROWS: contextvars.ContextVar[RowPlan | None] = contextvars.ContextVar("setllm_rows", default=None)
# The call's attention: a function with transformers' attention signature, or None (the model's own).
_ATTENTION: contextvars.ContextVar[Callable | None] = contextvars.ContextVar("setllm_attention", default=None)


def install(model) -> None:
    """Install setllm's linear layers and attention on ``model`` (a PEFT wrapper or a
    transformers model), once; a model already installed is left as it is. (A model whose
    attention implementation its owner switched after it was wrapped is installed again.)"""
    base, state = weights(model), owner(model)
    if state.installed and base.config._attn_implementation.startswith(PREFIX):
        return  # installed (checked without the lock: calls pass here)
    with state.lock:
        from transformers.pytorch_utils import Conv1D

        for m in base.modules():
            if isinstance(m, (torch.nn.Linear, Conv1D)) and "forward" not in m.__dict__:
                m.forward = types.MethodType(_planned_forward, m)
        own = base.config._attn_implementation
        if not own.startswith(PREFIX):  # also after a caller switched the model's own implementation
            base.set_attn_implementation(register(own))
        state.installed = True


def own_attention(config) -> str:
    """The attention implementation the model was loaded with (``sdpa`` for ``setllm:sdpa``)."""
    return getattr(config, "_attn_implementation", None) and config._attn_implementation.removeprefix(PREFIX) or "sdpa"


def register(own: str) -> str:
    """``setllm:<own>``: ``own`` unless the call chose another, with ``own``'s masks."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    name = PREFIX + own
    if name not in ALL_ATTENTION_FUNCTIONS._global_mapping:
        AttentionInterface.register(name, _dispatching(_named(own)))
        if own in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
            AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[own])
    return name


def _dispatching(own: Callable):
    def dispatch(module, *args, **kwargs):
        chosen = _ATTENTION.get()
        return (own if chosen is None else chosen)(module, *args, **kwargs)

    return dispatch


def _model_eager(module):
    """The eager attention function of ``module``'s model file (transformers defines one per model)."""
    import sys

    return sys.modules[type(module).__module__].eager_attention_forward


@contextmanager
def call_context(var: contextvars.ContextVar, value):
    """Inside (this thread or task only), ``var`` holds ``value``: how a call selects what it runs."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def attention(fn: Callable | str | None):
    """Inside (this thread or task only), the model's attention runs ``fn`` (a function or the
    name of a transformers implementation; None: the model's own)."""
    return call_context(_ATTENTION, _named(fn) if isinstance(fn, str) else fn)


@contextmanager
def planned_attention(model, fn: Callable, plan_var: contextvars.ContextVar, plan):
    """Inside (this thread only), ``model``'s attention runs ``fn``, which reads ``plan`` from
    ``plan_var``; the model itself is not changed (setllm is installed on it once)."""
    install(model)
    with call_context(plan_var, plan), attention(fn):
        yield


def _named(name: str) -> Callable:
    """The attention function of transformers implementation ``name``."""
    if name == "eager":  # no global one: each model file defines its own
        return lambda module, *a, **k: _model_eager(module)(module, *a, **k)
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS[name]


def fixed_rows(plan: RowPlan):
    """Inside (this thread or task only), every installed linear layer multiplies in ``plan``'s blocks."""
    return call_context(_ROWS, plan)


def _planned_forward(layer, x):
    plan = _ROWS.get()
    if plan is None:
        return type(layer).forward(layer, x)
    return blocked_linear(layer, plan.head_rows if layer is plan.head else plan.rows, x)


# Device types whose batched product computes each block by its own product of the block's
# shape (measured on the CPU, fp32, 1 and 2 threads: every block of a batch of 2 to 40
# bit-identical; a batch of ONE block is not, at 2 threads and 1,536 inputs, the embedded
# model's down_proj: the library then splits the one product's sum over the threads, so
# batched_product never runs a batch of one). Elsewhere each block is a product of its own, as the guarantee needs: a
# GPU's batched GEMM may pick its kernel (split-K) by the batch count, so it joins this set
# only where benchmarks/gpu_check.py (``batched_blocks``) shows the bits hold.
BATCHED_BLOCKS = {"cpu"}
# A lone block's halves of output columns (batched_product) come in whole multiples of this:
# a BLAS's kernels are 8 or 16 floats wide, so a half of a multiple of 32 is computed, column
# for column, by the kernel the whole width is (every width of SmolLM2 and Gemma 3 halves so).
HALF_COLUMNS = 32


def blocked_linear(layer, rows: int, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` computed as blocks of exactly ``rows`` rows: a row's bits depend on its own
    block alone (see :mod:`setllm.core.forward.scoring`). Callers pad their rows to a multiple of
    ``rows`` once per forward, so this is a view; another count is padded here."""
    n = x.numel() // x.shape[-1]
    blocks = x.reshape(-1, rows, x.shape[-1]) if n % rows == 0 else _padded(x, n, rows)  # [M / R, R, in]
    if x.device.type in BATCHED_BLOCKS:
        out = batched_product(layer, blocks)
    else:  # one product per block, written in place
        out = blocks.new_empty(*blocks.shape[:2], _width(layer))
        for b in range(blocks.shape[0]):
            _product(layer, blocks[b], out[b])
    if n % rows:
        return out.reshape(-1, out.shape[-1])[:n].reshape(*x.shape[:-1], out.shape[-1])
    return out.view(*x.shape[:-1], out.shape[-1])


def batched_product(layer, blocks: torch.Tensor) -> torch.Tensor:
    """``blocks [B, R, in] @ weight (+ bias)`` in one batched product: ``[B, R, out]``.

    On more than one thread the CPU's batched product of ONE block may split its sum over the
    threads, where a batch of several gives each block a thread of its own (measured: at 2
    threads, 1,536 inputs). So a lone block is read as a batch of two: its output's two halves
    of columns (:func:`_halves`), each a product of the whole sum on one thread, which is the
    product each block of a batch gets, column for column (measured bit-identical at every
    width of the embedded model; tested), at the work of one block; a layer of another width
    reads the same block twice. On one thread the lone block runs the very kernel each block
    of a batch does (measured and tested alike): read as it is.

    Halves are taken only where each is a whole multiple of :data:`HALF_COLUMNS`: a narrower
    half may run another kernel than the whole width does (measured: 16 outputs, halves of 8,
    differ in the last bits on an AMD EPYC), so any other layer reads the same block twice."""
    if blocks.shape[0] == 1 and torch.get_num_threads() > 1:
        if _width(layer) % (2 * HALF_COLUMNS) == 0:
            return _halves(layer, blocks)
        blocks = blocks.expand(2, -1, -1)
        return _plain_batched(layer, blocks)[:1]
    return _plain_batched(layer, blocks)


def _plain_batched(layer, blocks: torch.Tensor) -> torch.Tensor:
    weight = _batched_weight(layer, blocks.shape[0])
    return torch.bmm(blocks, weight) if layer.bias is None else torch.baddbmm(layer.bias, blocks, weight)


def _halves(layer, block: torch.Tensor) -> torch.Tensor:
    """``block [1, R, in] @ weight (+ bias)`` as a batch of two: the same rows against each half
    of the output columns, put back side by side: ``[1, R, out]``."""
    half = _width(layer) // 2
    weight, rows = _batched_weight(layer, 2, half), block.expand(2, -1, -1)
    if layer.bias is None:
        out = torch.bmm(rows, weight)
    else:
        out = torch.baddbmm(layer.bias.view(2, 1, half), rows, weight)
    return out.transpose(0, 1).reshape(1, block.shape[1], 2 * half)


def _batched_weight(layer, n: int, width: int | None = None) -> torch.Tensor:
    """``[n, in, width]``: the layer's weight as :func:`_weight` reads it, without a copy: with
    no ``width``, the whole of it repeated ``n`` times (batch stride 0); else batch ``b`` its
    output columns ``b * width`` onwards. One ``as_strided`` view instead of a transpose and an
    expand: the same tensor to the product (sizes and strides alike), one op fewer per layer."""
    w = layer.weight
    if width is None and torch.is_grad_enabled() and w.requires_grad:  # as_strided's gradient is a slow scatter: the plain views
        return _weight(layer).expand(n, -1, -1)
    rows, cols = (1, 0) if _transposed(layer) else (0, 1)
    step = 0 if width is None else width * w.stride(cols)
    return w.as_strided((n, w.shape[rows], width or w.shape[cols]), (step, w.stride(rows), w.stride(cols)), w.storage_offset())


def _product(layer, block: torch.Tensor, out: torch.Tensor) -> None:
    weight = _weight(layer)
    if torch.is_grad_enabled() and (block.requires_grad or weight.requires_grad):  # out= has no gradient
        out.copy_(block @ weight if layer.bias is None else torch.addmm(layer.bias, block, weight))
    elif layer.bias is None:
        torch.mm(block, weight, out=out)
    else:
        torch.addmm(layer.bias, block, weight, out=out)


def _weight(layer) -> torch.Tensor:
    """``[in, out]``: gpt2's ``Conv1D`` stores it so, ``nn.Linear`` transposed."""
    return layer.weight.t() if _transposed(layer) else layer.weight


def _width(layer) -> int:
    """The layer's output width, read off its weight's shape (no op dispatched)."""
    return layer.weight.shape[0 if _transposed(layer) else 1]


def _transposed(layer) -> bool:
    """Whether the layer stores its weight ``[out, in]`` (``nn.Linear``; gpt2's ``Conv1D`` stores ``[in, out]``)."""
    from transformers.pytorch_utils import Conv1D

    return not isinstance(layer, Conv1D)


def _padded(x: torch.Tensor, n: int, rows: int) -> torch.Tensor:
    flat = x.reshape(n, x.shape[-1])
    return torch.nn.functional.pad(flat, (0, 0, 0, -n % rows)).view(-1, rows, x.shape[-1])


@contextmanager
def fixed_row_linears(model, rows: int, head_rows: int):
    """Inside (this thread only), every linear layer of ``model`` (``nn.Linear``; gpt2's
    ``Conv1D``) multiplies its input as blocks of exactly ``rows`` rows, the output head as
    blocks of ``head_rows`` (:func:`setllm.core.model.install.blocked_linear`), so a row's result
    depends on the row alone, never on how many rows share the forward (see
    :mod:`setllm.core.forward.scoring`). The head gets smaller blocks because it is read for one row
    per prompt and is the widest layer (a 49k-word vocabulary times 64 rows would cost more
    than the row it serves). The layers were installed once (:func:`install`);
    the model is not changed here: the plan belongs to the call."""
    install(model)
    with fixed_rows(RowPlan(rows, head_rows, model.get_output_embeddings())):
        yield

