"""What each verified model family needs of setllm, written in one place, and the check
(:func:`check_model`) that refuses a model setllm cannot run.

Everything else in setllm is family-blind: it hands token ids, a mask and position ids to
the model's public ``forward``. Where a family differs, its entry here says how, and the
code that acts on it reads it from here.

- Gemma (all): embeddings are scaled by sqrt(hidden size) inside the model (setllm passes
  ids, never embeddings, so nothing to do); ``<bos>`` must come first: the encoder puts the
  tokenizer's own BOS in front of every prompt (:func:`setllm.core.tokens.encoding._bos_prefix`) and a
  chat template's BOS is not doubled.
- Gemma 2: attention logits are soft-capped, which sdpa cannot do: loaded with eager
  attention, and :mod:`setllm.core.attention.packed_attention` applies the cap itself.
- Gemma 2/3, Qwen 2/3 with ``use_sliding_window``, Mistral, Phi-3: sliding-window layers.
  The window is applied by setllm's masks, counted in positions
  (:func:`setllm.core.layout.masks.window_mask`), per layer type (:func:`setllm.core.model.fit.layer_windows`).
- Gemma 3: a 262k-token vocabulary. Logits are computed only for the rows that are read
  (``logits_to_keep``), so the set path holds no more logits than the base model's; option
  rows go through a vocabulary that wide in blocks of ``WIDE_HEAD_ROWS``
  (:mod:`setllm.core.forward.scoring`), which reads the 670 MB head a quarter as often.
- GPT-2: absolute position embeddings (``n_positions``) and Conv1D linear layers, which
  :func:`setllm.core.model.install.fixed_row_linears` blocks like ``nn.Linear``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import InputError
from ..layout.variants import attention_problem
from . import install


@dataclass(frozen=True)
class Family:
    """One verified ``model_type`` and the attention implementation it loads with by default
    (what else it needs: the module docstring)."""

    model_type: str
    attention: str = "sdpa"


FAMILIES: dict[str, Family] = {f.model_type: f for f in [
    Family("llama"), Family("gemma"), Family("gemma2", attention="eager"), Family("gemma3_text"),
    Family("qwen2"), Family("qwen3"), Family("mistral"), Family("phi3"), Family("gpt2"),
]}

# Architectures tested end to end (tests/core/test_invariance.py, test_equivalence.py, test_windows.py).
SUPPORTED_MODEL_TYPES = tuple(FAMILIES)


def default_attention(model_type: str | None, requested: str) -> str:
    """The attention a model loads with: ``requested``, unless it is the default (sdpa) and
    the family cannot run it."""
    family = FAMILIES.get(model_type or "")
    return family.attention if requested == "sdpa" and family is not None else requested


def fit_attention(model, requested: str) -> None:
    """Give a model loaded for ``requested`` attention (PEFT-wrapped or not) the one its
    family loads with (:func:`default_attention`), before any forward. ``sdpa`` is loaded as
    transformers' own default (sdpa where the architecture runs it, else eager: gemma2's
    soft-capping), so a load reads no config first; a verified family whose entry says
    otherwise is switched here (transformers dispatches attention by the config on every
    forward)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    model_type = base.config.model_type
    own = default_attention(model_type, requested)
    if model_type in FAMILIES and base.config._attn_implementation != own:
        base.set_attn_implementation(own)


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

