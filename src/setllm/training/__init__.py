"""``setllm train``: instruction tuning of a Set-LLM variant (LoRA through PEFT, or full).

Modules, one job each: :mod:`.config` (the dataclass), :mod:`.data` (specs -> examples),
:mod:`.collator` (examples -> features -> batches, through the inference encoder),
:mod:`.trainer` (the HF Trainer with the Set-LLM loss), :mod:`.run` (one stage end to end).
"""

from .config import TrainConfig
from .run import TrainResult, train

__all__ = ["TrainConfig", "TrainResult", "train"]
