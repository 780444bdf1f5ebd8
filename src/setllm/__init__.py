"""setllm: order-invariant prompting for decoder-only LLMs (Set-LLM: SetPE + SetMask)."""

from .api import Choice, SetLLM, Verdict, default_adapter, pick
from .encoding import EncodedPrompt, PromptEncoder, setpe_positions
from .generation import GenerationConfig
from .loading import DEFAULT_MODEL, ModelLoadError, load_model
from .markup import parse_markup, to_markup
from .prompt import PromptError, Set, SetPrompt, as_prompt, from_json
from .runtime import SUPPORTED_MODEL_TYPES, UnsupportedModelError
from .scoring import OptionScore
from .templates import mc_prompt, original_prompt
from .variants import DEFAULT_VARIANT, VARIANTS, Variant, get_variant

__version__ = "0.1.0"

__all__ = [
    "Choice", "SetLLM", "Verdict", "default_adapter", "pick", "EncodedPrompt", "PromptEncoder", "setpe_positions",
    "GenerationConfig", "DEFAULT_MODEL", "ModelLoadError", "load_model", "parse_markup", "to_markup",
    "PromptError", "Set", "SetPrompt", "as_prompt", "from_json", "SUPPORTED_MODEL_TYPES",
    "UnsupportedModelError", "OptionScore", "mc_prompt", "original_prompt", "DEFAULT_VARIANT", "VARIANTS",
    "Variant", "get_variant",
]
