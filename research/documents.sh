#!/usr/bin/env bash
# Documents as a set: generated data, causal-pe and Set-LLM adapters trained
# identically in three stages, their evaluation by gold position, and the long-input bench.
#
#   research/documents.sh data                   key-value (k=10, 20, 50) and CommonsenseQA lookup rows
#   research/documents.sh stage1|stage2|stage3 train both variants (each stage starts from the last)
#   research/documents.sh stage4                 stage three plus key-value rows in several phrasings
#   research/documents.sh evaluate STAGE          pretrained|stage1|stage2|stage3 on kv10, kv20, qa10
#   research/documents.sh kv50                    stage three on k=50 (30 rows)
#   research/documents.sh shipped                 the shipped documents adapter (no --adapter) on kv10, kv20, qa10
#   research/documents.sh long                    benchmarks/bench_long.py at 2k-8k and 16k
#   research/documents.sh all                     everything above, in order
#
# Stage one: 320 k=10 rows, 40 steps of 8. Stages two and three: 160 k=10, 160 k=20 and 80
# CommonsenseQA-lookup rows each (fresh rows per stage), 50 steps of 8. LoRA r 8, alpha 8,
# lr 2e-3. Stage four: 200 k=4 and 200 k=8 rows in the 8 training phrasings of
# `setllm data kv-phrased` (mixed key and value kinds), 50 steps of 8. Every row's gold document
# sits at a seeded random position. Evaluation: the first 50 test rows (k=50: 30), the gold
# document moved to each listed position.
# Repository root, venv active, ../shared/data present (the lookup rows are built from it).
# Resumable: a finished step is skipped. LOCK=/path/to/lockfile runs every step under flock.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
RUNS=${RUNS:-runs/documents}
D=$RUNS/data
read -ra VARIANTS <<< "${VARIANTS:-causal-pe setmask-setpe}"  # VARIANTS=causal-pe: one variant only
run() { printf '+ %s\n' "$*" >&2; ${LOCK:+flock "$LOCK"} "$@"; }

kv() {  # kv NAME PAIRS N SEED
  [ -s "$D/$1.jsonl" ] || run setllm data kv-retrieval --pairs "$2" --n "$3" --seed "$4" --key-length 8 --value-length 8 --out "$D/$1.jsonl"
}
qa() {  # qa NAME SPLIT N SEED
  [ -s "$D/$1.jsonl" ] || run setllm data qa-lookup --data-dir "$DATA" --source commonsense_qa --split "$2" --docs 10 --n "$3" \
    --seed "$4" --out "$D/$1.jsonl"
}
data() {
  kv kv10-train 10 2000 1
  [ -s "$D/kv10-train-b.jsonl" ] || sed -n 321,640p "$D/kv10-train.jsonl" > "$D/kv10-train-b.jsonl"  # the rows after stage one's 320
  kv kv20-train 20 160 2; qa qa10-train train 80 3                            # stage two
  kv kv10-train-c 10 160 3; kv kv20-train-c 20 160 4; qa qa10-train-c train 80 5  # stage three
  kv kv10-test 10 100 1001; kv kv20-test 20 100 1002; kv kv50-test 50 100 1005
  qa qa10-test validation 100 1003
  local k  # stage four
  for k in 4 8; do
    [ -s "$D/kv$k-phrased-train.jsonl" ] || run setllm data kv-phrased --phrasings train --docs $k --n 200 --seed $((20 + k)) \
      --out "$D/kv$k-phrased-train.jsonl"
  done
}

train() {  # train STAGE INIT_STAGE DATA_SPECS MAX_LENGTH [extra]
  local stage=$1 init=$2 specs=$3 max_length=$4; shift 4
  for v in "${VARIANTS[@]}"; do
    [ -f "$RUNS/$stage/$v/adapter_model.safetensors" ] && continue
    run setllm train --data "$specs" --variant "$v" --max-length "$max_length" --lr 2e-3 --lora-alpha 8 --batch-size 8 \
      --epochs 1 --seed 42 --logging-steps 5 --save-steps 1000 --out "$RUNS/$stage/$v" --no-progress --overwrite \
      ${init:+--init-adapter "$RUNS/$init/$v"} "$@"
  done
}
stage1() { data; train stage1 "" "$D/kv10-train.jsonl" 320 --limit 320; }
stage2() { data; train stage2 stage1 "$D/kv10-train-b.jsonl,$D/kv20-train.jsonl,$D/qa10-train.jsonl" 640 --limit 160; }
stage3() { data; train stage3 stage2 "$D/kv10-train-c.jsonl,$D/kv20-train-c.jsonl,$D/qa10-train-c.jsonl" 640 --limit 160; }
stage4() { data; train stage4 stage3 "$D/kv4-phrased-train.jsonl,$D/kv8-phrased-train.jsonl" 640 --limit 200; }

ev() {  # ev STAGE VARIANT TEST POSITIONS [extra]
  local stage=$1 variant=$2 test=$3 positions=$4; shift 4
  local adapter=(--adapter none) out="$RUNS/eval/$stage-$variant/$test"
  case $stage in
    pretrained) ;;
    shipped) adapter=() ;;  # what eval loads by default: adapters/smollm2-135m-documents
    *) adapter=(--adapter "$RUNS/$stage/$variant") ;;
  esac
  [ -f "$out/summary.json" ] || run setllm eval --dataset documents --data-file "$D/$test.jsonl" --limit 50 \
    --gold-positions "$positions" "${adapter[@]}" --variant "$variant" --label "$stage-$variant" --out "$out" --no-progress "$@"
}
evaluate() {  # evaluate STAGE
  data
  for v in "${VARIANTS[@]}"; do
    ev "$1" "$v" kv10-test 0,3,6,-1; ev "$1" "$v" kv20-test 0,4,9,-1; ev "$1" "$v" qa10-test 0,3,6,-1
  done
}
shipped() { data; ev shipped setmask-setpe kv10-test 0,3,6,-1; ev shipped setmask-setpe kv20-test 0,4,9,-1; ev shipped setmask-setpe qa10-test 0,3,6,-1; }
kv50() { data; for v in "${VARIANTS[@]}"; do ev stage3 "$v" kv50-test 0,24,-1 --limit 30; done; }
long() {
  [ -s "$RUNS/bench_long_2k-8k.json" ] || run python benchmarks/bench_long.py --lengths 2048,4096,8192 --json "$RUNS/bench_long_2k-8k.json"
  [ -s "$RUNS/bench_long_16k.json" ] || run python benchmarks/bench_long.py --lengths 16384 --compare-at 0 --timeout 900 \
    --json "$RUNS/bench_long_16k.json"
}
all() {
  stage1; stage2; stage3
  for s in pretrained stage1 stage2 stage3; do evaluate "$s"; done
  kv50; long; shipped
  run setllm report "$RUNS"/eval/*/kv10-test --plot-dir "$RUNS/figures/kv10"
}

case "${1:-}" in
  data|stage1|stage2|stage3|stage4|kv50|shipped|long|all) "$1" ;;
  evaluate) evaluate "${2:?evaluate STAGE: pretrained, stage1, stage2, stage3 or stage4}" ;;
  *) echo "usage: research/documents.sh data|stage1|stage2|stage3|stage4|evaluate STAGE|kv50|shipped|long|all" >&2; exit 2 ;;
esac
