#!/usr/bin/env bash
# Reproduce the paper's multiple-choice evaluation (Egressy & Stühmer 2025) on the embedded
# SmolLM2-135M-Instruct, fp32, with `setllm train` and `setllm eval`. Results feed
# docs/experiments/evaluation.md; the paper's Gemma-2B numbers are quoted there.
#
# Usage (repository root, venv active):  research/reproduce.sh [A|B|C|D|all]
# Everything is resumable: a finished adapter is not retrained, and `setllm eval` continues
# an interrupted run in its --out directory. Rerun the same command after a kill.
#
#   A  baselines and main result: 4 datasets, original/modified templates, pretrained,
#      finetuned, Ultra-finetuned Causal Mask+PE (with majority vote), SetMask+SetPE (+Ultra)
#   B  all six variants finetuned identically on ARC, evaluated on ARC
#   C  runtime: majority vote (k! runs) vs one Set-LLM run (from A's ARC runs)
#   D  out of distribution: each Ultra adapter of A on the other three datasets
#
# Budgets (all seeded; change them here, the tables say what was used):
DATA=${DATA:-../shared/data}   # <dataset>/{train,validation,test}.jsonl, ultrafeedback/train.jsonl
N_EVAL=${N_EVAL:-300}          # questions per dataset: a seeded subset (--subset-seed 0) of the eval split
TRAIN_N=${TRAIN_N:-800}        # training examples per benchmark: a seeded sample (seed 42) of its train split
ULTRA_N=${ULTRA_N:-250}        # UltraFeedback examples for the "Ultra" pre-finetuning stage
EPOCHS=${EPOCHS:-1}            # one pass: 100 steps of batch 8 per benchmark at TRAIN_N=800
LR=${LR:-1e-3}                 # the paper's best rate for Gemma 2B on every benchmark (its Table 12)
RUNS=${RUNS:-runs/repro}
# How train/eval run (the GPU recipe, research/reproduce_gpu.sh, sets these; docs/gpu.md):
SETLLM_RUN=${SETLLM_RUN:-setllm}  # e.g. "accelerate launch --num_processes 8 $(command -v setllm)"
TRAIN_FLAGS=${TRAIN_FLAGS:-}      # appended to every `setllm train` (a later flag wins), e.g. "--max-steps 3000 --bf16"
EVAL_FLAGS=${EVAL_FLAGS:-}        # appended to every `setllm eval`, e.g. "--device cuda --batch-size 64"
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}

# Print each command before running it, so a log shows exactly what produced a number.
log_cmd() { printf '+ %s\n' "$*" >&2; "$@"; }

DATASETS=(piqa arc_challenge commonsense_qa social_iqa)
ALL_MODES=single,random,adversarial,majority

# CommonsenseQA has 5! = 120 orderings; the paper tested the first 24 in lexicographic order.
orderings_for() { [ "$1" = commonsense_qa ] && echo "--max-orderings 24 --ordering-choice first" || true; }

# export DATASET TEMPLATE: the train split rendered exactly as `setllm eval` asks, for either
# template (the built-in `--data NAME` spec of `setllm train` renders the modified one only).
export_train() {
  local f="$RUNS/data/$1-$2-train.jsonl"
  [ -s "$f" ] || setllm export data --dataset "$1" --template "$2" --data-dir "$DATA" \
    --split train --limit "$TRAIN_N" --subset-seed 42 --out "$f"
  echo "$f"
}

# train OUT VARIANT DATA [INIT_ADAPTER]: LoRA r=8, alpha=1, all linear layers (the paper's).
train() {
  local out=$1 variant=$2 data=$3 init=${4:-}
  [ -f "$out/adapter_model.safetensors" ] && return 0
  local resume=(); compgen -G "$out/checkpoint-*" >/dev/null && resume=(--resume)
  # shellcheck disable=SC2086
  log_cmd $SETLLM_RUN train --data "$data" --data-dir "$DATA" --variant "$variant" --lr "$LR" --epochs "$EPOCHS" \
    --batch-size 8 --max-length 256 --seed 42 --sample-seed 42 --out "$out" ${init:+--init-adapter "$init"} "${resume[@]}" $TRAIN_FLAGS
}

ultra() {  # the "Ultra" stage for a variant: UltraFeedback instruction tuning
  TRAIN_FLAGS=${ULTRA_TRAIN_FLAGS:-$TRAIN_FLAGS} train "$RUNS/adapters/ultra-$1" "$1" "ultrafeedback:$ULTRA_N" >&2  # stdout: the path only
  echo "$RUNS/adapters/ultra-$1"
}

# evaluate OUT DATASET ADAPTER VARIANT TEMPLATE MODES LABEL [extra flags]
evaluate() {
  local out=$1 ds=$2 adapter=$3 variant=$4 template=$5 modes=$6 label=$7; shift 7
  # shellcheck disable=SC2046
  log_cmd $SETLLM_RUN eval --dataset "$ds" --data-dir "$DATA" --limit "$N_EVAL" --subset-seed 0 --adapter "$adapter" \
    --variant "$variant" --template "$template" --modes "$modes" --label "$label" --seed 0 \
    $(orderings_for "$ds") --out "$out" $EVAL_FLAGS "$@"
}

table_a() {
  local u_causal u_set
  u_causal=$(ultra causal-pe); u_set=$(ultra setmask-setpe)
  for ds in "${DATASETS[@]}"; do
    local e="$RUNS/eval/A/$ds" a="$RUNS/adapters"
    # Causal Mask+PE*: the paper's original prompts (no options in the prompt; SIQA numbered).
    evaluate "$e/causal-orig-pretrained" "$ds" none causal-pe original single "Causal Mask+PE*"
    train "$a/$ds-causal-orig" causal-pe "$(export_train "$ds" original)"
    evaluate "$e/causal-orig-finetuned" "$ds" "$a/$ds-causal-orig" causal-pe original single "Causal Mask+PE*"
    # Causal Mask+PE with the modified prompt (options in the prompt): single run and majority vote.
    evaluate "$e/causal-pretrained" "$ds" none causal-pe modified "$ALL_MODES" "Causal Mask+PE"
    train "$a/$ds-causal" causal-pe "$(export_train "$ds" modified)"
    evaluate "$e/causal-finetuned" "$ds" "$a/$ds-causal" causal-pe modified "$ALL_MODES" "Causal Mask+PE"
    train "$a/$ds-causal-ultra" causal-pe "$(export_train "$ds" modified)" "$u_causal"
    evaluate "$e/causal-ultra-finetuned" "$ds" "$a/$ds-causal-ultra" causal-pe modified "$ALL_MODES" "Causal Mask+PE Ultra"
    # Set-LLM: one run per question.
    train "$a/$ds-setmask" setmask-setpe "$(export_train "$ds" modified)"
    evaluate "$e/setmask-finetuned" "$ds" "$a/$ds-setmask" setmask-setpe modified "$ALL_MODES" "SetMask+SetPE"
    train "$a/$ds-setmask-ultra" setmask-setpe "$(export_train "$ds" modified)" "$u_set"
    evaluate "$e/setmask-ultra-finetuned" "$ds" "$a/$ds-setmask-ultra" setmask-setpe modified "$ALL_MODES" "SetMask+SetPE Ultra"
    # The guarantee checked, not assumed: every tested ordering run unsorted, answer changes counted.
    evaluate "$e/setmask-ultra-verified" "$ds" "$a/$ds-setmask-ultra" setmask-setpe modified "$ALL_MODES" \
      "SetMask+SetPE Ultra (verified)" --verify-invariance
  done
  setllm report "$RUNS"/eval/A/*/causal-* "$RUNS"/eval/A/*/setmask-finetuned "$RUNS"/eval/A/*/setmask-ultra-finetuned \
    --plot-dir "$RUNS/report/A" --markdown "$RUNS/report/table_a.md"
  grep -h '"invariance_flips"\|"invariance_runs"\|"max_logprob_diff"' "$RUNS"/eval/A/*/setmask-ultra-verified/summary.json
}

table_b() {  # the paper's Table 2 / 14 ablation, without the Ultra stage, on ARC only
  local ds=arc_challenge
  for v in causal-pe causal-nope prefix-nope prefix-pe prefix-setpe setmask-setpe; do
    local ad="$RUNS/adapters/$ds-$v"
    [ "$v" = causal-pe ] && ad="$RUNS/adapters/$ds-causal"
    [ "$v" = setmask-setpe ] && ad="$RUNS/adapters/$ds-setmask"
    train "$ad" "$v" "$(export_train "$ds" modified)"
    evaluate "$RUNS/eval/B/$v" "$ds" "$ad" "$v" modified "$ALL_MODES" "$v"
  done
  setllm report "$RUNS"/eval/B/* --plot-dir "$RUNS/report/B" --markdown "$RUNS/report/table_b.md"
}

table_c() {  # runtime of the ARC runs of table A: runtime_s and runs per question, per mode
  # ULTRA=-ultra compares the Ultra-finetuned runs instead (the paper's Table 21 rows).
  local e="$RUNS/eval/A/arc_challenge" u=${ULTRA:-}
  [ -f "$e/setmask$u-finetuned/summary.json" ] || table_a
  setllm report "$e/causal$u-finetuned" "$e/setmask$u-finetuned" --no-plots --markdown "$RUNS/report/table_c.md"
  python - "$e" "causal$u-finetuned" "setmask$u-finetuned" <<'PY'
import json, sys
for run in sys.argv[2:]:
    s = json.load(open(f"{sys.argv[1]}/{run}/summary.json"))
    print(run, "runtime_s", s["runtime_s"], "runs/question", s["runs_per_question"], "peak MB", s["peak_memory_mb"], s["memory_measure"])
PY
}

table_d() {  # out of distribution: the Ultra-finetuned adapters of table A on the other datasets
  for train_ds in "${DATASETS[@]}"; do
    for ds in "${DATASETS[@]}"; do
      [ "$ds" = "$train_ds" ] && continue
      local e="$RUNS/eval/D/$train_ds-on-$ds" a="$RUNS/adapters"
      evaluate "$e/causal-ultra" "$ds" "$a/$train_ds-causal-ultra" causal-pe modified "$ALL_MODES" "Causal Mask+PE Ultra ($train_ds)"
      evaluate "$e/setmask-ultra" "$ds" "$a/$train_ds-setmask-ultra" setmask-setpe modified "$ALL_MODES" "SetMask+SetPE Ultra ($train_ds)"
    done
    setllm report "$RUNS"/eval/D/"$train_ds"-on-*/* "$RUNS"/eval/A/"$train_ds"/{causal,setmask}-ultra-finetuned \
      --plot-dir "$RUNS/report/D-$train_ds" --markdown "$RUNS/report/table_d_$train_ds.md"
  done
}

case "${1:-all}" in
  A) table_a ;; B) table_b ;; C) table_c ;; D) table_d ;;
  all) table_a; table_b; table_c; table_d ;;
  # One piece at a time, e.g. `reproduce.sh step evaluate OUT DS ADAPTER VARIANT TEMPLATE MODES LABEL`
  # or `reproduce.sh step train OUT VARIANT "$(reproduce.sh step export_train DS modified)"`.
  step) shift; "$@" ;;
  *) echo "usage: $0 [A|B|C|D|all|step FUNCTION ARGS...]" >&2; exit 2 ;;
esac
