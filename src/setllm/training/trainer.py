"""Instruction tuning of a Set-LLM variant on the Hugging Face Trainer.

The Trainer supplies checkpoints, ``--resume`` (optimizer, scheduler, RNG and data order),
gradient accumulation and multi-device runs through ``accelerate launch``; this module
only adds the Set-LLM forward (the variant's mask and positions, via
:func:`setllm.core.forward.runtime.forward`, the function inference uses) and a response-only loss.

Shapes: B batch, N tokens, R response columns kept, V vocabulary.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import Trainer, TrainerCallback
from transformers.trainer_callback import ProgressCallback
from transformers.trainer_pt_utils import LengthGroupedSampler
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..core.forward.runtime import forward
from ..core.layout.variants import Variant
from ..core.model.owner import weights
from .collator import IGNORE, layout_of

LOG_FILE = "train_log.jsonl"


class _Forwarder:
    """What :func:`setllm.core.forward.runtime.forward` needs from a model, for a DDP/FSDP-wrapped one:
    config, device and dtype from the inner model, the call through the wrapper (which
    syncs gradients)."""

    def __init__(self, wrapped, inner):
        self._wrapped, self._inner, self.config, self.device, self.dtype = wrapped, inner, inner.config, inner.device, inner.dtype

    def get_base_model(self):
        """The transformers model inside, where setllm's layers are installed (:func:`setllm.core.model.install.install`)."""
        return weights(self._inner)

    def __call__(self, **kwargs):
        return self._wrapped(**kwargs)


def response_columns(labels: torch.Tensor) -> int:
    """R: the most response tokens in any row (left padding puts them all at the end)."""
    return int((labels != IGNORE).sum(dim=1).max())


def shifted(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``logits [B, R+1, V]`` are the last R+1 columns; column j predicts token j+1, so the
    first R predict the last R label columns: (their logits [B*R, V] in fp32, targets [B, R]).
    Prompt and padding labels are -100."""
    r = logits.shape[1] - 1
    return logits[:, :-1].flatten(0, 1).float(), labels[:, -r:]


def response_loss(logits: torch.Tensor, labels: torch.Tensor, num_items: torch.Tensor | int | None = None) -> torch.Tensor:
    """Cross-entropy on response tokens only (``logits`` as in :func:`shifted`). Divided by
    ``num_items`` (response tokens in the whole accumulated batch) when given, so that
    gradient accumulation weighs every token equally.
    """
    predicted, targets = shifted(logits, labels)
    total = F.cross_entropy(predicted, targets.flatten(), ignore_index=IGNORE, reduction="sum")
    return total / (num_items if num_items is not None else (targets != IGNORE).sum().clamp(min=1))


def response_logits(model, variant: Variant, inputs: dict, logits_only_for_response: bool = True):
    """Forward a collated batch under ``variant``: (logits of the last R+1 columns, outputs)."""
    labels = inputs["labels"]
    keep = response_columns(labels) + 1 if logits_only_for_response else 0
    out = forward(model, variant, inputs["input_ids"], inputs["position_ids"], layout_of(inputs), logits_to_keep=keep)
    return (out.logits if keep else out.logits[:, -(response_columns(labels) + 1):]), out


def set_llm_loss(model, variant: Variant, inputs: dict, num_items=None, logits_only_for_response: bool = True):
    """Forward a collated batch under ``variant`` and return (loss, outputs)."""
    logits, out = response_logits(model, variant, inputs, logits_only_for_response)
    return response_loss(logits, inputs["labels"].to(logits.device), num_items), out


def response_logprob(logits: torch.Tensor, labels: torch.Tensor, mean: bool = False) -> torch.Tensor:
    """[B]: each row's log-likelihood of its response tokens, summed (how ``choose`` and the
    judge's ``likelihood`` readout score an option) or per token (``mean``, the judge's
    ``mean`` readout); ``logits`` as in :func:`shifted`."""
    predicted, targets = shifted(logits, labels)
    nll = F.cross_entropy(predicted, targets.flatten(), ignore_index=IGNORE, reduction="none").view_as(targets)
    total = -nll.sum(dim=1)
    return total / (targets != IGNORE).sum(dim=1).clamp(min=1) if mean else total


def preference_loss(scores: torch.Tensor, group: torch.Tensor, chosen: torch.Tensor, beta: float, margin: float) -> torch.Tensor:
    """SimPO's loss (Meng et al. 2024): ``-log sigmoid(beta * (s_better - s_other) - margin)``
    for each other candidate of a row, averaged within the row, then over rows. ``scores``
    [B]: one per candidate row; ``group`` [B]: its judge row (0..G-1, each row's better
    candidate is its only ``chosen`` one). Reference-free: no second model in memory."""
    best = scores[chosen][group[~chosen]]  # the better candidate's score, for each other candidate
    pair = -F.logsigmoid(beta * (best - scores[~chosen]) - margin)
    rows = int(group.max()) + 1
    per_row = torch.zeros(rows, dtype=pair.dtype, device=pair.device).index_add_(0, group[~chosen], pair)
    others = torch.bincount(group[~chosen], minlength=rows).clamp(min=1)
    return (per_row / others).mean()


@dataclass(frozen=True)
class Preference:
    """How ``--objective preference`` ranks: SimPO's ``beta`` and ``margin`` on each
    candidate's ``score`` ("mean" or "sum" of its response log-likelihood), plus ``sft`` times
    the cross-entropy of the better candidates (CPO's NLL term, Xu et al. 2024: it keeps the
    adapter a generator while it learns to rank; 0 = SimPO alone)."""

    beta: float = 2.0
    margin: float = 1.0
    score: str = "mean"
    sft: float = 0.0


def set_llm_preference_loss(model, variant: Variant, inputs: dict, preference: Preference, logits_only_for_response: bool = True):
    """The :class:`Preference` loss of a :class:`~setllm.training.collator.PreferenceCollator` batch: (loss, outputs)."""
    logits, out = response_logits(model, variant, inputs, logits_only_for_response)
    labels, chosen = inputs["labels"].to(logits.device), inputs["chosen"].to(logits.device)
    scores = response_logprob(logits, labels, mean=preference.score == "mean")
    loss = preference_loss(scores, inputs["group"].to(scores.device), chosen, preference.beta, preference.margin)
    if preference.sft:
        loss = loss + preference.sft * response_loss(logits[chosen], labels[chosen])
    return loss, out


class SetLLMTrainer(Trainer):
    """A Trainer whose loss runs the model under a Set-LLM variant."""

    def __init__(self, *args, variant: Variant, logits_only_for_response: bool = True, preference: Preference | None = None,
                 **kwargs):
        """``preference``: train with :func:`set_llm_preference_loss` instead of
        cross-entropy (batches from :class:`~setllm.training.collator.PreferenceCollator`)."""
        super().__init__(*args, **kwargs)
        self.variant = variant
        self.logits_only_for_response = logits_only_for_response
        self.preference = preference
        # The cross-entropy divides by the token count of the accumulated batch: tell the
        # Trainer not to divide again by the accumulation steps. The preference loss is a
        # mean over the micro-batch's rows: the Trainer divides by the accumulation steps.
        self.model_accepts_loss_kwargs = preference is None
        # Real tokens trained on, all ranks: those of earlier runs (resume) + this run's.
        self.tokens_seen, self._tokens_resumed, self._tokens_here = 0, 0, 0
        self._tokens_at_log, self._time_at_log = 0, time.perf_counter()
        clock = TokenClock()
        clock.trainer = self
        self.add_callback(clock)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        inner = self.accelerator.unwrap_model(model)
        target = model if inner is model else _Forwarder(model, inner)
        if self.preference is not None:
            loss, out = set_llm_preference_loss(target, self.variant, inputs, self.preference, self.logits_only_for_response)
        else:
            loss, out = set_llm_loss(target, self.variant, inputs, num_items_in_batch, self.logits_only_for_response)
        if model.training:
            self._tokens_here += int(inputs["valid"].sum())
        if self.preference is None and self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes  # DDP averages gradients; the count is global
        return (loss, out) if return_outputs else loss

    def _run_epoch(self, *args, **kwargs):
        """The Trainer's epoch, unless the run already reached its last step: the Trainer checks
        ``max_steps`` only after an optimizer step, so resumed from the last checkpoint
        (killed before its final save) it would train one step past ``--max-steps``."""
        if self.state.global_step >= self.state.max_steps:
            self.control.should_training_stop = True
            return None
        return super()._run_epoch(*args, **kwargs)

    def _get_train_sampler(self, train_dataset=None):
        """The Trainer's sampler, except for ``group_by_length``: an :class:`EpochLengthSampler`
        (each epoch's order a function of the seed and the epoch alone, so ``--resume`` restores
        it from any step), grouping by the *global* batch (all ranks): the ranks' slices of one
        step are then exactly the one-process batch, so N processes train on the same examples
        per step as one process with N times the batch."""
        sampler = super()._get_train_sampler(train_dataset)
        if self.args.train_sampling_strategy != "group_by_length" or sampler is None:
            return sampler
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        batch = self.args.train_batch_size * self.args.gradient_accumulation_steps * self.args.world_size
        return EpochLengthSampler(batch, lengths=sampler.lengths, seed=seed)

    def count_tokens(self) -> int:
        """Update ``tokens_seen`` from every rank's count (a collective: all ranks call it)."""
        here = torch.tensor(self._tokens_here, device=self.args.device)
        self.tokens_seen = self._tokens_resumed + int(self.accelerator.reduce(here, reduction="sum"))
        return self.tokens_seen

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Add tokens/s (real tokens, padding excluded, all ranks) since the last log."""
        now = time.perf_counter()
        if "loss" in logs:  # the Trainer logs on every rank at the same step: the sum is safe
            logs["tokens"] = self.count_tokens()
            logs["tokens_per_s"] = round((self.tokens_seen - self._tokens_at_log) / max(now - self._time_at_log, 1e-9), 1)
            self._tokens_at_log, self._time_at_log = self.tokens_seen, now
        super().log(logs, start_time)


class EpochLengthSampler(LengthGroupedSampler):
    """transformers' length-grouped order, drawn from a generator seeded with ``seed + epoch``.

    The Trainer's sampler draws from the global RNG when its epoch starts. A run resumed in
    the middle of epoch e > 0 starts that epoch with the RNG of a fresh process, not the one
    the uninterrupted run had after e epochs of training, so its remaining batches differed.
    Here the order depends on nothing but the seed and the epoch (as accelerate's seedable
    random sampler does for ``random``); the Trainer calls :meth:`set_epoch` every epoch."""

    def __init__(self, batch_size: int, lengths: list[int], seed: int):
        super().__init__(batch_size, lengths=lengths, generator=torch.Generator())
        self.seed = seed
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        self.generator.manual_seed(self.seed + self.epoch)
        return super().__iter__()


class TokenClock(TrainerCallback):
    """Starts the tokens/s clock when training starts, not when the Trainer is built.

    Every checkpoint records the token count at its step, so that ``--resume`` carries it
    on and the log's ``tokens`` column stays cumulative across restarts, also when no log
    line fell between the last checkpoint and the kill (``--logging-steps`` > ``--save-steps``).
    """

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        trainer = getattr(self, "trainer", None)
        if trainer is None:
            return
        if state.global_step > 0:
            trainer._tokens_resumed = trainer.tokens_seen = tokens_at_checkpoint(Path(args.output_dir), state.global_step)
        trainer._tokens_at_log, trainer._time_at_log = trainer.tokens_seen, time.perf_counter()

    def on_save(self, args, state, control, **kwargs):
        trainer = getattr(self, "trainer", None)
        if trainer is None:
            return
        tokens = trainer.count_tokens()  # a collective: every rank saves, rank 0 writes
        checkpoint = _checkpoint_dir(Path(args.output_dir), state.global_step)
        if state.is_world_process_zero and checkpoint.is_dir():
            (checkpoint / TOKENS_FILE).write_text(json.dumps({"step": state.global_step, "tokens": tokens}) + "\n")


TOKENS_FILE = "setllm_tokens.json"


def _checkpoint_dir(out: Path, step: int) -> Path:
    return out / f"{PREFIX_CHECKPOINT_DIR}-{step}"


def tokens_at_checkpoint(out: Path, step: int) -> int:
    """Tokens trained on up to ``step``: the checkpoint's record, else (a checkpoint written
    before checkpoints recorded it) the last log line at or before ``step``."""
    recorded = _checkpoint_dir(out, step) / TOKENS_FILE
    if recorded.is_file():
        return int(json.loads(recorded.read_text())["tokens"])
    return tokens_logged_by(out / LOG_FILE, step)


def tokens_logged_by(log: Path, step: int) -> int:
    """The cumulative token count of the last log line at or before ``step`` (0 if none).

    A killed run may have logged steps past its last checkpoint; those are ignored.
    """
    tokens = 0
    if log.exists():
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            if "tokens" in entry and entry.get("step", step + 1) <= step:
                tokens = entry["tokens"]
    return tokens


class JsonlLogCallback(TrainerCallback):
    """Appends every log (loss, lr, tokens/s, ...) as one JSON line to ``train_log.jsonl``
    (rank 0 only), with the number of processes that trained (``world_size``)."""

    def __init__(self, path: Path):
        self.path = path

    def on_train_begin(self, args, state, control, **kwargs):
        """On --resume, forget rows logged after the checkpoint: those steps run again."""
        if state.is_world_process_zero and state.global_step > 0 and self.path.exists():
            kept = [line for line in self.path.read_text().splitlines() if json.loads(line).get("step", 0) <= state.global_step]
            self.path.write_text("".join(line + "\n" for line in kept))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            with self.path.open("a") as f:
                row = {"step": state.global_step, "epoch": state.epoch, "time": round(time.time(), 1), "world_size": args.world_size, **logs}
                f.write(json.dumps(row) + "\n")


class BarCallback(ProgressCallback):
    """The Trainer's progress bar, with loss and tokens/s on the bar instead of dict dumps."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not (state.is_world_process_zero and self.training_bar is not None and logs):
            return
        if "loss" in logs:
            self.training_bar.set_postfix(loss=f"{logs['loss']:.4f}", tok_s=logs.get("tokens_per_s"), refresh=False)
        # The Trainer's closing dict (train_runtime, ...) is summarised by `setllm train` itself.
