"""The multi-GPU recipe's accelerate configs (``configs/accelerate/``; docs/gpu.md, "Past one
machine"), checked on CPU as far as a CPU allows.

- Each file is read by accelerate's own loader and turned into the environment that
  ``accelerate launch --config_file`` hands the processes, and into the plugin (FSDP or
  DeepSpeed) that accelerate builds from it: the settings the recipe depends on are asserted
  there, not only in the YAML.
- The docs' ``accelerate launch`` commands name these files and pass flags ``setllm train``
  accepts.
- ``multiprocess``: two processes, launched with the config file on CPU (gloo), train a tiny
  random model for a few steps through ``setllm train`` and write one adapter. For FSDP this needs
  a shim: accelerate picks FSDP only for GPU-like devices, and on a CPU group trains plain DDP
  without a word (``AcceleratorState``: MULTI_CPU); :func:`_fsdp_on_cpu` lets it pick FSDP there,
  so the rest of its FSDP2 path (wrap policy, sharding, mixed precision, gathering the state
  dict to save the adapter) runs as on GPUs. The DeepSpeed run needs ``deepspeed`` installed (not
  a setllm dependency: skipped without it); DeepSpeed picks its own CPU accelerator.

Run as a script (by ``accelerate launch``) this file is each launched process: ``setllm`` plus
a report of how the model was sharded (``SETLLM_TEST_REPORT``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs" / "accelerate"
FSDP, ZERO3 = CONFIGS / "fsdp.yaml", CONFIGS / "deepspeed_zero3.yaml"
DOCS = ROOT / "docs" / "gpu.md"
FIXTURES = ROOT / "tests" / "fixtures" / "train"
STEPS = 3
TRAIN_ARGS = ["--data", "arc_challenge,piqa", "--data-dir", str(FIXTURES), "--max-steps", str(STEPS), "--lr", "1e-2", "--lora-alpha", "16",
              "--logging-steps", "1", "--save-steps", str(STEPS), "--no-progress", "--bf16"]


def launcher(config: Path, *flags: str):
    """What ``accelerate launch --config_file CONFIG FLAGS x.py`` makes of the file: (args, the
    environment every process gets). accelerate's own argument handling, no process started."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    args, defaults, _ = _validate_launch_command(launch_command_parser().parse_args(["--config_file", str(config), *flags, "x.py"]))
    if args.use_deepspeed:
        args.deepspeed_fields_from_accelerate_config = ",".join([*defaults.deepspeed_config, "mixed_precision"])  # as launch_command does
        return args, prepare_deepspeed_cmd_env(args)[1]
    return args, prepare_multi_gpu_env(args)


def launched_env(monkeypatch, env: dict) -> None:
    for key, value in env.items():
        if key.startswith(("ACCELERATE_", "FSDP_")):
            monkeypatch.setenv(key, value)


def test_the_fsdp_config_as_accelerate_reads_it():
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file

    cfg = load_config_from_file(str(FSDP))
    assert isinstance(cfg, ClusterConfig) and cfg.distributed_type == "FSDP"
    assert cfg.mixed_precision == "bf16" and not cfg.use_cpu and cfg.num_machines == 1
    assert cfg.num_processes == -1  # not in the file: the GPU count is the launcher's to give
    fsdp = cfg.fsdp_config
    assert fsdp["fsdp_version"] == 2  # per-parameter sharding: frozen and trainable weights in one group
    assert fsdp["fsdp_reshard_after_forward"] is True  # FULL_SHARD
    assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP" and "fsdp_transformer_layer_cls_to_wrap" not in fsdp
    assert fsdp["fsdp_state_dict_type"] == "FULL_STATE_DICT"  # SHARDED: Trainer.save_model writes no adapter
    assert fsdp["fsdp_cpu_ram_efficient_loading"] is True and fsdp["fsdp_offload_params"] is False


def test_the_fsdp_plugin_accelerate_builds_from_it(monkeypatch):
    """The launcher's environment -> accelerate's FSDP plugin; its wrap policy finds the decoder
    layers of a LoRA model (through PEFT's wrapper, by the model's ``_no_split_modules``)."""
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy
    from peft import LoraConfig, get_peft_model
    from tiny import tiny_model
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    args, env = launcher(FSDP, "--num_processes", "8")
    assert args.use_fsdp and args.num_processes == 8 and env["ACCELERATE_USE_FSDP"] == "true"
    launched_env(monkeypatch, env)
    plugin = FullyShardedDataParallelPlugin()
    plugin.set_mixed_precision(env["ACCELERATE_MIXED_PRECISION"])
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
    assert plugin.state_dict_type.name == "FULL_STATE_DICT" and plugin.cpu_ram_efficient_loading
    assert plugin.auto_wrap_policy is transformer_auto_wrap_policy and plugin.transformer_cls_names_to_wrap is None
    assert str(plugin.mixed_precision_policy.param_dtype) == "torch.bfloat16"

    model = get_peft_model(tiny_model(), LoraConfig(r=8, target_modules="all-linear"))
    wrap = fsdp2_prepare_auto_wrap_policy(plugin, model)
    assert [type(m).__name__ for m in model.modules() if wrap(m)] == ["LlamaDecoderLayer"] * 2


def test_the_zero3_config_as_accelerate_reads_it(monkeypatch):
    """DeepSpeed itself is not needed to build accelerate's plugin and its DeepSpeed config."""
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
    from accelerate.utils import DeepSpeedPlugin

    cfg = load_config_from_file(str(ZERO3))
    assert isinstance(cfg, ClusterConfig) and cfg.distributed_type == "DEEPSPEED"
    assert cfg.mixed_precision == "bf16" and not cfg.use_cpu and cfg.num_machines == 1 and cfg.num_processes == -1
    ds = cfg.deepspeed_config
    assert ds["zero_stage"] == 3 and ds["zero3_init_flag"] is True and ds["zero3_save_16bit_model"] is True
    assert ds["offload_param_device"] == ds["offload_optimizer_device"] == "none"
    assert "deepspeed_config_file" not in ds

    args, env = launcher(ZERO3, "--num_processes", "8")
    assert args.use_deepspeed and env["ACCELERATE_USE_DEEPSPEED"] == "true"
    launched_env(monkeypatch, env)
    plugin = DeepSpeedPlugin()
    plugin.set_mixed_precision(env["ACCELERATE_MIXED_PRECISION"])
    conf = plugin.deepspeed_config
    assert plugin.zero_stage == 3 and plugin.zero3_init_flag is True
    assert conf["zero_optimization"]["stage"] == 3 and conf["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert conf["bf16"] == {"enabled": True} and conf["fp16"] == {"enabled": False}
    # Batch sizes are the Trainer's to fill in from setllm's flags.
    assert conf["train_micro_batch_size_per_gpu"] == conf["gradient_accumulation_steps"] == "auto"


@pytest.mark.parametrize("config", [FSDP, ZERO3], ids=["fsdp", "zero3"])
def test_accelerate_will_not_start_without_a_process_count(config):
    with pytest.raises(ValueError, match="--num_processes"):
        launcher(config)


def docs_launches() -> list[tuple[str, list[str], list[str]]]:
    """``(config file, launcher flags, setllm argv)`` of each ``accelerate launch --config_file``
    line in the bash blocks of docs/gpu.md's "Past one machine" section."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("\n## Past one machine", 1)[1].split("\n## ", 1)[0]
    found = []
    for block in re.findall(r"^```bash\n(.*?)^```", section, re.S | re.M):
        for line in re.sub(r"\\\n", " ", block).splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["accelerate", "launch"] and "--config_file" in words:
                cut = words.index("$(command -v setllm)")
                found.append((words[words.index("--config_file") + 1], words[2:cut], words[cut + 1:]))
    return found


def test_the_docs_launch_these_files_with_flags_setllm_train_takes():
    from setllm.cli import build_parser
    from setllm.cli.common import validate

    launches = docs_launches()
    assert sorted({config for config, _, _ in launches}) == ["configs/accelerate/deepspeed_zero3.yaml", "configs/accelerate/fsdp.yaml"]
    for config, flags, argv in launches:
        assert (ROOT / config).is_file() and "--num_processes" in flags
        # --bf16: the configs' bf16 and the Trainer's must agree (DeepSpeed refuses a mismatch).
        assert argv[0] == "train" and "--bf16" in argv and "--out" in argv
        parser, _ = build_parser("train")
        validate(parser.parse_args(argv))


# -- two processes on CPU ---------------------------------------------------------------------


def launch(config: Path, base: str, out: Path, report: Path) -> subprocess.CompletedProcess:
    """``accelerate launch --config_file CONFIG --num_processes 2 <this file> train ...`` on CPU."""
    from launcher import free_port

    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error",
           "SETLLM_TEST_REPORT": str(report)}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config), "--num_processes", "2",
           "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port()), __file__,
           "train", *TRAIN_ARGS, "--model", base, "--batch-size", "2", "--out", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> str:
    from tiny import saved, tiny_model

    return saved(tiny_model(), tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def reference(base, tmp_path_factory) -> Path:
    """One process, the same global batch (2 processes x 2), fp32."""
    from setllm.training import TrainConfig, train

    out = tmp_path_factory.mktemp("one")
    train(TrainConfig(data="arc_challenge,piqa", data_dir=str(FIXTURES), model=base, max_steps=STEPS, learning_rate=1e-2, lora_alpha=16,
                      logging_steps=1, save_steps=STEPS, disable_tqdm=True, output_dir=str(out), per_device_train_batch_size=4))
    return out


def check_run(res: subprocess.CompletedProcess, out: Path, reference: Path) -> None:
    """It finished, rank 0 alone said so, and wrote one LoRA adapter like one process's."""
    from safetensors.torch import load_file

    assert res.returncode == 0, res.stderr[-4000:]
    results = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert len(results) == 1 and results[0]["steps"] == STEPS
    losses = [[r["loss"] for r in map(json.loads, (d / "train_log.jsonl").read_text().splitlines()) if "loss" in r] for d in (out, reference)]
    assert len(losses[0]) == STEPS and max(abs(a - b) for a, b in zip(*losses)) < 1e-3, losses  # bf16 compute vs fp32: 2.5e-4 seen
    adapter, ref = load_file(out / "adapter_model.safetensors"), load_file(reference / "adapter_model.safetensors")
    assert adapter.keys() == ref.keys() and all("lora_" in k for k in adapter)  # the adapter only, not the base weights
    assert max((adapter[k].float() - ref[k]).abs().max().item() for k in ref) < 0.1 * max(ref[k].abs().max().item() for k in ref)  # bf16: about 4% seen
    assert json.loads((out / "setllm.json").read_text())["training"]["steps"] == STEPS


def reports(path: Path) -> list[dict]:
    return [json.loads((path / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.multiprocess
def test_the_fsdp_config_trains_an_adapter_over_sharded_weights(base, reference, tmp_path):
    out, report = tmp_path / "fsdp", tmp_path / "report"
    res = launch(FSDP, base, out, report)
    check_run(res, out, reference)
    ranks = reports(report)
    for r in ranks:
        assert r["distributed_type"] == "FSDP" and r["fsdp_version"] == 2 and r["mixed_precision"] == "bf16"
        assert r["sharded"] == r["params"] and r["trainable"] == r["lora"] > 0  # every weight a DTensor; only LoRA trains
        assert "LlamaDecoderLayer" in r["fsdp_modules"]  # the transformer-layer wrap
        assert r["local_numel"] * 2 == r["numel"]  # each rank holds half (every dim of the tiny model is even)
        # --bf16 LoRA loads the frozen base in bf16 (shards of half the bytes); LoRA stays fp32, the master weights
        assert r["base_dtypes"] == ["bfloat16"] and r["lora_dtypes"] == ["float32"]


@pytest.mark.multiprocess
@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed (not a setllm dependency)")
def test_the_zero3_config_trains_an_adapter_over_partitioned_weights(base, reference, tmp_path):
    out, report = tmp_path / "zero3", tmp_path / "report"
    res = launch(ZERO3, base, out, report)
    check_run(res, out, reference)
    for r in reports(report):
        assert r["distributed_type"] == "DEEPSPEED" and r["zero3_at_load"]
        assert r["partitioned_at_load"] == r["params"] - r["lora"]  # every base weight, by zero.Init while loading
        assert r["sharded"] == r["params"] and r["trainable"] == r["lora"] > 0
        assert r["local_numel"] * 2 == r["numel"]
        assert r["base_dtypes"] == ["bfloat16"] and r["lora_dtypes"] == ["float32"]  # DeepSpeed's bf16 casts the frozen weights


# -- what each launched process runs ---------------------------------------------------------


def _fsdp_on_cpu(chosen: list) -> None:
    """Let accelerate pick FSDP on a CPU process group, as it does on GPUs: it builds the plugin
    from the config, then (``AcceleratorState.__init__``) keeps FSDP only for GPU-like device
    types and falls back to MULTI_CPU, i.e. DDP. Record what it chose in ``chosen``."""
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    init = AcceleratorState.__init__

    def patched(self, *args, fsdp_plugin=None, **kwargs):
        init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            chosen.append(str(self.distributed_type))
            # Both shared states: a later AcceleratorState() copies PartialState's over its own.
            self.distributed_type = PartialState._shared_state["distributed_type"] = DistributedType.FSDP
            if self._mixed_precision != "no":
                fsdp_plugin.set_mixed_precision(self._mixed_precision)
            self.fsdp_plugin = fsdp_plugin

    AcceleratorState.__init__ = patched


def _report_sharding(path: Path, chosen: list) -> None:
    """Write ``rank<R>.json`` in ``path`` after the first step: how the model is sharded."""
    import torch
    from transformers import TrainerCallback
    from transformers.integrations import is_deepspeed_zero3_enabled

    import setllm.training.run as run

    loaded: dict = {}
    build, make = run.build_model, run.make_trainer

    def build_model(*args, **kwargs):
        model, tokenizer = build(*args, **kwargs)
        loaded.update(zero3_at_load=is_deepspeed_zero3_enabled(), partitioned_at_load=sum(hasattr(p, "ds_id") for p in model.parameters()))
        return model, tokenizer

    class Report(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step != 1:
                return
            from torch.distributed.fsdp import FSDPModule
            from torch.distributed.tensor import DTensor

            acc, model = trainer.accelerator, trainer.model_wrapped
            params = dict(model.named_parameters())

            def local(p):
                return p.to_local().numel() if isinstance(p, DTensor) else p.ds_tensor.numel() if hasattr(p, "ds_tensor") else p.numel()

            plugin = getattr(acc.state, "fsdp_plugin", None)
            info = {
                "accelerate_chose": chosen[0] if chosen else None, "distributed_type": acc.distributed_type.value,
                "fsdp_version": getattr(plugin, "fsdp_version", None), "mixed_precision": acc.mixed_precision,
                "fsdp_modules": sorted({type(m).__name__.removeprefix("FSDP") for m in model.modules() if isinstance(m, FSDPModule)}),
                "params": len(params), "lora": sum("lora_" in n for n in params),
                "sharded": sum(isinstance(p, DTensor) or hasattr(p, "ds_id") for p in params.values()),
                "trainable": sum(p.requires_grad for p in params.values()),
                "base_dtypes": sorted({str(p.dtype).removeprefix("torch.") for n, p in params.items() if "lora_" not in n}),
                "lora_dtypes": sorted({str(p.dtype).removeprefix("torch.") for n, p in params.items() if "lora_" in n}),
                "numel": sum(getattr(p, "ds_numel", p.numel()) for p in params.values()),
                "local_numel": sum(local(p) for p in params.values()), **loaded,
            }
            rank = torch.distributed.get_rank()
            path.mkdir(parents=True, exist_ok=True)
            (path / f"rank{rank}.json").write_text(json.dumps(info))

    def make_trainer(*args, **kwargs):
        nonlocal trainer
        trainer = make(*args, **kwargs)
        trainer.add_callback(Report())
        return trainer

    trainer = None
    run.build_model, run.make_trainer = build_model, make_trainer


if __name__ == "__main__":  # one process of `accelerate launch ... tests/test_accelerate_configs.py train ...`
    import torch

    chosen: list = []
    if os.environ.get("ACCELERATE_USE_FSDP") == "true" and not torch.cuda.is_available():
        _fsdp_on_cpu(chosen)
    if os.environ.get("SETLLM_TEST_REPORT"):
        _report_sharding(Path(os.environ["SETLLM_TEST_REPORT"]), chosen)
    from setllm.cli import main

    raise SystemExit(main(sys.argv[1:]))
