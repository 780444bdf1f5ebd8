"""The one training config: transformers' ``TrainingArguments`` plus what setllm adds.

Optimisation, logging, checkpointing and devices are ``TrainingArguments`` fields (every
``setllm train`` flag of the HF Trainer works: ``--learning_rate``, ``--bf16``,
``--lr_scheduler_type``, ...); this class adds the data, the variant and LoRA, and changes
only the defaults that differ. Those are the paper's (Egressy & Stühmer 2025): LoRA rank 8,
alpha 1 on every linear layer of attention and MLP, AdamW with no weight decay, a linear
schedule warming up over 10% of the steps, seed 42. The learning rate default sits inside
the paper's grid (1e-4 .. 3e-3); with alpha 1 and rank 8 the LoRA update is scaled by 1/8,
so small learning rates move the model very little.

Short names kept from earlier setllm versions are aliases: ``--out``, ``--lr``,
``--batch-size``, ``--grad-accum``, ``--epochs``, ``--warmup``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import TrainingArguments

from ..core.layout.variants import ATTENTION_BACKENDS, DEFAULT_VARIANT, VARIANTS, check_attention
from ..errors import InputError
from ..loading.options import THREADS_HELP

OVERLONG_POLICIES = ("truncate", "skip")
OBJECTIVES = ("sft", "preference")
# --preference-score: per token, or summed as choose reads options; the judge readout each one is.
PREFERENCE_READOUTS = {"mean": "mean", "sum": "likelihood"}
PREFERENCE_SCORES = tuple(PREFERENCE_READOUTS)
# Fields of this class that are setllm's own (recorded in setllm.json with the HF ones below).
RECORDED_HF_FIELDS = ("learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "num_train_epochs", "max_steps",
                      "warmup_steps", "weight_decay", "max_grad_norm", "seed", "train_sampling_strategy", "bf16")


def _help(text: str, **extra) -> dict:
    return {"help": text, **extra}


@dataclass
class TrainConfig(TrainingArguments):
    """Everything ``setllm train`` needs: ``TrainingArguments`` + data, variant, LoRA."""

    # -- what to train --------------------------------------------------------------------
    data: str = field(default="", metadata=_help(
        "comma-separated data specs: a benchmark (arc_challenge, piqa, commonsense_qa, social_iqa), "
        "ultrafeedback, ultrafeedback-judge, or a JSONL file of {\"prompt\": <set prompt>, \"response\": str} or of judge rows; "
        "SPEC:N takes N examples of it", metavar="SPEC[,SPEC...]"))
    model: str | None = field(default=None, metadata=_help("base model: local path or hub id; default: the embedded SmolLM2-135M-Instruct", metavar="M"))
    variant: str = field(default=DEFAULT_VARIANT, metadata=_help("variant to train (mask + positions)", choices=list(VARIANTS)))
    chat: bool = field(default=False, metadata=_help("wrap prompts in the tokenizer's chat template (recorded in setllm.json)"))
    init_adapter: str | None = field(default=None, metadata=_help(
        "continue training this adapter (e.g. after UltraFeedback pre-finetuning)", metavar="DIR"))
    full_finetune: bool = field(default=False, metadata=_help("train all weights instead of a LoRA adapter (saves a full model)"))
    objective: str = field(default="sft", metadata=_help(
        "'sft': cross-entropy on the response; 'preference' (rows with candidates to rank: benchmark rows, "
        "ultrafeedback-judge, JSONL judge rows): SimPO's pairwise loss on each candidate's log-likelihood after the prompt, "
        "the right one above each other one", choices=list(OBJECTIVES)))
    preference_beta: float = field(default=2.0, metadata=_help(
        "--objective preference: scale of the log-likelihood difference (SimPO's beta)", metavar="B"))
    preference_margin: float = field(default=1.0, metadata=_help(
        "--objective preference: the margin the better candidate should win by, after scaling (SimPO's gamma)", metavar="G"))
    preference_score: str = field(default="mean", metadata=_help(
        "--objective preference: rank each candidate by its 'mean' log-likelihood per token (the judge's mean readout) or "
        "its 'sum' (how choose scores options; the judge's likelihood readout)", choices=list(PREFERENCE_SCORES)))
    preference_sft: float = field(default=0.0, metadata=_help(
        "--objective preference: add this times the cross-entropy of the better candidates (CPO's NLL term: the adapter "
        "stays a generator); 0: the ranking loss alone", metavar="W"))

    # -- data -----------------------------------------------------------------------------
    data_dir: str | None = field(default=None, metadata=_help(
        "directory with <name>/train.jsonl per benchmark and ultrafeedback/; default: $SETLLM_DATA_DIR if set, else the HF hub",
        metavar="D"))
    limit: int | None = field(default=None, metadata=_help("use at most N examples of each data spec", metavar="N"))
    sample_seed: int | None = field(default=None, metadata=_help(
        "with --limit: a seeded random sample instead of the first N records", metavar="S"))
    skip_bad: bool = field(default=False, metadata=_help("skip malformed records (counted and reported) instead of stopping"))
    max_length: int = field(default=256, metadata=_help("most tokens per example (prompt + response)", metavar="N"))
    overlong: str = field(default="truncate", metadata=_help(
        "over-long examples: 'truncate' cuts the response (examples whose prompt alone leaves fewer than "
        "min-response-tokens are skipped), 'skip' drops them; both are counted", choices=list(OVERLONG_POLICIES)))
    min_response_tokens: int = field(default=8, metadata=_help("fewest response tokens an example keeps after truncation", metavar="N"))

    # -- LoRA -----------------------------------------------------------------------------
    lora_r: int = field(default=8, metadata=_help("LoRA rank", metavar="R"))
    lora_alpha: float = field(default=1.0, metadata=_help("LoRA alpha (the update is scaled by alpha / r)", metavar="A"))
    lora_dropout: float = field(default=0.0, metadata=_help("LoRA dropout", metavar="P"))
    lora_targets: str = field(default="all-linear", metadata=_help(
        "modules LoRA adapts: 'all-linear' (attention and MLP, not the LM head) or comma-separated names", metavar="NAMES"))

    # -- running --------------------------------------------------------------------------
    resume: bool = field(default=False, metadata=_help("continue from the newest checkpoint in --out"))
    overwrite: bool = field(default=False, metadata=_help("allow an --out that already holds checkpoints (without --resume)"))
    attn: str = field(default="sdpa", metadata=_help(
        f"attention implementation: {', '.join(ATTENTION_BACKENDS)} (flash_attention_2 takes no set mask)", metavar="IMPL"))
    allow_untested: bool = field(default=False, metadata=_help("try a model type setllm has not verified"))
    threads: int | None = field(default=None, metadata=_help(THREADS_HELP, metavar="N"))

    # -- TrainingArguments fields whose defaults (or short names) are setllm's ------------
    output_dir: str | None = field(default=None, metadata=_help(
        "output directory (adapter, setllm.json, train_log.jsonl, checkpoints)", metavar="DIR", aliases=["--out"]))
    learning_rate: float = field(default=1e-3, metadata=_help("peak learning rate (paper grid: 1e-4 .. 3e-3)", metavar="X", aliases=["--lr"]))
    per_device_train_batch_size: int = field(default=8, metadata=_help("examples per device per step", metavar="N", aliases=["--batch-size"]))
    gradient_accumulation_steps: int = field(default=1, metadata=_help("gradient accumulation steps", metavar="N", aliases=["--grad-accum"]))
    num_train_epochs: float = field(default=1.0, metadata=_help("passes over the data (ignored when --max-steps is set)", metavar="X", aliases=["--epochs"]))
    warmup_steps: float = field(default=0.1, metadata=_help("warmup: a fraction of the steps (< 1) or a number of steps", metavar="X", aliases=["--warmup"]))
    logging_steps: float = field(default=10, metadata=_help("log loss and tokens/s every N steps", metavar="N"))
    save_steps: float = field(default=50, metadata=_help("checkpoint every N steps (for --resume)", metavar="N"))
    save_total_limit: int | None = field(default=2, metadata=_help("keep the N newest checkpoints", metavar="N"))
    train_sampling_strategy: str = field(default="group_by_length", metadata=_help(
        "'group_by_length' batches examples of similar length together (less padding; still seeded and resumable), or 'random'",
        choices=["random", "sequential", "group_by_length", "batch_rebalance"]))
    disable_tqdm: bool | None = field(default=None, metadata=_help(
        "no progress bar (default: shown on a terminal)", nargs="?", const=True, aliases=["--no-progress"]))
    report_to: str | None = field(default="none", metadata=_help("experiment trackers to report to (none by default)"))
    # The collator's layout tensors are not model arguments: the Trainer must not drop them.
    remove_unused_columns: bool = field(default=False, metadata=_help("keep False: setllm's batches carry layout tensors"))
    # Every trainable tensor is used in every step.
    ddp_find_unused_parameters: bool | None = field(default=False, metadata=_help("DDP: look for unused parameters (not needed)"))

    def __post_init__(self) -> None:
        self._check_setllm_fields()
        self.use_cpu = self.use_cpu or not torch.cuda.is_available()
        super().__post_init__()
        check_state_dict_type(fsdp_state_dict_type(self))

    def _check_setllm_fields(self) -> None:
        if not self.data.strip():
            raise InputError("no training data: pass --data SPEC[,SPEC...] (e.g. --data ultrafeedback,arc_challenge)")
        if not self.output_dir:
            raise InputError("no output directory: pass --out DIR")
        if self.variant not in VARIANTS:
            raise InputError(f"unknown variant {self.variant!r}; choose one of: {', '.join(VARIANTS)}")
        check_attention(self.attn)
        if self.overlong not in OVERLONG_POLICIES:
            raise InputError(f"--overlong must be one of {', '.join(OVERLONG_POLICIES)}, got {self.overlong!r}")
        for name, flag in (("per_device_train_batch_size", "--batch-size"), ("gradient_accumulation_steps", "--grad-accum"),
                           ("max_length", "--max-length"), ("logging_steps", "--logging-steps"), ("save_steps", "--save-steps"),
                           ("lora_r", "--lora-r"), ("min_response_tokens", "--min-response-tokens")):
            if getattr(self, name) < 1:
                raise InputError(f"{flag} must be at least 1, got {getattr(self, name)}")
        for name in ("limit", "save_total_limit", "threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if self.max_steps == 0 or self.max_steps < -1:
            raise InputError(f"--max-steps must be at least 1, got {self.max_steps}")
        if not 0 < self.learning_rate < 1:
            raise InputError(f"--lr must be in (0, 1), got {self.learning_rate} (the paper's grid is 1e-4 .. 3e-3)")
        if self.num_train_epochs <= 0:
            raise InputError(f"--epochs must be positive, got {self.num_train_epochs}")
        if self.warmup_steps < 0:
            raise InputError(f"--warmup must be >= 0 (a fraction < 1 or a step count), got {self.warmup_steps}")
        if not 0 <= self.lora_dropout < 1:
            raise InputError(f"--lora-dropout must be in [0, 1), got {self.lora_dropout}")
        if self.min_response_tokens >= self.max_length:
            raise InputError(f"--min-response-tokens ({self.min_response_tokens}) must be below --max-length ({self.max_length})")
        if self.objective not in OBJECTIVES:
            raise InputError(f"--objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if self.preference_beta <= 0 or self.preference_margin < 0 or self.preference_sft < 0:
            raise InputError(f"--preference-beta must be positive, --preference-margin and --preference-sft at least 0, got "
                             f"{self.preference_beta}, {self.preference_margin} and {self.preference_sft}")
        if self.preference_score not in PREFERENCE_SCORES:
            raise InputError(f"--preference-score must be one of {', '.join(PREFERENCE_SCORES)}, got {self.preference_score!r}")
        if self.full_finetune and self.init_adapter:
            raise InputError("--init-adapter continues a LoRA adapter; it cannot be combined with --full-finetune")
        if self.init_adapter and not (Path(self.init_adapter) / "adapter_config.json").exists():
            raise InputError(f"--init-adapter {self.init_adapter}: no adapter_config.json there (expected a PEFT adapter directory)")

    @property
    def out(self) -> str:
        return str(self.output_dir)

    @property
    def specs(self) -> list[str]:
        return [s.strip() for s in self.data.split(",") if s.strip()]

    @property
    def precision(self) -> str:
        """What the Trainer computes in: ``bf16``, ``fp16`` or ``fp32``. ``--bf16``/``--fp16``,
        else the launcher's mixed precision (``accelerate launch`` with a config holding
        ``mixed_precision: bf16``, as ``configs/accelerate/fsdp.yaml`` does, computes in bf16
        without the flag): the rule by which the Trainer builds its accelerator."""
        if self.bf16 or self.fp16:
            return "bf16" if self.bf16 else "fp16"
        return {"bf16": "bf16", "fp16": "fp16"}.get(os.environ.get("ACCELERATE_MIXED_PRECISION", "no"), "fp32")

    @property
    def base_dtype(self) -> torch.dtype:
        """The dtype the base model is loaded in: bf16 when LoRA trains in bf16 (the frozen base
        weights are only ever read in bf16 then, so fp32 copies would double what a GPU holds,
        or FSDP shards); fp32 otherwise, and for a full fine-tune, whose weights are the master
        weights the optimizer updates."""
        return torch.bfloat16 if self.precision == "bf16" and not self.full_finetune else torch.float32

    def recorded(self) -> dict:
        """What setllm.json records of this run: setllm's fields and the HF ones that shape it;
        ``bf16`` is whether the run computed in bf16, however that was asked for."""
        own = [f for f in self.__dataclass_fields__ if f not in TrainingArguments.__dataclass_fields__ and f not in ("resume", "overwrite")]
        return {k: getattr(self, k) for k in [*own, *RECORDED_HF_FIELDS]} | {"bf16": self.precision == "bf16"}


# torch's StateDictType by value, as accelerate also reads FSDP_STATE_DICT_TYPE=1..3.
STATE_DICT_TYPES = {"1": "FULL_STATE_DICT", "2": "LOCAL_STATE_DICT", "3": "SHARDED_STATE_DICT"}


def fsdp_state_dict_type(cfg: TrainingArguments) -> str | None:
    """How FSDP will save this run (None: no FSDP), resolved as the Trainer's accelerator
    resolves it: the Trainer's own ``--fsdp_config``, else what ``accelerate launch`` put in the
    environment, else accelerate's default (FSDP1: full; FSDP2: sharded)."""
    plugin = getattr(cfg, "fsdp_plugin_args", None)
    if cfg.fsdp and plugin:
        kind = plugin.get("state_dict_type") or "FULL_STATE_DICT"
    elif os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        default = "FULL_STATE_DICT" if os.environ.get("FSDP_VERSION", "1") == "1" else "SHARDED_STATE_DICT"
        kind = os.environ.get("FSDP_STATE_DICT_TYPE") or default
    else:
        return None
    return STATE_DICT_TYPES.get(str(kind), str(kind).upper())


def check_state_dict_type(kind: str | None) -> None:
    """Refuse, before anything loads, an FSDP run that would save shards: its checkpoints
    and final save write each rank's slice of the weights, not an adapter setllm or PEFT can
    load, and that would only show after the whole run."""
    if kind is not None and kind != "FULL_STATE_DICT":
        raise InputError(f"FSDP would save with {kind}: each rank's shard of the weights, not an adapter; set fsdp_state_dict_type: "
                         "FULL_STATE_DICT in the accelerate config (configs/accelerate/fsdp.yaml does)")
