"""One forward pass of a Hugging Face causal LM under a variant's mask and positions.

Everything goes through the model's public ``forward``: a prepared 4D mask (or flex
BlockMask) and explicit ``position_ids``. Transformers uses a 4D mask exactly as given.

Shapes: B batch, Q new tokens, K all tokens (cache + new), V vocabulary.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import cache as _once

import torch

from ..errors import InputError
from . import install
from .families import SUPPORTED_MODEL_TYPES, default_attention
from .masks import TokenLayout, render, variant_mask
from .prompt import PromptTooLong
from .variants import ATTENTION_BACKENDS, FLEX_FROM, LONG_PROMPT_TOKENS, Variant, attention_problem  # noqa: F401  (re-exported)


class UnsupportedModelError(InputError):
    """The model cannot run set prompts (or has not been verified to)."""


def check_model(model, allow_untested: bool = False) -> None:
    """Refuse models whose attention cannot take our masks and positions."""
    config = model.config
    model_type = getattr(config, "model_type", "?")
    if getattr(config, "is_encoder_decoder", False):
        raise UnsupportedModelError(f"{model_type} is an encoder-decoder model; setllm needs a decoder-only LLM")
    if model_type not in SUPPORTED_MODEL_TYPES and not allow_untested:
        raise UnsupportedModelError(
            f"model type {model_type!r} has not been verified to honour custom masks and positions "
            f"(verified: {', '.join(SUPPORTED_MODEL_TYPES)}); pass allow_untested=True / --allow-untested to try it"
        )
    problem = attention_problem(install.own_attention(config))
    if problem:
        raise UnsupportedModelError(f"{problem} (load the model with attn_implementation=...)")


def sliding_window(config) -> int | None:
    """The window of the model's sliding-attention layers, or None if all layers attend fully."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and "sliding_attention" not in layer_types:
        return None
    if getattr(config, "use_sliding_window", True) is False:
        return None
    return int(window)


def layer_windows(config) -> dict[str, int | None]:
    """Each attention layer type's window (None: full attention). One entry when every layer
    is alike (Mistral and Phi-3 slide in every layer and name no types); Gemma 2/3 and Qwen
    with sliding layers have two, and take a mask per type as a dict keyed by these names."""
    window = sliding_window(config)
    types = getattr(config, "layer_types", None) or ["sliding_attention" if window else "full_attention"]
    return {t: window if t == "sliding_attention" else None for t in dict.fromkeys(types)}


def check_fits(config, tokens: int, end: int, scheme: str, response: int = 0, what: str = "response") -> None:
    """The fit rule, the one every surface applies (the codec, the scoring driver, decoding,
    the server, the CLI's checks of a file's rows): a prompt of ``tokens`` tokens whose
    response starts at position ``end`` (:meth:`setllm.core.encoding.EncodedPrompt.positions`),
    plus ``response`` tokens of response (at least one: the first is read from the prompt's
    last token), fits the context, counted in positions (see :func:`check_length`). Under NoPE
    the response stays at position 0 with the prompt; under SBP the text after a set resumes
    after its longest element: there the tokens outrun the positions, and only the positions
    count. Raises :class:`PromptTooLong` naming ``what`` the response is."""
    steps = 1 if scheme == "nope" else max(response, 1)
    at = "" if end == tokens else f" at positions up to {max(end - 1, 0)}"
    alone = _too_long(config, tokens + 1, end + 1)  # the prompt leaves no room for a response
    if alone or not response:
        if alone:
            raise PromptTooLong(f"prompt is {tokens} tokens{at}, {alone}")
        return
    problem = _too_long(config, tokens + response, end + steps)
    if problem:
        raise PromptTooLong(f"prompt ({tokens} tokens{at}) + {what} ({response}) is {problem}")


def check_length(config, length: int, positions: int | None = None) -> None:
    """``length`` tokens whose position ids stay below ``positions`` (default: ``length``):
    the guard of every forward (a prompt and its response are checked before, by
    :func:`check_fits`).

    The context counts positions: in every supported family the context is what the
    positions were trained on (RoPE's range, gpt2's table of ``n_positions`` embeddings).
    Under SetPE the text after a set resumes at the set's start + its tokens, so the two
    counts differ only where positions stop growing with tokens: NoPE (all 0), SBP (after a
    set, its start + its longest element) and a prompt that ends inside a set. Sliding
    windows are no limit in the supported families: the masks apply them in positions
    (:func:`setllm.core.masks.window_mask`). A model of another family (``allow_untested``)
    may not take a mask per layer type, so there a window still bounds the tokens, as it
    bounded every model before set-aware windows.
    """
    used = length if positions is None else positions
    problem = _too_long(config, length, used)
    if problem:
        at = "" if used == length else f" at positions up to {used - 1}"
        raise PromptTooLong(f"sequence of {length} tokens{at} is {problem}")


def _too_long(config, tokens: int, positions: int) -> str | None:
    """Why ``tokens`` tokens at positions below ``positions`` do not fit ``config``'s model
    ("longer than ..."), or None."""
    window = sliding_window(config)
    if window is not None and tokens > window and getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return (f"longer than the model's sliding attention window ({window}), "
                f"and setllm applies set-aware windows only in the families it verified ({', '.join(SUPPORTED_MODEL_TYPES)})")
    limit = context_length(config)
    if limit is not None and positions > limit:
        return f"longer than the model's context ({limit} tokens)"
    return None


def context_length(config) -> int | None:
    """Most tokens the model takes (gpt2 names it ``n_positions``)."""
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)


def attention_mask(model, variant: Variant, layout: TokenLayout, q_len: int, impl: str | None = None):
    """The rendered mask for the last ``q_len`` tokens of ``layout`` (the rest is cache), for
    attention ``impl`` (default: the model's own): one mask, or a dict of masks by layer type
    where layers differ in their window."""
    layout = layout.to(model.device)
    impl = impl or install.own_attention(model.config)
    return _per_layer_type(model, lambda w: _render(variant, layout, w, impl, q_len, model))


def _per_layer_type(model, render_for):
    """``render_for(window)`` once per distinct window of the model's layers: one mask, or a
    dict of masks by layer type where layers differ in their window."""
    windows = layer_windows(model.config)
    rendered = {w: render_for(w) for w in dict.fromkeys(windows.values())}
    if len(rendered) == 1:
        return next(iter(rendered.values()))
    return {kind: rendered[w] for kind, w in windows.items()}


def _render(variant: Variant, layout: TokenLayout, window: int | None, impl: str, q_len: int, model):
    batch, kv_len = layout.shape
    if impl == "flex_attention":  # one predicate for every variant: compiled once per shape (core/flex.py)
        from .flex import FlexLayout, block_mask

        return block_mask(FlexLayout.of(variant.mask, layout, window, kv_len - q_len), q_len, kv_len)
    return _sdpa_ready(render(variant_mask(variant.mask, layout, window), impl, batch, q_len, kv_len, q_offset=kv_len - q_len,
                              device=model.device, dtype=model.dtype), model.dtype)


def _sdpa_ready(mask, dtype):
    """A bool mask as sdpa would make it at every layer (0 / -inf in the model's dtype), made
    once per forward: the same additive values, so the same attention, with 3 ops fewer per layer."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def forward(model, variant: Variant, input_ids, position_ids, layout: TokenLayout, cache=None, logits_to_keep: int = 0):
    """Run the model on ``input_ids [B, Q]`` given ``layout [B, K]`` (K = cache + Q)."""
    check_length(model.config, layout.shape[1], int(position_ids.max()) + 1)
    install.install(model)
    cached = layout.shape[1] > input_ids.shape[1]
    impl = forward_attention(model, 0 if cached else input_ids.shape[1])
    with install.attention(None if impl == install.own_attention(model.config) else impl), _static_flex_shapes(impl, model.device):
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
    :func:`setllm.core.masks.variant_mask` gives its row under every mask kind, so the mask is
    drawn from validity and positions alone, on the device, with no set machinery, and no
    value goes back to the host. The caller checks the length once, before decoding."""
    install.install(model)
    impl = step_attention(model)
    with install.attention(None if impl == install.own_attention(model.config) else impl):
        mask = _step_mask(model, layout, impl)
        return model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask, use_cache=True,
                     **{cache_kwarg(): cache}, logits_to_keep=1)


def _step_mask(model, layout: TokenLayout, impl: str):
    from .masks import and_masks, padding_mask, window_mask

    batch, kv_len = layout.shape
    return _per_layer_type(model, lambda w: _sdpa_ready(render(padding_mask(layout) if w is None else and_masks(padding_mask(layout), window_mask(layout, w)),
                                                               impl, batch, 1, kv_len, q_offset=kv_len - 1, device=layout.valid.device, dtype=model.dtype),
                                                        model.dtype))


@contextmanager
def fixed_row_linears(model, rows: int, head_rows: int):
    """Inside (this thread only), every linear layer of ``model`` (``nn.Linear``; gpt2's
    ``Conv1D``) multiplies its input as blocks of exactly ``rows`` rows, the output head as
    blocks of ``head_rows`` (:func:`setllm.core.install.blocked_linear`), so a row's result
    depends on the row alone, never on how many rows share the forward (see
    :mod:`setllm.core.scoring`). The head gets smaller blocks because it is read for one row
    per prompt and is the widest layer (a 49k-word vocabulary times 64 rows would cost more
    than the row it serves). The layers were installed once (:func:`setllm.core.install.install`);
    the model is not changed here: the plan belongs to the call."""
    install.install(model)
    with install.fixed_rows(install.RowPlan(rows, head_rows, model.get_output_embeddings())):
        yield


def output_cache(out):
    """The KV cache a forward returned (``cache`` from transformers 5.24, ``past_key_values`` before)."""
    return out.cache if "cache" in out else out.past_key_values


@_once
def cache_kwarg() -> str:
    # transformers 5.24 renamed ``past_key_values`` to ``cache`` and warns on the old name;
    # asking by version keeps every supported release quiet.
    import transformers
    from packaging.version import Version

    return "cache" if Version(transformers.__version__) >= Version("5.24.0.dev0") else "past_key_values"




def use_auto_attention(model) -> None:
    """Mark a model loaded with sdpa as ``attn="auto"`` (see :data:`LONG_PROMPT_TOKENS`)."""
    model._setllm_auto_attention = True


@contextmanager
def attention_implementation(model, name: str):
    """Inside, ``model``'s own attention is ``name``; after, its own again. A tool for
    benchmarks and tests that compare implementations on one model's weights: it changes the
    model, so no call of setllm uses it (a call picks its attention through
    :func:`setllm.core.install.attention`)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
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
    auto = getattr(model, "_setllm_auto_attention", False) and impl == "sdpa"
    return auto and q_len >= FLEX_FROM.get(model.device.type, 2**62)


def prompt_length(model, n: int) -> int:
    """The padded length a batch of prompts of at most ``n`` tokens is read at: on flex
    attention :func:`setllm.core.flex.padded_length` (a bounded number of compiled shapes),
    else ``n``."""
    from .flex import padded_length

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


@contextmanager
def _static_flex_shapes(impl: str, device):
    """On CPU, compile flex attention for each prompt length on its own: torch 2.13's dynamic-
    shape CPU kernel, which a second length would trigger, fails to compile (inductor:
    ``cur_qSplitSize9 was not declared``). Prompts come in :func:`prompt_length` buckets, so
    the lengths, and the compilations, are few."""
    if impl != "flex_attention":
        yield
        return
    from .flex import compile_settings

    with compile_settings(device):
        yield


def new_cache():
    # No config: a config-built cache keeps only window-1 tokens for sliding-window models.
    from transformers import DynamicCache

    return DynamicCache()


def truncate_cache(cache, n: int) -> None:
    """Keep the first ``n`` tokens of every layer of ``cache`` (``crop``'s argument changed
    meaning across transformers releases)."""
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys[:, :, :n], layer.values[:, :, :n]


def weights_fingerprint(model, stride: int = 4099) -> str:
    """A short hash of a model's weights: names, shapes, and every ``stride``-th value of each
    tensor (a retrained adapter, merged in, moves nearly every value of the matrices it
    touches, so a sample is enough, and hashing stays fast for large models)."""
    import hashlib

    import torch

    h = hashlib.sha256()
    with torch.no_grad():
        for name, p in model.state_dict().items():
            h.update(f"{name}:{tuple(p.shape)}:{p.dtype}".encode())
            h.update(p.detach().reshape(-1)[::stride].float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]
