"""``train(config)``: data -> features -> Trainer -> adapter directory with ``setllm.json``.

Multi-process: ``accelerate launch "$(command -v setllm)" train ...`` (DDP, FSDP or DeepSpeed
per ``accelerate config``; ``--cpu`` for gloo on CPU) runs the same code on every process;
the Trainer shards each global batch across the ranks and syncs gradients, so N processes
with ``--batch-size B`` train like one with ``--batch-size N*B``. Rank 0 alone locks
``--out`` and writes in it (run.json, the log, the adapter); checkpoints are the Trainer's.
"""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core.layout.variants import get_variant
from ..core.model.families import check_model
from ..core.model.fit import check_length
from ..core.tokens.codec import Codec
from ..errors import InputError, SetLLMWarning
from ..io import rundir
from ..loading import (
    DEFAULT_MODEL,
    METADATA_FILE,
    AdapterInfo,
    check_adapter,
    load_model,
    make_adapter_portable,
)
from ..loading.adapters import apply_adapter, read_json
from ..loading.options import apply_threads
from .collator import (
    PreferenceCollator,
    SetCollator,
    check_rankable,
    featurize,
    featurize_preferences,
)
from .config import PREFERENCE_READOUTS, TrainConfig
from .examples import load_examples
from .trainer import LOG_FILE, BarCallback, JsonlLogCallback, Preference, SetLLMTrainer

TEMPLATE = "modified"  # the paper's template: options in the prompt as a set


@dataclass
class TrainResult:
    out: str
    examples: int
    steps: int
    final_loss: float | None
    runtime_s: float
    tokens: int


def build_model(cfg: TrainConfig, model=None, tokenizer=None):
    """The base model (loaded from ``cfg.model`` unless given) with a fresh LoRA adapter,
    ``cfg.init_adapter`` continued, or all weights trainable (``full_finetune``)."""
    if model is None:
        model, tokenizer = load_model(cfg.model, attn_implementation=cfg.attn, dtype=cfg.base_dtype)
    model.train()
    if cfg.full_finetune:
        return model, tokenizer
    from transformers import set_seed

    set_seed(cfg.seed)  # the LoRA init is random: same seed, same starting adapter
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise InputError("LoRA training needs peft, a core dependency of setllm: reinstall setllm") from None
    with _library_deprecations_hidden():
        if cfg.init_adapter:
            _check_init_variant(cfg)
            base = cfg.model or DEFAULT_MODEL
            peft = apply_adapter(model, check_adapter(cfg.init_adapter, base), base, trainable=True)
            # The adapter names its portable base (a hub id): PEFT would look that up on every
            # save (a warning offline, a hub query online). Name the model loaded here, as
            # get_peft_model does; save() makes the final adapter portable again.
            peft.peft_config["default"].base_model_name_or_path = model.__dict__.get("name_or_path") or None
            return peft, tokenizer
        targets = cfg.lora_targets if cfg.lora_targets == "all-linear" else [t.strip() for t in cfg.lora_targets.split(",")]
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout, target_modules=targets, task_type="CAUSAL_LM")
        return get_peft_model(model, lora), tokenizer


@contextmanager
def _library_deprecations_hidden():
    """PEFT and the Trainer call a transformers method deprecated in 5.x on every run; the
    warning says nothing the user can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def _check_init_variant(cfg: TrainConfig) -> None:
    was = AdapterInfo.read(cfg.init_adapter).variant
    if was and was != cfg.variant:
        warnings.warn(f"--init-adapter was trained as {was}, continuing it as {cfg.variant}", SetLLMWarning, stacklevel=3)


RUN_FILE = "run.json"  # the settings a --resume must match
# What a run writes into --out; --overwrite removes exactly these (never other files there).
RUN_OUTPUTS = ("checkpoint-*", LOG_FILE, RUN_FILE, METADATA_FILE, "adapter_model.safetensors", "adapter_config.json",
               "model.safetensors", "model-*.safetensors", "model.safetensors.index.json", "config.json", "generation_config.json",
               "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "README.md")


def checkpoint_to_resume(cfg: TrainConfig) -> str | None:
    """The newest checkpoint under ``--resume``; refuse to mix a fresh run into old ones."""
    from transformers.trainer_utils import get_last_checkpoint

    out = Path(cfg.out)
    last = get_last_checkpoint(str(out)) if out.is_dir() else None
    if cfg.resume and last is None:
        raise InputError(f"--resume: no checkpoint-* directory in {out} to resume from")
    if not cfg.resume and last is not None and not cfg.overwrite:
        raise InputError(f"{out} already holds checkpoints ({Path(last).name}); pass --resume to continue, or --overwrite to start over")
    if cfg.resume:
        check_same_run(cfg)
    return last if cfg.resume else None


def finished_run(cfg: TrainConfig, checkpoint: str) -> TrainResult | None:
    """The result a finished run recorded, when ``checkpoint`` is its last step and its final
    save completed (``setllm.json`` is written last); None when there is training, or only
    the final save, left to do."""
    from transformers import TrainerState

    state_file, meta = Path(checkpoint) / "trainer_state.json", Path(cfg.out) / METADATA_FILE
    if not (state_file.is_file() and meta.is_file()):
        return None
    state = TrainerState.load_from_json(str(state_file))
    if state.global_step < state.max_steps:
        return None
    summary = training_record(cfg.out) or {}
    if summary.get("steps") != state.global_step:
        return None
    return TrainResult(cfg.out, summary.get("examples", 0), state.global_step, summary.get("final_loss"), 0.0, summary.get("tokens", 0))


def check_same_run(cfg: TrainConfig) -> None:
    """``--resume`` continues *this* run: data, optimisation and model must be what the
    checkpoints were trained with (only how the run is shown may change)."""
    path = Path(cfg.out) / RUN_FILE
    if not path.is_file():
        raise InputError(f"--resume: {path} is missing, so the checkpoints cannot be matched to these settings; use --overwrite to start over")
    old, new = json.loads(path.read_text(encoding="utf-8")), _run_settings(cfg)
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if diff:
        shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in diff[:3])
        raise InputError(f"--resume: {cfg.out} was trained with other settings ({shown}); resume with the same ones, or --overwrite")


def _run_settings(cfg: TrainConfig) -> dict:
    # Where the data lives and how attention is computed do not change what is trained.
    return {k: v for k, v in cfg.recorded().items() if k not in ("data_dir", "attn", "allow_untested", "threads")}


def clear_run(out: Path) -> None:
    """``--overwrite``: remove everything an earlier run wrote, so nothing of it is resumed."""
    for pattern in RUN_OUTPUTS:
        for path in out.glob(pattern):
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def train(cfg: TrainConfig, callbacks: list | None = None, model=None, tokenizer=None) -> TrainResult:
    """Run one training stage; a given base ``model``/``tokenizer`` replaces ``cfg.model``
    (tests, notebooks); it is wrapped with LoRA as a loaded one would be. ``--out`` is
    checked writable first and locked for the run; one it created is removed again if the
    run stops before writing anything."""
    apply_threads(cfg.threads)
    world = rundir.World.start(cpu=cfg.use_cpu)
    with rundir.claimed(cfg.out, world) as out:
        return _train(cfg, out, callbacks, model, tokenizer, world)


def _train(cfg: TrainConfig, out: Path, callbacks, model, tokenizer, world: rundir.World) -> TrainResult:
    resume_from = checkpoint_to_resume(cfg)
    if resume_from and (done := finished_run(cfg, resume_from)):
        if world.is_main:
            print(f"setllm train: {cfg.out} is complete ({done.steps} steps, {Path(resume_from).name}); nothing to train "
                  "(--overwrite starts it over)", file=sys.stderr)
        return done
    examples, load_report = load_examples(cfg.specs, cfg.data_dir, cfg.limit, cfg.sample_seed, cfg.skip_bad)
    if cfg.objective == "preference":
        check_rankable(examples)  # before the model loads
    model, tokenizer = build_model(cfg, model, tokenizer)
    check_length(model.config, cfg.max_length)
    check_model(model, cfg.allow_untested)
    variant = get_variant(cfg.variant)
    # Inference's own codec encodes the training prompts: one code path.
    codec = Codec.for_model(model, tokenizer, variant, exact=variant.invariant, chat=cfg.chat)
    if cfg.objective == "preference":
        features, length_report = featurize_preferences(codec, examples, cfg.max_length)
    else:
        features, length_report = featurize(codec, examples, cfg.max_length, cfg.overlong, cfg.min_response_tokens)
    if not features:
        raise InputError(f"no example fits --max-length {cfg.max_length}: {length_report.line(cfg.max_length)}")
    if world.is_main:  # the only writer (every rank read --out above, before this changes it)
        for line in [*load_report.lines(), length_report.line(cfg.max_length)]:
            print(f"setllm train: {line}", file=sys.stderr)
        if cfg.overwrite and not cfg.resume:
            clear_run(out)
        if not cfg.resume:
            (out / RUN_FILE).write_text(json.dumps(_run_settings(cfg), indent=2) + "\n")
    world.barrier()
    trainer = make_trainer(cfg, model, codec, features, callbacks)
    with _library_deprecations_hidden():
        output = trainer.train(resume_from_checkpoint=resume_from)
    trainer.count_tokens()  # every rank's share, also when the last steps were not logged
    save(cfg, trainer, tokenizer, len(features), output)
    return TrainResult(cfg.out, len(features), trainer.state.global_step, _final_loss(trainer, output), output.metrics.get("train_runtime", 0.0),
                       trainer.tokens_seen)


def make_trainer(cfg: TrainConfig, model, codec: Codec, features: list[dict], callbacks: list | None = None) -> SetLLMTrainer:
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    preference = (Preference(cfg.preference_beta, cfg.preference_margin, cfg.preference_score, cfg.preference_sft)
                  if cfg.objective == "preference" else None)
    collator = (PreferenceCollator if preference else SetCollator)(codec.variant.positions, codec.pad_id)
    trainer = SetLLMTrainer(
        model=model, args=cfg, train_dataset=features, data_collator=collator, variant=codec.variant, preference=preference,
        callbacks=[JsonlLogCallback(Path(cfg.out) / LOG_FILE), *(callbacks or [])],
    )
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    if not cfg.disable_tqdm:
        trainer.add_callback(BarCallback())
    return trainer


def save(cfg: TrainConfig, trainer: SetLLMTrainer, tokenizer, n_examples: int, output) -> None:
    """The adapter (safetensors) or full model, plus ``setllm.json`` for ``--adapter DIR``."""
    out = Path(cfg.out)
    trainer.save_model(str(out))  # handles FSDP/DeepSpeed gathering
    if not trainer.is_world_process_zero():
        return
    (out / "training_args.bin").unlink(missing_ok=True)  # a pickle; loaders here refuse pickles
    if cfg.full_finetune:
        tokenizer.save_pretrained(out)
    else:  # loadable by PEFT's own API, with no machine-local path in it
        make_adapter_portable(out, cfg.model)
    summary = {
        "data": cfg.specs, "examples": n_examples, "steps": trainer.state.global_step, "final_loss": _final_loss(trainer, output),
        "train_runtime_s": output.metrics.get("train_runtime"), "tokens": trainer.tokens_seen,
        "config": cfg.recorded(), "precision": precision_used(trainer),
    }
    if cfg.init_adapter:  # the stages before this one: the file says what the adapter is, not only its last stage
        summary["init_training"] = training_record(cfg.init_adapter)
    # What the preference loss ranked, as the judge reads it: read so by default.
    readout = PREFERENCE_READOUTS[cfg.preference_score] if cfg.objective == "preference" else None
    AdapterInfo(cfg.model or DEFAULT_MODEL, cfg.variant, TEMPLATE, cfg.chat, eos=True, readout=readout).write(out, training=summary)


def precision_used(trainer: SetLLMTrainer) -> dict:
    """What the run computed in (the accelerator's mixed precision, however it was asked for:
    ``--bf16`` or the launcher's config) and the dtype of the frozen base weights, read from
    the trained model itself."""
    compute = {"no": "fp32"}.get(str(trainer.accelerator.mixed_precision), str(trainer.accelerator.mixed_precision))
    model = trainer.accelerator.unwrap_model(trainer.model)
    frozen = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters() if not p.requires_grad})
    trained = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters() if p.requires_grad})
    return {"compute": compute, "base_weights": ",".join(frozen) or None, "trained_weights": ",".join(trained) or None}


def training_record(adapter_dir: str | Path) -> dict | None:
    """The ``training`` record of an adapter's ``setllm.json`` (None if it has none)."""
    path = Path(adapter_dir) / METADATA_FILE
    return read_json(path).get("training") if path.is_file() else None


def _final_loss(trainer, output=None) -> float | None:
    """The last logged loss; with fewer steps than --logging-steps, the Trainer's mean loss."""
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    if losses:
        return losses[-1]
    return output.metrics.get("train_loss") if output is not None else None


__all__ = ["TrainResult", "build_model", "train"]
