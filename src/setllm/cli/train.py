"""``setllm train``: adapt a model to set prompts (LoRA or full fine-tuning).

Every flag comes from :class:`setllm.training.TrainConfig` (transformers' ``TrainingArguments``
plus setllm's fields); ``--config FILE`` (YAML/JSON) supplies the rest, flags win.
"""

from __future__ import annotations

import argparse
import json

from .common import RawHelpFormatter, add_command, config_from_args

EXAMPLES = """examples:
  setllm train --data ultrafeedback --limit 500 --out runs/ultra
  setllm train --data arc_challenge,piqa --data-dir D --init-adapter runs/ultra --out runs/ultra-mc
  setllm train --config src/setllm/adapters/smollm2-135m-setllm.yaml --resume
  accelerate launch "$(command -v setllm)" train --config my.yaml   # several GPUs (DDP/FSDP/DeepSpeed)
"""


def add_parser(sub, name: str = "train"):
    from ..training.config import TrainConfig

    p = add_command(sub, "train", [TrainConfig], config_file=True, help="train a Set-LLM adapter (LoRA) or model on set prompts",
                    description="Instruction-tune a variant: the prompt under the variant's mask and positions, "
                                "loss on response tokens only. Writes a PEFT adapter + setllm.json to --out. "
                                "Every transformers TrainingArguments flag works too.",
                    epilog=EXAMPLES, formatter_class=RawHelpFormatter)
    p.set_defaults(func=cmd_train)
    return p


def cmd_train(args: argparse.Namespace) -> int:
    from ..io.rundir import World
    from ..training import TrainConfig, train

    cfg = config_from_args(TrainConfig, args)
    from ..loading import quiet_loading

    with quiet_loading(progress=False):  # no bar per weights file read or written; the Trainer's own follows --no-progress
        result = train(cfg)
    if World.current().is_main:  # one result line, not one per process
        print(json.dumps({"out": result.out, "examples": result.examples, "steps": result.steps, "final_loss": result.final_loss,
                          "runtime_s": round(result.runtime_s, 1), "tokens": result.tokens}, ensure_ascii=False))
    return 0
