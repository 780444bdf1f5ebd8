#!/usr/bin/env bash
# The shipped Set-LLM adapter for the embedded model: build it, and check that it helps.
#
#   research/default_adapter.sh build [--resume]     stage 1: src/setllm/adapters/smollm2-135m-setllm.yaml (cross-entropy),
#                                                    exported in bf16; stage 2: smollm2-135m-setllm-rank.yaml (rank the
#                                                    options, from stage 1), exported to src/setllm/adapters/smollm2-135m-setllm/, demo
#   research/default_adapter.sh untrained            evaluate the untrained model read with SetMask+SetPE
#   research/default_adapter.sh adapter DIR NAME     evaluate an adapter the same way
#
# The check: 300 seeded questions of each benchmark (--subset-seed 0, single mode, modified
# template, options scored as text + EOS); the default must beat the untrained reading on at
# least three benchmarks and not trail it by more than one standard error on the fourth.
# Repository root, venv active. `build` trains on local copies, read from DATA (default
# ../shared/data, the configs' data_dir): <benchmark>/train.jsonl for the four benchmarks and
# ultrafeedback/train.jsonl, in setllm's record format (docs/evaluation.md); it says which are
# missing before training anything. Resumable; logs each command.
set -euo pipefail
cd "$(dirname "$0")/.."
R=research/reproduce.sh
DATA=${DATA:-../shared/data}
RUNS=${RUNS:-runs/default}
CONFIG=src/setllm/adapters/smollm2-135m-setllm.yaml
RANK_CONFIG=src/setllm/adapters/smollm2-135m-setllm-rank.yaml
DEST=src/setllm/adapters/smollm2-135m-setllm
DATASETS=(piqa arc_challenge commonsense_qa social_iqa)

evaluate_all() {  # evaluate_all NAME ADAPTER
  for ds in "${DATASETS[@]}"; do
    $R step evaluate "$RUNS/eval/$1/$ds" "$ds" "$2" setmask-setpe modified single,random,adversarial,majority "SetMask+SetPE ($1)"
  done
}

need_data() {  # the train splits both stages read, all of them, before the first step
  local missing=()
  for d in ultrafeedback "${DATASETS[@]}"; do
    [ -f "$DATA/$d/train.jsonl" ] || missing+=("$DATA/$d/train.jsonl")
  done
  [ ${#missing[@]} -eq 0 ] && return
  echo "error: $0 build trains on local copies of UltraFeedback and the four benchmarks' train splits; missing: ${missing[*]}." \
       "Put them there (setllm's record format, docs/evaluation.md), or run DATA=DIR $0 build with DIR holding them" >&2
  exit 2
}

build() {  # the rank stage's yaml reads stage 1 from runs/default/adapter-bf16
  need_data
  local out="$RUNS/adapter"
  [ -f "$out-bf16/adapter_model.safetensors" ] || {
    setllm train --config "$CONFIG" --data-dir "$DATA" --out "$out" "$@"
    # Only what loading needs, weights in bf16 (about 5 MB): no checkpoints, no pickles.
    # Stage 2 starts from this bf16 copy, as the shipped adapter's stage 2 did.
    setllm export adapter "$out" "$out-bf16" --dtype bf16
  }
  setllm train --config "$RANK_CONFIG" --data-dir "$DATA" --init-adapter "$out-bf16" --out "$out-rank" "$@"
  setllm export adapter "$out-rank" "$DEST" --dtype bf16 --overwrite  # replaces the shipped adapter's files
  setllm demo
}

case "${1:-}" in
  build) shift; build "$@" ;;
  untrained) evaluate_all untrained none ;;
  adapter) evaluate_all "$3" "$2" ;;
  *) echo "usage: $0 [build [--resume]|untrained|adapter DIR NAME]" >&2; exit 2 ;;
esac
