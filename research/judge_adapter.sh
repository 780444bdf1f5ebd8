#!/usr/bin/env bash
# The judge adapters for the embedded model and their measurement.
#
#   research/judge_adapter.sh pairs                   the UltraFeedback test pairs that fit 448 tokens
#   research/judge_adapter.sh build VARIANT           train a judge adapter to write the better response (setmask-setpe
#                                                     or causal-pe; the setmask-setpe one was shipped until 2026-11-26)
#   research/judge_adapter.sh preference VARIANT      a judge adapter trained on ranking (below; setmask-setpe:
#                                                     the shipped src/setllm/adapters/smollm2-135m-judge since 2026-11-26)
#   research/judge_adapter.sh evaluate NAME ADAPTER VARIANT
#   research/judge_adapter.sh all                     every step above, then the five table rows
#   research/judge_adapter.sh table                   the four rows any model has (no shipped adapter)
#
# MODEL=NAME reads with another --model (e.g. gemma3-270m; give it its own RUNS); the evaluation
# pairs stay the ones chosen with the embedded model's tokenizer (PAIRS), so every model reads
# the same pairs.
#
# CPU budget: both variants train on the same examples, the UltraFeedback train pairs whose
# judge prompt + chosen response fit 320 tokens (the rest, and rows with an empty response,
# skipped and counted in the log), one epoch of batch 8; each pair's two responses come in a
# seeded random order, so the causal judge cannot learn "the first one". Evaluation: the test pairs that fit 448 tokens (prompt + longer response).
# Repository root, venv active, ../shared/data present. Resumable; logs each command.
# LOCK=/path/to/lockfile runs every heavy step under `flock` (a CPU shared with other jobs).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
RUNS=${RUNS:-runs/judge}
PAIRS=${PAIRS:-runs/judge/data/ultrafeedback-test-448.jsonl}
model=(${MODEL:+--model "$MODEL"})
run() { printf '+ %s\n' "$*" >&2; ${LOCK:+flock "$LOCK"} "$@"; }

pairs() {
  [ -s "$PAIRS" ] || run python research/judge_short_pairs.py --data "$DATA/ultrafeedback/test.jsonl" --max-tokens 448 --out "$PAIRS"
}

build() {  # build VARIANT
  local out=$RUNS/adapters/$1
  [ -f "$out/adapter_model.safetensors" ] && return 0
  local resume=(); compgen -G "$out/checkpoint-*" >/dev/null && resume=(--resume)
  run setllm train "${model[@]}" --data ultrafeedback-judge --data-dir "$DATA" --variant "$1" --max-length 320 --overlong skip --skip-bad \
    --lr 3e-3 --batch-size 8 --epochs 1 --seed 42 --sample-seed 42 --logging-steps 5 --save-steps 20 --out "$out" "${resume[@]}"
}

# Preference judges: `--objective preference`, SimPO's pairwise loss on each
# response's mean log-likelihood after the judge prompt (the `mean` readout), on every
# UltraFeedback train pair whose judge prompt + longer response fit PREF_LENGTH tokens (both
# responses whole), one epoch of 8 pairs; the same pairs and settings for both variants.
preference() {  # preference VARIANT
  local out=$RUNS/adapters/preference-$1
  [ -f "$out/adapter_model.safetensors" ] && return 0
  local resume=(); compgen -G "$out/checkpoint-*" >/dev/null && resume=(--resume)
  run setllm train "${model[@]}" --data ultrafeedback-judge --data-dir "$DATA" --variant "$1" --objective preference \
    --max-length "${PREF_LENGTH:-512}" --skip-bad --lr 2e-3 --batch-size 8 --epochs 1 --seed 42 --logging-steps 5 --save-steps 10 \
    --out "$out" --no-progress "${resume[@]}"
}

evaluate() {  # evaluate NAME ADAPTER VARIANT
  pairs
  run setllm eval "${model[@]}" --dataset judge --data-file "$PAIRS" --adapter "$2" --variant "$3" --label "$1" --seed 0 \
    --out "$RUNS/eval/$1"
}

table() {
  pairs
  build setmask-setpe
  build causal-pe
  evaluate causal-pretrained none causal-pe
  evaluate causal-trained "$RUNS/adapters/causal-pe" causal-pe
  evaluate setmask-untrained none setmask-setpe
  evaluate setmask-trained "$RUNS/adapters/setmask-setpe" setmask-setpe
}

all() {
  table
  evaluate setmask-default-adapter src/setllm/adapters/smollm2-135m-setllm setmask-setpe
}

case "${1:-}" in
  pairs|build|preference|evaluate|table|all) "$@" ;;
  *) echo "usage: $0 [pairs|build VARIANT|preference VARIANT|evaluate NAME ADAPTER VARIANT|table|all]" >&2; exit 2 ;;
esac
