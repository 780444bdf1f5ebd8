"""setllm: order-invariant prompting for decoder-only LLMs (Set-LLM: SetPE + SetMask).

Names are imported on first use (PEP 562), so ``setllm --help`` and ``import setllm.cli``
do not pay for torch and transformers.
"""

from __future__ import annotations

from .lazy import exports

__version__ = "0.1.0"

__all__, __getattr__, __dir__ = exports(__name__, {
    "api": ["SetLLM", "default_adapter"],
    "bank": ["AdapterBank"],
    "policy": ["Choice", "Verdict", "pick"],
    "core.tokens.encoding": ["EncodedPrompt", "PromptEncoder", "sbp_positions", "setpe_positions"],
    "core.forward.values": ["GenerationConfig", "OptionScore"],
    "core.text.prompt": ["PromptError", "Set", "SetPrompt", "as_prompt", "from_json", "parse_markup", "to_markup"],
    "core.model.families": ["SUPPORTED_MODEL_TYPES", "UnsupportedModelError"],
    "core.text.templates": ["mc_prompt", "original_prompt"],
    "core.layout.variants": ["DEFAULT_VARIANT", "VARIANTS", "Variant", "get_variant"],
    "loading": ["DEFAULT_MODEL", "ModelLoadError", "load_model"],
    "loading.options": ["LoadOptions"],
})
