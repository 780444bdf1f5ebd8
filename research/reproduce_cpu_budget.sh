#!/usr/bin/env bash
# The part of research/reproduce.sh that fits one ~2.5-hour run on the 2-core CPU of
# docs/experiments/evaluation.md, in the order it was run (Table A first). Every step is resumable: rerun
# this script after a kill and finished adapters / evaluations are skipped or continued.
#
# Cuts against reproduce.sh, all for CPU time (its commands run the rest):
#   - the Ultra stage only as part a-ultra (ULTRA_N UltraFeedback rows, PIQA and SIQA by default);
#     no original-template finetuned rows;
#   - CommonsenseQA: 6 seeded random orderings of the 120 (the paper: the first 24);
#   - Table B: order-sensitive variants over 6 seeded random orderings of ARC's 24;
#   - Table D: the Set-LLM side only (one run per question), 150 questions per cell.
#
# Usage: research/reproduce_cpu_budget.sh [PART ...]   (default: every part, in this order)
#   PART: a-setmask a-causal a-pretrained a-verified b d a-ultra
# LOCK=/path/to/lockfile runs every step under `flock` (a CPU shared with other jobs).
set -euo pipefail
cd "$(dirname "$0")/.."
R="${LOCK:+flock $LOCK} research/reproduce.sh"
RUNS=${RUNS:-runs/repro}
A=$RUNS/adapters
ALL=single,random,adversarial,majority
DATASETS=(arc_challenge piqa social_iqa commonsense_qa)
CSQA6=(--max-orderings 6 --ordering-choice random)

data() { $R step export_train "$1" modified; }

# Table A: one Set-LLM and one causal adapter per benchmark, finetuned identically.
a_setmask() {
for ds in "${DATASETS[@]}"; do
  $R step train "$A/$ds-setmask" setmask-setpe "$(data "$ds")"
  extra=(); [ "$ds" = commonsense_qa ] && extra=("${CSQA6[@]}")
  $R step evaluate "$RUNS/eval/A/$ds/setmask-finetuned" "$ds" "$A/$ds-setmask" setmask-setpe modified "$ALL" "SetMask+SetPE" "${extra[@]}"
done
}
a_causal() {
for ds in "${DATASETS[@]}"; do $R step train "$A/$ds-causal" causal-pe "$(data "$ds")"; done
for ds in piqa social_iqa arc_challenge; do
  extra=(); [ "$ds" = arc_challenge ] && [ -n "${ARC6:-}" ] && extra=("${CSQA6[@]}")  # ARC6=1: 6 of ARC's 24 orderings
  $R step evaluate "$RUNS/eval/A/$ds/causal-finetuned" "$ds" "$A/$ds-causal" causal-pe modified "$ALL" "Causal Mask+PE" "${extra[@]}"
done
$R step evaluate "$RUNS/eval/A/commonsense_qa/causal-finetuned" commonsense_qa "$A/commonsense_qa-causal" causal-pe modified "$ALL" "Causal Mask+PE" "${CSQA6[@]}"
}
a_pretrained() {
$R step evaluate "$RUNS/eval/A/commonsense_qa/causal-pretrained" commonsense_qa none causal-pe modified "$ALL" "Causal Mask+PE" "${CSQA6[@]}"
# Not a paper row: the pretrained model read under SetMask+SetPE with no training at all.
for ds in "${DATASETS[@]}"; do
  extra=(); [ "$ds" = commonsense_qa ] && extra=("${CSQA6[@]}")
  $R step evaluate "$RUNS/eval/A/$ds/setmask-pretrained" "$ds" none setmask-setpe modified "$ALL" "SetMask+SetPE" "${extra[@]}"
done
}
# The guarantee checked, not assumed: 50 questions, up to 6 orderings each, run unsorted.
a_verified() {
for ds in "${DATASETS[@]}"; do
  N_EVAL=50 $R step evaluate "$RUNS/eval/A/$ds/setmask-verified" "$ds" "$A/$ds-setmask" setmask-setpe modified "$ALL" \
    "SetMask+SetPE (verified)" --verify-invariance --max-orderings 6 --ordering-choice random
done

}

# Table A's Ultra rows: the Ultra stage for each variant (`reproduce.sh step ultra`:
# ULTRA_N UltraFeedback train rows, their unordered lists as sets), then each benchmark of
# ULTRA_DATASETS finetuned from it exactly as the pre-Ultra rows were (same data, seeds, steps).
a_ultra() {
local u_causal u_set
u_causal=$($R step ultra causal-pe); u_set=$($R step ultra setmask-setpe)
for ds in ${ULTRA_DATASETS:-piqa social_iqa}; do
  extra=(); [ "$ds" = commonsense_qa ] || [ "$ds" = arc_challenge ] && extra=("${CSQA6[@]}")
  $R step train "$A/$ds-causal-ultra" causal-pe "$(data "$ds")" "$u_causal"
  $R step evaluate "$RUNS/eval/A/$ds/causal-ultra-finetuned" "$ds" "$A/$ds-causal-ultra" causal-pe modified "$ALL" "Causal Mask+PE Ultra" "${extra[@]}"
  $R step train "$A/$ds-setmask-ultra" setmask-setpe "$(data "$ds")" "$u_set"
  $R step evaluate "$RUNS/eval/A/$ds/setmask-ultra-finetuned" "$ds" "$A/$ds-setmask-ultra" setmask-setpe modified "$ALL" "SetMask+SetPE Ultra" "${extra[@]}"
done
}

# Table B on ARC: the six variants finetuned identically; every variant over the same 6
# seeded random orderings of the 24 (the dataset's order included) to fit the budget.
b() {
for v in causal-nope prefix-pe prefix-nope prefix-setpe causal-pe setmask-setpe; do
  ad="$A/arc_challenge-$v"
  [ "$v" = causal-pe ] && ad="$A/arc_challenge-causal"
  [ "$v" = setmask-setpe ] && ad="$A/arc_challenge-setmask"
  $R step train "$ad" "$v" "$(data arc_challenge)"
  $R step evaluate "$RUNS/eval/B/$v" arc_challenge "$ad" "$v" modified "$ALL" "$v" --max-orderings 6 --ordering-choice random
done

}

# Table D (out of distribution), Set-LLM side: each benchmark's adapter on the other three,
# 150 questions each (a seeded subset, --subset-seed 0, of the evaluation split).
d() {
for train_ds in "${DATASETS[@]}"; do
  for ds in "${DATASETS[@]}"; do
    [ "$ds" = "$train_ds" ] && continue
    extra=(); [ "$ds" = commonsense_qa ] && extra=("${CSQA6[@]}")
    N_EVAL=150 $R step evaluate "$RUNS/eval/D/$train_ds-on-$ds/setmask" "$ds" "$A/$train_ds-setmask" setmask-setpe modified "$ALL" \
      "SetMask+SetPE ($train_ds)" "${extra[@]}"
  done
done
}

parts=("$@"); [ ${#parts[@]} -eq 0 ] && parts=(a-setmask a-causal a-pretrained a-verified b d)
for part in "${parts[@]}"; do
  case "$part" in
    a-setmask|a-causal|a-pretrained|a-verified|b|d|a-ultra) "${part//-/_}" ;;
    *) echo "unknown part $part; choose from: a-setmask a-causal a-pretrained a-verified b d a-ultra" >&2; exit 2 ;;
  esac
done
