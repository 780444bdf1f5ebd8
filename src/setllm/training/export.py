"""What leaves a training run: a benchmark split rendered as training data (any template),
and a trained adapter cut down to what loading needs (``setllm export``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from ..errors import InputError
from ..loading import METADATA_FILE, AdapterInfo, make_adapter_portable
from ..tasks import get_task, load_records


def export_split(dataset: str | None, template: str, out: str | Path, split: str = "train", data_dir: str | None = None,
                 limit: int | None = None, subset_seed: int | None = None, data_file: str | None = None) -> int:
    """Write a split (or ``data_file``, a user's multiple-choice rows; ``dataset`` None: the
    generic templates, as ``setllm eval --data-file`` reads it) rendered with ``template`` as
    ``{"id", "prompt", "response"}`` lines; returns the number of examples."""
    task = get_task(dataset)
    records, _ = load_records(task, split, data_dir, data_file, limit, subset_seed)
    render = task.template(template).render
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for r in records:
            shown = render(r, tuple(range(len(r.choices))))
            row = {"id": r.id, "prompt": shown.prompt.to_json()["prompt"], "response": shown.options[r.label]}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(records)


def export_adapter(src: str | Path, dest: str | Path, dtype: str = "bf16", scale: float = 1.0, overwrite: bool = False) -> Path:
    """Copy what loading needs (adapter config, weights, setllm.json) to ``dest``, the weights
    cast to ``dtype`` (bf16 halves the size; LoRA deltas are small, so the loss is in the
    low bits): no checkpoints, no pickles, no generated model card. A ``dest`` that already
    holds files is refused unless ``overwrite`` (which replaces those three files, and
    leaves any others), and ``dest`` is never ``src``.

    ``scale`` < 1 ships the base weights plus ``scale`` times the trained LoRA delta: a
    weight-space ensemble of the base and the finetuned model (WiSE-FT, Wortsman et al. 2022),
    which keeps more of the base model's behaviour on formats the training data never had.
    The delta is B @ A, so only the B matrices are multiplied; ``setllm.json`` records it."""
    from safetensors.torch import load_file, save_file

    if not 0.0 <= scale <= 1.0:  # also refuses NaN
        raise InputError(f"--scale must be in [0, 1] (0: the base model, 1: the trained adapter), got {scale}")
    src, dest = Path(src), Path(dest)
    missing = [n for n in ("adapter_config.json", "adapter_model.safetensors", METADATA_FILE) if not (src / n).is_file()]
    if missing:
        raise InputError(f"{src}: not a finished `setllm train` adapter (missing {', '.join(missing)})")
    if dest.exists() and not dest.is_dir():
        raise InputError(f"{dest}: not a folder")
    if dest.is_dir() and dest.resolve() == src.resolve():
        raise InputError(f"{dest} is the run folder itself; export to a folder of its own")
    held = sorted(p.name for p in dest.iterdir()) if dest.is_dir() else []
    if held and not overwrite:
        shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
        raise InputError(f"{dest} already holds files ({shown}); use another folder, or --overwrite to write into it")
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("adapter_config.json", METADATA_FILE):
        shutil.copyfile(src / name, dest / name)
    make_adapter_portable(dest, AdapterInfo.read(src).base_model)
    if scale != 1.0:
        meta = json.loads((dest / METADATA_FILE).read_text(encoding="utf-8"))
        meta["delta_scale"] = meta.get("delta_scale", 1.0) * scale  # scaling a scaled export composes
        (dest / METADATA_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    weights = load_file(src / "adapter_model.safetensors")
    cast = {"bf16": torch.bfloat16, "float32": torch.float32}[dtype]
    weights = {k: v.float() * scale if "lora_B" in k else v for k, v in weights.items()}
    save_file({k: v.to(cast).contiguous() for k, v in weights.items()}, dest / "adapter_model.safetensors", metadata={"format": "pt"})
    (dest / "adapter_model.safetensors").chmod(0o644)  # package data: readable by every user
    return dest
