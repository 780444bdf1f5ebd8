#!/usr/bin/env bash
# Every order-invariant reading beside the order-sensitive references, on the same questions
# (general_adapter.sh's grid: PIQA, SIQA, ARC-Challenge, CommonsenseQA in the trained and a
# held-out template, subset seeds 0 and 1, N_EVAL questions each; key-value documents in
# held-out phrasings at 10 and 20 documents, N_DOCS rows per seed; N_JUDGE UltraFeedback test
# pairs per seed in the held-out judge prompt).
#
#   research/methods.sh run [MODEL]     evaluate every reading, invariant ones first (resumable: a
#                                       finished cell is skipped, a started one resumes)
#   research/methods.sh derive [MODEL]  the readings with no run of their own: the causal model's
#                                       majority vote over its orderings, and pick-the-longer (judge)
#   research/methods.sh verify [MODEL]  every invariant reading on N_VERIFY (50) SIQA questions in
#                                       all 6 orders, unsorted (--verify-invariance): answer changes
#   research/methods.sh table [MODEL]   accuracy per cell, paired differences against the causal
#                                       model's mean over orderings (the seeds pooled), the cost of each reading, and
#                                       the answer changes verify counted
#
# Readings: sbp (Set-Based Prompting), canonical (the base model on sorted elements),
# setmask-setpe without an adapter (untrained Set-LLM), causal-pe (the base model; its "random"
# accuracy is the mean over orderings: every ordering of PIQA and SIQA, 6 seeded ones of ARC and
# CSQA; documents with the gold one first, in the middle and last), and for the embedded model
# its shipped adapters (adapter auto). MODEL: a --model value (default: the embedded
# SmolLM2-135M; e.g. gemma3-270m). Runs go to runs/methods/<model>/eval (verify's: .../verify). N_EVAL (300), N_DOCS
# (30), N_JUDGE (100), TEMPLATES ("modified held-out") and SEEDS ("0 1") size the grid
# (general_adapter.sh's variables). Repository root, venv active, DATA (../shared/data) present.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${2:-}
NAME=${MODEL:-smollm2-135m}
export MODEL RUNS=${RUNS:-runs/methods/$NAME} DATA=${DATA:-../shared/data} SKIP_DOCS=1
N_DOCS=${N_DOCS:-30}
READINGS=("sbp none sbp" "canonical none canonical" "untrained-set none setmask-setpe" "causal none causal-pe")
[ -z "$MODEL" ] && READINGS+=("shipped auto setmask-setpe")
DERIVED=(causal-majority longer)
run() { printf '+ %s\n' "$*" >&2; "$@"; }

documents() {  # documents NAME ADAPTER VARIANT: key-value rows in the held-out phrasings, 10 and 20 documents
  local k seed out positions=()
  for k in 10 20; do
    for seed in ${SEEDS:-0 1}; do
      local file=$RUNS/data/kv$k-held-out-s$seed.jsonl
      mkdir -p "$RUNS/data"
      [ -s "$file" ] || run setllm data kv-phrased --phrasings held-out --docs "$k" --n "$N_DOCS" --seed $((2000 + 10 * k + seed)) --out "$file"
      # an invariant reading runs each row once (it stands for every gold position); the causal one at three
      [ "$3" = causal-pe ] && positions=(--gold-positions "0,$((k / 2)),-1")
      out=$RUNS/eval/$1/kv$k-held-out-s$seed
      [ -f "$out/summary.json" ] || run setllm eval --dataset documents --data-file "$file" --adapter "$2" --variant "$3" \
        "${positions[@]}" ${MODEL:+--model "$MODEL"} --out "$out" --no_progress
    done
  done
}

derive() {  # the causal model's majority vote per cell; pick-the-longer on the judge pairs
  local cell src
  for src in "$RUNS"/eval/causal/*/; do
    cell=$(basename "$src")
    [ -f "$src/summary.json" ] && [ ! -f "$RUNS/eval/causal-majority/$cell/summary.json" ] &&
      python research/derived_runs.py majority "$src" "$RUNS/eval/causal-majority/$cell"
    [[ $cell == ultrafeedback-pairs-* ]] && [ -f "$src/summary.json" ] &&
      python research/derived_runs.py longer "$src" "$RUNS/eval/longer/$cell" --data-dir "$DATA"
  done
  true
}

verify() {  # every invariant reading, every ordering of N_VERIFY SIQA questions, unsorted: answer changes
  local name adapter variant out
  for reading in "${READINGS[@]}"; do
    read -r name adapter variant <<< "$reading"
    [ "$name" = causal ] && continue
    out=$RUNS/verify/$name/social_iqa-held-out-s0
    [ -f "$out/summary.json" ] || run setllm eval --dataset social_iqa --data-dir "$DATA" --limit "${N_VERIFY:-50}" --subset-seed 0 \
      --template held-out --adapter "$adapter" --variant "$variant" --verify-invariance ${MODEL:+--model "$MODEL"} --out "$out" --no_progress
  done
}

case "${1:-}" in
  run)
    for reading in "${READINGS[@]}"; do
      read -r name adapter variant <<< "$reading"
      research/general_adapter.sh eval "$name" "$adapter" "$variant"
      documents "$name" "$adapter" "$variant"
      research/general_adapter.sh judge "$name" "$adapter" "$variant"
    done
    derive ;;
  derive) derive ;;
  verify) verify ;;
  table)
    seeds=${SEEDS:-0 1}; seeds=${seeds// /,}
    names=$(for r in "${READINGS[@]}" "${DERIVED[@]}"; do printf '%s,' "${r%% *}"; done)
    python research/general_table.py --runs "$RUNS/eval" --names "${names%,}" --seeds "$seeds"
    others=$(for r in "${READINGS[@]}" "${DERIVED[@]}"; do [ "${r%% *}" = causal ] || printf '%s,' "${r%% *}"; done)
    python research/general_table.py --runs "$RUNS/eval" --names "${others%,}" --against causal --seeds "$seeds"
    python research/general_table.py --runs "$RUNS/eval" --names "${names%,}" --cost --seeds "$seeds"
    [ -d "$RUNS/verify" ] && python research/general_table.py --runs "$RUNS/verify" --invariance
    true ;;
  *) sed -n '2,25p' "$0"; exit 2 ;;
esac
