"""The one training config: a dataclass, filled from a YAML/JSON file and CLI flags.

Defaults are the paper's (Egressy & Stühmer 2025): LoRA rank 8, alpha 1 on every linear
layer of attention and MLP, AdamW with no weight decay, a linear schedule warming up over
10% of the steps, seed 42. The learning rate default sits inside the paper's grid
(1e-4 .. 3e-3); with alpha 1 and rank 8 the LoRA update is scaled by 1/8, so small
learning rates move the model very little.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..variants import DEFAULT_VARIANT, VARIANTS

OVERLONG_POLICIES = ("truncate", "skip")


def _help(text: str, **extra) -> dict:
    return {"help": text, **extra}


@dataclass
class TrainConfig:
    """Everything ``setllm train`` needs; one field per flag (``--lora-r``, ...)."""

    # -- what to train --------------------------------------------------------------------
    data: str = field(default="", metadata=_help(
        "comma-separated data specs: a benchmark (arc_challenge, piqa, commonsense_qa, social_iqa), "
        "ultrafeedback, or a JSONL file of {\"prompt\": <set prompt>, \"response\": str}; SPEC:N takes N examples of it", metavar="SPEC[,SPEC...]"))
    out: str = field(default="", metadata=_help("output directory (adapter, setllm.json, train_log.jsonl, checkpoints)", metavar="DIR"))
    model: str | None = field(default=None, metadata=_help("base model: local path or hub id; default: the embedded SmolLM2-135M-Instruct", metavar="M"))
    variant: str = field(default=DEFAULT_VARIANT, metadata=_help("variant to train (mask + positions)", choices=list(VARIANTS)))
    chat: bool = field(default=False, metadata=_help("wrap prompts in the tokenizer's chat template (recorded in setllm.json)"))
    init_adapter: str | None = field(default=None, metadata=_help(
        "continue training this adapter (e.g. after UltraFeedback pre-finetuning)", metavar="DIR"))
    full_finetune: bool = field(default=False, metadata=_help("train all weights instead of a LoRA adapter (saves a full model)"))

    # -- data -----------------------------------------------------------------------------
    data_dir: str | None = field(default=None, metadata=_help(
        "directory with <name>/train.jsonl per benchmark and ultrafeedback/; default: the HF hub", metavar="D"))
    limit: int | None = field(default=None, metadata=_help("use at most N examples of each data spec", metavar="N"))
    sample_seed: int | None = field(default=None, metadata=_help(
        "with --limit: a seeded random sample instead of the first N records", metavar="S"))
    skip_bad: bool = field(default=False, metadata=_help("skip malformed records (counted and reported) instead of stopping"))
    max_length: int = field(default=256, metadata=_help("most tokens per example (prompt + response)", metavar="N"))
    overlong: str = field(default="truncate", metadata=_help(
        "over-long examples: 'truncate' cuts the response (examples whose prompt alone leaves fewer than "
        "min-response-tokens are skipped), 'skip' drops them; both are counted", choices=list(OVERLONG_POLICIES)))
    min_response_tokens: int = field(default=8, metadata=_help("fewest response tokens an example keeps after truncation", metavar="N"))

    # -- optimisation ---------------------------------------------------------------------
    lr: float = field(default=1e-3, metadata=_help("peak learning rate (paper grid: 1e-4 .. 3e-3)", metavar="X"))
    batch_size: int = field(default=8, metadata=_help("examples per device per step", metavar="N"))
    grad_accum: int = field(default=1, metadata=_help("gradient accumulation steps", metavar="N"))
    epochs: float = field(default=1.0, metadata=_help("passes over the data (ignored when --max-steps is set)", metavar="X"))
    max_steps: int | None = field(default=None, metadata=_help("stop after N optimizer steps (overrides --epochs)", metavar="N"))
    warmup: float = field(default=0.1, metadata=_help("warmup: a fraction of the steps (< 1) or a number of steps", metavar="X"))
    weight_decay: float = field(default=0.0, metadata=_help("AdamW weight decay", metavar="X"))
    max_grad_norm: float = field(default=1.0, metadata=_help("gradient clipping norm", metavar="X"))
    seed: int = field(default=42, metadata=_help("seed for initialisation and data order", metavar="S"))
    group_by_length: bool = field(default=True, metadata=_help(
        "batch examples of similar length together (less padding; still seeded and resumable)"))

    # -- LoRA -----------------------------------------------------------------------------
    lora_r: int = field(default=8, metadata=_help("LoRA rank", metavar="R"))
    lora_alpha: float = field(default=1.0, metadata=_help("LoRA alpha (the update is scaled by alpha / r)", metavar="A"))
    lora_dropout: float = field(default=0.0, metadata=_help("LoRA dropout", metavar="P"))
    lora_targets: str = field(default="all-linear", metadata=_help(
        "modules LoRA adapts: 'all-linear' (attention and MLP, not the LM head) or comma-separated names", metavar="NAMES"))

    # -- running --------------------------------------------------------------------------
    logging_steps: int = field(default=10, metadata=_help("log loss and tokens/s every N steps", metavar="N"))
    save_steps: int = field(default=50, metadata=_help("checkpoint every N steps (for --resume)", metavar="N"))
    save_total_limit: int | None = field(default=2, metadata=_help("keep the N newest checkpoints", metavar="N"))
    resume: bool = field(default=False, metadata=_help("continue from the newest checkpoint in --out"))
    overwrite: bool = field(default=False, metadata=_help("allow an --out that already holds checkpoints (without --resume)"))
    attn: str = field(default="sdpa", metadata=_help("attention implementation", choices=["sdpa", "eager", "flex_attention"]))
    dtype: str = field(default="float32", metadata=_help(
        "weight dtype: float32 (CPU), or bf16 mixed precision on GPU", choices=["float32", "bf16"]))
    allow_untested: bool = field(default=False, metadata=_help("try a model type setllm has not verified"))
    progress: bool = field(default=True, metadata=_help("show a progress bar"))

    def __post_init__(self) -> None:
        if not self.data.strip():
            raise ValueError("no training data: pass --data SPEC[,SPEC...] (e.g. --data ultrafeedback,arc_challenge)")
        if not self.out:
            raise ValueError("no output directory: pass --out DIR")
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown variant {self.variant!r}; choose one of: {', '.join(VARIANTS)}")
        if self.overlong not in OVERLONG_POLICIES:
            raise ValueError(f"--overlong must be one of {', '.join(OVERLONG_POLICIES)}, got {self.overlong!r}")
        for name in ("batch_size", "grad_accum", "max_length", "logging_steps", "save_steps", "lora_r", "min_response_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("limit", "max_steps", "save_total_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if not 0 < self.lr < 1:
            raise ValueError(f"--lr must be in (0, 1), got {self.lr} (the paper's grid is 1e-4 .. 3e-3)")
        if self.epochs <= 0:
            raise ValueError(f"--epochs must be positive, got {self.epochs}")
        if self.warmup < 0:
            raise ValueError(f"--warmup must be >= 0 (a fraction < 1 or a step count), got {self.warmup}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"--lora-dropout must be in [0, 1), got {self.lora_dropout}")
        if self.min_response_tokens >= self.max_length:
            raise ValueError(f"--min-response-tokens ({self.min_response_tokens}) must be below --max-length ({self.max_length})")
        if self.full_finetune and self.init_adapter:
            raise ValueError("--init-adapter continues a LoRA adapter; it cannot be combined with --full-finetune")
        if self.init_adapter and not (Path(self.init_adapter) / "adapter_config.json").exists():
            raise ValueError(f"--init-adapter {self.init_adapter}: no adapter_config.json there (expected a PEFT adapter directory)")

    @property
    def specs(self) -> list[str]:
        return [s.strip() for s in self.data.split(",") if s.strip()]
