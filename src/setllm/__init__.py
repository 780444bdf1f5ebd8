"""setllm: order-invariant prompting for decoder-only LLMs (Set-LLM: SetPE + SetMask).

Names are imported on first use (PEP 562), so ``setllm --help`` and ``import setllm.cli``
do not pay for torch and transformers.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "api": ["SetLLM", "default_adapter"],
    "bank": ["AdapterBank"],
    "policy": ["Choice", "Verdict", "pick"],
    "core.encoding": ["EncodedPrompt", "PromptEncoder", "sbp_positions", "setpe_positions"],
    "core.generation": ["GenerationConfig"],
    "core.prompt": ["PromptError", "Set", "SetPrompt", "as_prompt", "from_json", "parse_markup", "to_markup"],
    "core.families": ["SUPPORTED_MODEL_TYPES", "UnsupportedModelError"],
    "core.scoring": ["OptionScore"],
    "core.templates": ["mc_prompt", "original_prompt"],
    "core.variants": ["DEFAULT_VARIANT", "VARIANTS", "Variant", "get_variant"],
    "loading": ["DEFAULT_MODEL", "ModelLoadError", "load_model"],
    "loading.options": ["LoadOptions"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = [name for names in _EXPORTS.values() for name in names]


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'setllm' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value  # once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
