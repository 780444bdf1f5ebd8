"""The paper's ablations as named variants: an attention mask kind plus a position scheme."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...errors import InputError

# The attention implementations that take an arbitrary mask. On CUDA, PyTorch runs SDPA with
# a mask on its memory-efficient kernel (its flash kernel takes none); flex_attention compiles
# the mask predicate into a block-sparse kernel. FlashAttention 2/3 only know causal,
# sliding-window and padding masks: a set prompt cannot be read by them.
ATTENTION_BACKENDS = ["sdpa", "eager", "flex_attention"]

# ``attn="auto"``: sdpa, but a prompt of at least this many tokens (per device type) is read on
# flex attention, whose BlockMask skips the blocks a set mask (or the causal triangle) hides.
# CPU: measured side by side on the embedded model (docs/experiments/core-speed.md, "Long sets
# against plain transformers"): flex against the dense mask, 13.4 s vs 20.5 s to score after a
# 4.3k-token set, 5.9 s vs 6.3 s at 2.1k, where a first call's compilation does not pay.
# CUDA: on one H100 (bf16, Llama-3.2-1B shape, 2026-11-27) a from-scratch flex reading with a
# compiled block mask took 0.055 s at 8.2k tokens where sdpa with a dense set mask took 0.080 s;
# shorter sets were not measured on flex, so they stay on sdpa (docs/gpu.md). A device type not
# listed keeps sdpa.
FLEX_FROM = {"cpu": 4096, "cuda": 8192}
LONG_PROMPT_TOKENS = FLEX_FROM["cpu"]


def attention_problem(name: str | None) -> str | None:
    """Why attention implementation ``name`` cannot run setllm (None: it can)."""
    if name in ATTENTION_BACKENDS:
        return None
    if name and "flash" in name:
        return (f"attention {name!r} takes no arbitrary mask (FlashAttention kernels know only causal, sliding and padding masks), "
                "and set prompts need one; use sdpa (on CUDA: its memory-efficient kernel) or flex_attention")
    return f"unknown attention implementation {name!r}; choose one of: {', '.join(ATTENTION_BACKENDS)}"


def check_attention(name: str | None, flag: str = "--attn") -> None:
    """One line naming the flag when ``name`` cannot take set masks."""
    problem = attention_problem(name)
    if problem:
        raise InputError(f"{flag} {name}: {problem}")

MaskKind = Literal["causal", "prefix", "setmask", "sbp"]
PositionKind = Literal["pe", "nope", "setpe", "sbp"]
# The schemes that number every element of a set from the same start, so an element's positions
# do not depend on where its siblings sit (what a cached element's keys need; ``pe`` numbers on).
ORDER_FREE_POSITIONS: frozenset[str] = frozenset({"nope", "setpe", "sbp"})


@dataclass(frozen=True)
class Variant:
    """One way of reading a set prompt.

    Attributes:
        name: the name used everywhere (CLI, configs, adapter metadata).
        mask: ``causal`` (the base model), ``prefix`` (bidirectional prompt), ``setmask``
            (prefix, but elements of one set do not see each other) or ``sbp`` (causal, but
            elements of one set do not see each other: Set-Based Prompting).
        positions: ``pe`` (consecutive), ``nope`` (all zero), ``setpe`` (every element of a
            set starts at the same position; after the set, numbering resumes at its start +
            its total length) or ``sbp`` (as ``setpe``, but resuming at the start + its longest
            element).
        invariant: the output provably does not depend on the order of set elements.
        training_free: a reading of the unmodified base model by design (no Set-LLM adapter):
            ``adapter="auto"`` loads none under it; an adapter can still be named.
        canonical: every set's elements are always sorted before reading (exact mode cannot
            be turned off): invariant by construction, whatever the mask and positions.
        label: the name report tables print, where it is not the paper's ``Mask+Positions``.
    """

    name: str
    mask: MaskKind
    positions: PositionKind
    invariant: bool
    training_free: bool = False
    canonical: bool = False
    label: str | None = None

    @property
    def paper_name(self) -> str:
        """The paper's name for it, as its tables print it (``Causal Mask+PE``, ``SetMask+SetPE``;
        ``SBP`` and ``Canonical Order`` for the training-free baselines)."""
        if self.label:
            return self.label
        mask = {"causal": "Causal Mask", "prefix": "Prefix Mask", "setmask": "SetMask", "sbp": "SBP Mask"}[self.mask]
        return f"{mask}+{ {'pe': 'PE', 'nope': 'NoPE', 'setpe': 'SetPE', 'sbp': 'SBP PE'}[self.positions]}"


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant("causal-pe", "causal", "pe", invariant=False),
        Variant("causal-nope", "causal", "nope", invariant=False),
        # A bidirectional prompt with no positions is a bag of tokens: invariant.
        Variant("prefix-nope", "prefix", "nope", invariant=True),
        Variant("prefix-pe", "prefix", "pe", invariant=False),
        Variant("prefix-setpe", "prefix", "setpe", invariant=True),
        Variant("setmask-setpe", "setmask", "setpe", invariant=True),
        # Set-Based Prompting (McIlroy-Young et al. 2024): the base model read with a causal mask
        # that hides elements of a set from each other, every element starting at the set's start.
        Variant("sbp", "sbp", "sbp", invariant=True, training_free=True, label="SBP"),
        # The base model as it is, each set's elements sorted first: invariant by construction.
        Variant("canonical", "causal", "pe", invariant=True, training_free=True, canonical=True, label="Canonical Order"),
    ]
}
DEFAULT_VARIANT = "setmask-setpe"


def get_variant(name: str | Variant) -> Variant:
    """Look a variant up by name, with an error listing the valid names."""
    if isinstance(name, Variant):
        return name
    try:
        return VARIANTS[name]
    except KeyError:
        raise InputError(f"unknown variant {name!r}; choose one of: {', '.join(VARIANTS)}") from None
