#!/usr/bin/env bash
# Every order-invariant reading beside the order-sensitive references, on the same questions
# (general_adapter.sh's grid: PIQA, SIQA, ARC-Challenge, CommonsenseQA in the trained and a
# held-out template, subset seeds 0 and 1, N_EVAL questions each; key-value documents in
# held-out phrasings; N_JUDGE UltraFeedback test pairs in the held-out judge prompt).
#
#   research/methods.sh run [MODEL]     evaluate every reading (resumable: a finished cell is skipped)
#   research/methods.sh table [MODEL]   accuracy per cell, paired differences against the causal
#                                       model's mean over orderings, and the cost of each reading
#
# Readings: causal-pe (the base model; its "random" accuracy is the mean over orderings, its
# "majority" the vote), setmask-setpe without an adapter (untrained Set-LLM), sbp (Set-Based
# Prompting), canonical (the base model on sorted elements), and for the embedded model its
# shipped adapters (adapter auto). MODEL: a --model value (default: the embedded SmolLM2-135M;
# e.g. gemma3-270m). Runs go to runs/methods/<model>/eval. Repository root, venv active,
# DATA (../shared/data) present.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${2:-}
NAME=${MODEL:-smollm2-135m}
export MODEL RUNS=${RUNS:-runs/methods/$NAME}
READINGS=("causal none causal-pe" "untrained-set none setmask-setpe" "sbp none sbp" "canonical none canonical")
[ -z "$MODEL" ] && READINGS+=("shipped auto setmask-setpe")

case "${1:-}" in
  run)
    for reading in "${READINGS[@]}"; do
      read -r name adapter variant <<< "$reading"
      research/general_adapter.sh eval "$name" "$adapter" "$variant"
      research/general_adapter.sh judge "$name" "$adapter" "$variant"
    done ;;
  table)
    names=$(for r in "${READINGS[@]}"; do printf '%s,' "${r%% *}"; done)
    python research/general_table.py --runs "$RUNS/eval" --names "${names%,}"
    for r in "${READINGS[@]:1}"; do python research/general_table.py --runs "$RUNS/eval" --paired "${r%% *},causal"; done
    python research/general_table.py --runs "$RUNS/eval" --names "${names%,}" --cost ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
