#!/usr/bin/env bash
# The paper's full reproduction on GPUs (docs/gpu.md): research/reproduce.sh at the paper's
# budgets. One command per table:
#
#   MODEL=google/gemma-2b DATA=/data/setllm research/reproduce_gpu.sh A   # then B, C, D
#
# Training: bf16 (autocast, fp32 master weights), LoRA r 8 / alpha 1 on every linear layer,
# lr 1e-3, 3000 steps of 100 examples (per-device batch x accumulation x GPUs = 100, the
# paper's 10 x 10 on one GPU), the Ultra stage (UltraFeedback) first. Evaluation: fp32, the
# full evaluation splits, every ordering (CSQA: the first 24). Several GPUs: one process per
# GPU through `accelerate launch` (training data-parallel, evaluation sharded by question).
# Resumable like reproduce.sh: rerun the same command after a kill.
set -euo pipefail
cd "$(dirname "$0")/.."

GPUS=${GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}
MODEL=${MODEL:-}               # empty: the embedded SmolLM2-135M-Instruct; the paper: google/gemma-2b
ATTN=${ATTN:-sdpa}             # sdpa (CUDA: memory-efficient kernel, takes the set mask) or flex_attention
MICRO=${MICRO:-10}             # most examples per GPU per forward (the paper's 10)
EVAL_BATCH=${EVAL_BATCH:-32}   # prompts per forward in evaluation
ULTRA_STEPS=${ULTRA_STEPS:-3000}
[ "$GPUS" -ge 1 ] || { echo "error: no GPU found (nvidia-smi -L); set GPUS=N" >&2; exit 2; }
(( 100 % GPUS == 0 )) || { echo "error: GPUS=$GPUS does not divide the 100 examples of a step; use 1, 2, 4, 5 or 10 GPUs" >&2; exit 2; }

# 100 examples a step: per GPU 100/GPUS, in the fewest accumulation steps of at most MICRO each.
per_gpu=$((100 / GPUS)); accum=1
while (( per_gpu % accum != 0 || per_gpu / accum > MICRO )); do accum=$((accum + 1)); done
batch=$((per_gpu / accum))

model=${MODEL:+--model $MODEL}
if [ "$GPUS" -gt 1 ]; then
  bin=$(command -v setllm) || { echo "error: setllm is not on PATH (activate the environment it is installed in)" >&2; exit 2; }
  export SETLLM_RUN="accelerate launch --multi_gpu --num_processes $GPUS --num_machines 1 --dynamo_backend no $bin"
fi
export DATA=${DATA:-../shared/data}
export N_EVAL=${N_EVAL:-1000000}    # more than any split holds: the whole split, in its order
export TRAIN_N=${TRAIN_N:-1000000}  # the whole train split (3000 x 100 examples cycle through it)
export ULTRA_N=${ULTRA_N:-10000}    # the paper's ~10k UltraFeedback examples ($DATA/ultrafeedback/train.jsonl must hold them)
export LR=${LR:-1e-3}
export RUNS=${RUNS:-runs/repro-gpu}
common="$model --attn $ATTN --batch-size $batch --grad-accum $accum --bf16 --max-length 512 --save-steps 500 --logging-steps 50"
export TRAIN_FLAGS="$common --max-steps 3000"
export ULTRA_TRAIN_FLAGS="$common --max-steps $ULTRA_STEPS"
export EVAL_FLAGS="$model --attn $ATTN --device cuda --dtype float32 --batch-size $EVAL_BATCH --no-progress"
echo "GPUs $GPUS: $batch examples x $accum accumulation x $GPUS = 100 a step; runs in $RUNS" >&2
exec research/reproduce.sh "$@"
