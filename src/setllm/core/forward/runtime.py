"""One forward pass of a Hugging Face causal LM under a variant's mask and positions: the
mask rendered per layer type, and which attention implementation the forward runs (flex for
a long prompt under ``attn="auto"``, sdpa for steps on a flex prefill).

Everything goes through the model's public ``forward``: a prepared 4D mask (or flex
BlockMask) and explicit ``position_ids``. Transformers uses a 4D mask exactly as given.
The rules around a forward live beside it: the fit rule in :mod:`setllm.core.model.fit`, the KV
cache in :mod:`setllm.core.model.kvcache`, the fixed-row linears in :mod:`setllm.core.model.install`.

Shapes: B batch, Q new tokens, K all tokens (cache + new), V vocabulary.
"""

from __future__ import annotations

from contextlib import contextmanager

from ..attention.renderers import MaskSpec, render
from ..layout.masks import TokenLayout
from ..layout.variants import ATTENTION_BACKENDS, FLEX_FROM, LONG_PROMPT_TOKENS, Variant  # noqa: F401  (re-exported)
from ..model import install
from ..model.families import default_attention
from ..model.fit import check_length, layer_windows
from ..model.kvcache import cache_kwarg
from ..model.owner import owner, weights


def attention_mask(model, variant: Variant, layout: TokenLayout, q_len: int, impl: str | None = None):
    """The rendered mask for the last ``q_len`` tokens of ``layout`` (the rest is cache), for
    attention ``impl`` (default: the model's own): one mask, or a dict of masks by layer type
    where layers differ in their window."""
    layout = layout.to(model.device)
    impl = impl or install.own_attention(model.config)
    return _per_layer_type(model, lambda w: render(impl, MaskSpec(variant.mask, layout, q_len, w), model.dtype))


def _per_layer_type(model, render_for):
    """``render_for(window)`` once per distinct window of the model's layers: one mask, or a
    dict of masks by layer type where layers differ in their window."""
    windows = layer_windows(model.config)
    rendered = {w: render_for(w) for w in dict.fromkeys(windows.values())}
    if len(rendered) == 1:
        return next(iter(rendered.values()))
    return {kind: rendered[w] for kind, w in windows.items()}


def forward(model, variant: Variant, input_ids, position_ids, layout: TokenLayout, cache=None, logits_to_keep: int = 0):
    """Run the model on ``input_ids [B, Q]`` given ``layout [B, K]`` (K = cache + Q)."""
    check_length(model.config, layout.shape[1], int(position_ids.max()) + 1)
    install.install(model)
    cached = layout.shape[1] > input_ids.shape[1]
    impl = forward_attention(model, 0 if cached else input_ids.shape[1])
    with install.attention(None if impl == install.own_attention(model.config) else impl):
        mask = attention_mask(model, variant, layout, input_ids.shape[1], impl)
        device = model.device
        return model(
            input_ids=input_ids.to(device),
            position_ids=position_ids.to(device),
            attention_mask=mask,
            use_cache=cache is not None,
            **{cache_kwarg(): cache},
            logits_to_keep=logits_to_keep,
        )


def step(model, input_ids, position_ids, layout: TokenLayout, cache):
    """One cached decoding step: a response token per row ``input_ids [B, 1]`` after every
    token of ``layout [B, K]`` (K includes the new one). A response token sees every real
    token before it (within the window), whatever the variant: that is what
    :func:`setllm.core.layout.masks.variant_mask` gives its row under every mask kind, so the mask is
    the causal kind's row, drawn from validity and positions alone, on the device, with no set
    machinery, and no value goes back to the host. The caller checks the length once, before decoding."""
    install.install(model)
    impl = step_attention(model)
    with install.attention(None if impl == install.own_attention(model.config) else impl):
        mask = _step_mask(model, layout, impl)
        return model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask, use_cache=True,
                     **{cache_kwarg(): cache}, logits_to_keep=1)


def _step_mask(model, layout: TokenLayout, impl: str):
    # Every kind gives a response row the causal kind's row (see step): no set is read.
    return _per_layer_type(model, lambda w: render(impl, MaskSpec("causal", layout, 1, w), model.dtype))


def use_auto_attention(model) -> None:
    """Mark a model loaded with sdpa as ``attn="auto"`` (see :data:`LONG_PROMPT_TOKENS`)."""
    owner(model).auto_attention = True


@contextmanager
def attention_implementation(model, name: str):
    """Inside, ``model``'s own attention is ``name``; after, its own again. A tool for
    benchmarks and tests that compare implementations on one model's weights: it changes the
    model, so no call of setllm uses it (a call picks its attention through
    :func:`setllm.core.model.install.attention`)."""
    base = weights(model)
    before = base.config._attn_implementation
    installed = before.startswith(install.PREFIX)
    base.set_attn_implementation(install.register(name) if installed else name)
    try:
        yield
    finally:
        base.set_attn_implementation(before)


def uses_flex(model, q_len: int) -> bool:
    """Whether a prompt of ``q_len`` tokens is read on flex attention: always where the model
    was loaded with it; under ``attn="auto"`` from the device's :data:`FLEX_FROM` length."""
    impl = install.own_attention(model.config)
    if impl == "flex_attention":
        return True
    auto = owner(model).auto_attention and impl == "sdpa"
    return auto and q_len >= FLEX_FROM.get(model.device.type, 2**62)


def prompt_length(model, n: int) -> int:
    """The padded length a batch of prompts of at most ``n`` tokens is read at: on flex
    attention :func:`setllm.core.attention.flex.padded_length` (a bounded number of compiled shapes),
    else ``n``."""
    from ..attention.flex import padded_length

    return padded_length(n, model.device) if uses_flex(model, n) else n


def forward_attention(model, q_len: int) -> str:
    """The attention a forward of ``q_len`` new tokens runs (0: a forward on a cache): flex for
    a long prompt under ``attn="auto"``, on a cache :func:`step_attention`, else the model's own."""
    own = install.own_attention(model.config)
    if q_len == 0:
        return step_attention(model)
    return "flex_attention" if own == "sdpa" and uses_flex(model, q_len) else own


def step_attention(model) -> str:
    """Flex attention serves the prefill, where long prompts gain from block sparsity; steps
    on a cache run under sdpa (eager for gemma2): flex's CPU kernel fails to compile for
    single-token queries (torch 2.13), and a few query rows gain nothing from a BlockMask."""
    own = install.own_attention(model.config)
    return default_attention(model.config.model_type, "sdpa") if own == "flex_attention" else own
