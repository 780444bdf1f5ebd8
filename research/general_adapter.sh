#!/usr/bin/env bash
# One general Set-LLM adapter: the paper's Ultra stage, one mixed stage on top, and
# its measurement on formats no training mix holds, beside the untrained baselines.
#
#   research/general_adapter.sh data          the mixed stage's documents rows and the held-out evaluation files
#   research/general_adapter.sh ultra         the Ultra stage of Table A (`reproduce.sh step ultra setmask-setpe`:
#                                             ULTRA_N UltraFeedback train rows, their unordered lists as sets,
#                                             LoRA r 8 alpha 1), shared with Table A's Ultra rows
#   research/general_adapter.sh mixed         the mixed stage from the Ultra adapter (FROM=base: from the base model)
#   research/general_adapter.sh eval NAME ADAPTER VARIANT
#                                             every task on trained and held-out formats, subset seeds 0 and 1
#   research/general_adapter.sh baselines     eval of the untrained model: setmask-setpe and causal-pe
#   research/general_adapter.sh eval shipped auto setmask-setpe
#                                             the shipped specialised set (choose adapter, documents adapter)
#   research/general_adapter.sh framed        the choose adapter's recipe with questions in several frames
#                                             (setllm data mc-framed), runs/general/adapters/choose-framed-bf16
#   research/general_adapter.sh wise          the shipped choose adapter's delta scaled by WISE_SCALE (0.5), a
#                                             weight-space ensemble with the base model (`setllm export adapter
#                                             --scale`), on the multiple-choice grid: runs/general/eval/choose-wise-S
#   research/general_adapter.sh ultra-choose
#                                             the shipped choose recipe started from a longer Ultra stage
#                                             (UC_ULTRA_N rows, 1600), exported in bf16, on the multiple-choice grid
#   research/general_adapter.sh rank-choose
#                                             stage 1 of the shipped choose adapter (from git), one more stage trained to rank each
#                                             question's options (--objective preference, summed scores as choose
#                                             reads them, + the SFT term), exported in bf16, on the multiple-choice grid
#   research/general_adapter.sh rank-choose-long
#                                             the same rank stage on three times the questions (2,460, same seed)
#   research/general_adapter.sh causal-documents
#                                             the documents goal's comparator: the causal twin of the shipped
#                                             documents adapter (research/documents.sh, 3 stages), held-out phrasings
#   research/general_adapter.sh documents-phrased
#                                             documents.sh stage4 (both variants), on the held-out phrasings
#   research/general_adapter.sh documents-sbp-shipped
#                                             the shipped documents adapter read under sbp as it is, then
#                                             continued under sbp on documents.sh's stage-4 rows (from it, not
#                                             from the base), both on the held-out phrasings beside the shipped
#                                             reading and untrained sbp (general_table.py --paired sbp-from-shipped,shipped)
#   research/general_adapter.sh documents-sbp-mixed
#                                             the same from the shipped adapter on stage three's and four's rows together
#   research/general_adapter.sh documents-sbp-wide
#                                             the same with rows in 12 more training phrasings (train-more), also on
#                                             a second held-out list (held-out-2) beside the shipped reading
#   research/general_adapter.sh documents-default
#                                             the default documents reading (no --adapter, no --variant) on both lists
#   research/general_adapter.sh documents-sbp
#                                             documents.sh stages 1-4 under sbp (the cacheable reading), then it,
#                                             the untrained sbp reading and the shipped documents adapter on the
#                                             held-out phrasings (general_table.py --paired documents-stage4-sbp,shipped)
#   research/general_adapter.sh judge NAME ADAPTER VARIANT
#                                             N_JUDGE (100) UltraFeedback test pairs per subset seed in the held-out
#                                             judge prompt (in no training mix), read with `mean` (the shipped judge's)
#   research/general_adapter.sh whole-split NAME ADAPTER
#                                             PIQA validation (both templates) and ARC-Challenge test (held-out) whole
#                                             (general_table.py --runs runs/general/eval-full --seeds all)
#   python research/general_table.py --names A,B,...  /  --paired A,B
#                                             the table of the runs (docs/experiments/training-adapters.md), or A - B question by question
#   research/general_adapter.sh all           everything above, in order
#
# Mixed stage data (training formats): 200 train questions of each benchmark (modified
# template), key-value rows in the 8 training phrasings (`setllm data kv-phrased --phrasings
# train`, 4 and 8 documents), CommonsenseQA lookups from its train split, and the UltraFeedback
# judge pairs that fit MAX_LENGTH (the judge prompt, the better response as the answer).
# Held-out formats (in no training mix): `--template held-out` for every benchmark; documents
# in the 4 held-out phrasings (`--phrasings held-out`, 8 documents). Evaluation: N_EVAL
# questions (documents: N_DOCS rows, gold first / middle / last) per subset seed 0 and 1; the
# causal model over every ordering of PIQA and SIQA and 6 seeded ones of ARC and CSQA (its
# "random" accuracy is the mean over orderings).
# TEMPLATES (default "modified held-out"): the multiple-choice templates evaluated; SEEDS
# (default "0 1"): the subset seeds of eval and judge.
# Repository root, venv active, ../shared/data present. Resumable: a finished step is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-../shared/data}
RUNS=${RUNS:-runs/general}
export ULTRA_N=${ULTRA_N:-400}
N_EVAL=${N_EVAL:-300}
N_DOCS=${N_DOCS:-100}
N_JUDGE=${N_JUDGE:-100}
MAX_LENGTH=${MAX_LENGTH:-384}
D=$RUNS/data
MC=(piqa social_iqa arc_challenge commonsense_qa)
run() { printf '+ %s\n' "$*" >&2; ${LOCK:+flock "$LOCK"} "$@"; }

data() {
  mkdir -p "$D"
  [ -s "$D/kv4-train.jsonl" ] || run setllm data kv-phrased --phrasings train --docs 4 --n 200 --seed 11 --out "$D/kv4-train.jsonl"
  [ -s "$D/kv8-train.jsonl" ] || run setllm data kv-phrased --phrasings train --docs 8 --n 200 --seed 12 --out "$D/kv8-train.jsonl"
  [ -s "$D/qa-train.jsonl" ] || run setllm data qa-lookup --data-dir "$DATA" --source commonsense_qa --split train --docs 6 \
    --n 150 --seed 13 --out "$D/qa-train.jsonl"
  for seed in 0 1; do
    [ -s "$D/kv8-held-out-s$seed.jsonl" ] || run setllm data kv-phrased --phrasings held-out --docs 8 --n "$N_DOCS" \
      --seed $((1000 + seed)) --out "$D/kv8-held-out-s$seed.jsonl"
  done
}

train() {  # train OUT SPECS [extra]
  local out=$1 specs=$2; shift 2
  [ -f "$out/adapter_model.safetensors" ] && return 0
  local resume=(); compgen -G "$out/checkpoint-*" >/dev/null && resume=(--resume)
  run setllm train --data "$specs" --data-dir "$DATA" --variant setmask-setpe --lr 1e-3 --lora-r 8 --lora-alpha 1 \
    --batch-size 8 --epochs 1 --max-length "$MAX_LENGTH" --overlong skip --skip-bad --seed 42 --sample-seed 42 \
    --logging-steps 10 --save-steps 25 --out "$out" --no-progress "${resume[@]}" "$@"
}

ultra() { RUNS=${REPRO_RUNS:-runs/repro} research/reproduce.sh step ultra setmask-setpe; }  # prints the adapter path (Table A runs)

mixed() {
  data
  local init=() out=$RUNS/adapters/mixed
  if [ "${FROM:-ultra}" = base ]; then out=$RUNS/adapters/mixed-no-ultra; else init=(--init-adapter "$(ultra)"); fi
  train "$out" "arc_challenge:200,piqa:200,commonsense_qa:200,social_iqa:200,$D/kv4-train.jsonl,$D/kv8-train.jsonl,$D/qa-train.jsonl,ultrafeedback-judge" \
    "${init[@]}"
}

evaluate() {  # evaluate NAME ADAPTER VARIANT
  local name=$1 adapter=$2 variant=$3
  data
  for seed in ${SEEDS:-0 1}; do
    for ds in "${MC[@]}"; do
      local extra=()
      [ "$variant" = causal-pe ] && { [ "$ds" = arc_challenge ] || [ "$ds" = commonsense_qa ]; } && extra=(--max-orderings 6 --ordering-choice random)
      for template in ${TEMPLATES:-modified held-out}; do
        local out=$RUNS/eval/$name/$ds-$template-s$seed
        [ -f "$out/summary.json" ] && continue
        run setllm eval --dataset "$ds" --data-dir "$DATA" --limit "$N_EVAL" --subset-seed "$seed" --template "$template" \
          --adapter "$adapter" --variant "$variant" --seed 0 "${extra[@]}" ${MODEL:+--model "$MODEL"} --out "$out" --no_progress
      done
    done
    [ "${SKIP_DOCS:-0}" = 1 ] || documents "$name" "$adapter" "$variant" "$seed"
  done
}

documents() {  # documents NAME ADAPTER VARIANT SEED [PHRASINGS]: key-value rows in held-out phrasings (held-out), gold first / middle / last
  local rows=kv8-${5:-held-out}-s$4
  local out=$RUNS/eval/$1/$rows
  [ -f "$out/summary.json" ] || run setllm eval --dataset documents --data-file "$D/$rows.jsonl" \
    --adapter "$2" --variant "$3" --gold-positions 0,4,-1 ${MODEL:+--model "$MODEL"} --out "$out" --no_progress
}

# The choose adapter's recipe (src/setllm/adapters/smollm2-135m-setllm.yaml) with each benchmark
# question in one of several frames (`setllm data mc-framed`: the same seeded sample of the same
# records, the task's own template among the frames, never the held-out one), exported in bf16
# as the shipped one was: does a choose adapter that saw several wordings read the held-out one?
framed() {
  local recipe=src/setllm/adapters/smollm2-135m-setllm.yaml out=$RUNS/adapters/choose-framed specs="" spec
  mkdir -p "$D"
  for spec in $(sed -n 's/^data: *\([^ #]*\).*/\1/p' "$recipe" | tr , ' '); do  # the recipe's specs, benchmarks framed
    case ${spec%:*} in
      piqa|social_iqa|arc_challenge|commonsense_qa)
        [ -s "$D/${spec%:*}-framed.jsonl" ] || run setllm data mc-framed --task "${spec%:*}" --data-dir "$DATA" --n "${spec#*:}" \
          --seed 42 --out "$D/${spec%:*}-framed.jsonl"
        spec=$D/${spec%:*}-framed.jsonl ;;
    esac
    specs+=${specs:+,}$spec
  done
  [ -f "$out-bf16/adapter_model.safetensors" ] && return 0
  local resume=(); compgen -G "$out/checkpoint-*" >/dev/null && resume=(--resume)
  [ -f "$out/adapter_model.safetensors" ] || run setllm train --config "$recipe" --data "$specs" --out "$out" --no-progress "${resume[@]}"
  run setllm export adapter "$out" "$out-bf16" --dtype bf16
}

# The documents goal's comparator: the causal twin of the shipped documents adapter, trained by
# research/documents.sh in its three stages exactly as the shipped Set-LLM one was.
causal_documents() {
  data
  local s docs=${DOCS_RUNS:-runs/documents}
  for s in stage1 stage2 stage3; do RUNS=$docs VARIANTS=causal-pe research/documents.sh "$s"; done
  for s in 0 1; do documents trained-causal-documents "$docs/stage3/causal-pe" causal-pe "$s"; done
}

# Stage four of research/documents.sh for both variants (stage three plus key-value rows in
# the 8 training phrasings), then both on the held-out phrasings: do several phrasings in
# training close the Set-LLM adapter's gap to its causal twin there?
documents_phrased() {
  data
  local s v docs=${DOCS_RUNS:-runs/documents}
  RUNS=$docs research/documents.sh stage4
  for s in 0 1; do
    for v in setmask-setpe causal-pe; do documents "documents-stage4-$v" "$docs/stage4/$v" "$v" "$s"; done
  done
}

# The documents recipe under sbp, whose documents' keys and values are reusable across questions
# (docs/documents.md, "Documents read once"): is the cacheable reading as useful as the shipped
# setmask-setpe documents adapter? Same data, stages and budget; the shipped adapter is re-read
# here so that both have per-question predictions on the same rows (paired standard errors).
documents_sbp() {
  data
  local s st docs=${DOCS_RUNS:-runs/documents}
  for st in stage1 stage2 stage3 stage4; do RUNS=$docs VARIANTS=sbp research/documents.sh "$st"; done
  for s in 0 1; do
    documents documents-stage4-sbp "$docs/stage4/sbp" sbp "$s"
    sbp_references "$s"
  done
}

sbp_references() {  # sbp_references SEED: what an sbp documents adapter is read beside (the shipped reading, untrained sbp)
  documents shipped auto setmask-setpe "$1"
  documents untrained-sbp none sbp "$1"
}

# The cacheable reading from the shipped documents adapter instead of from the base model: the
# shipped adapter read under sbp unchanged (its documents no longer see the question after
# them, nor each other), then 50 more steps under sbp on the stage-4 rows it was last trained
# on, at half the stage's learning rate (1e-3). Same held-out rows and readings as documents-sbp.
documents_sbp_shipped() {
  data
  local s docs=${DOCS_RUNS:-runs/documents} shipped=src/setllm/adapters/smollm2-135m-documents
  RUNS=$docs research/documents.sh data
  for s in 0 1; do documents shipped-read-sbp "$shipped" sbp "$s"; done
  sbp_from_shipped sbp-from-shipped "$docs/data/kv4-phrased-train.jsonl,$docs/data/kv8-phrased-train.jsonl" 1e-3 --limit 200
  for s in 0 1; do
    documents sbp-from-shipped "$RUNS/adapters/sbp-from-shipped" sbp "$s"
    sbp_references "$s"
  done
}

# The same start, on stage three's rows (k=10 and k=20 key-value, CommonsenseQA lookups) and
# stage four's phrased rows together (160 of each), at the stages' learning rate: more rows and more
# kinds of document than stage four alone.
documents_sbp_mixed() {
  documents_sbp_shipped
  local s docs=${DOCS_RUNS:-runs/documents}
  sbp_from_shipped sbp-from-shipped-mixed \
    "$docs/data/kv10-train-c.jsonl,$docs/data/kv20-train-c.jsonl,$docs/data/qa10-train-c.jsonl,$docs/data/kv4-phrased-train.jsonl,$docs/data/kv8-phrased-train.jsonl" \
    2e-3 --limit 160
  for s in 0 1; do documents sbp-from-shipped-mixed "$RUNS/adapters/sbp-from-shipped-mixed" sbp "$s"; done
}

# The same start and rows with key-value rows in 12 more training phrasings (`setllm data
# kv-phrased --phrasings train-more`, written after the misses above), on the held-out phrasings
# and on a second held-out list written with them (held-out-2, in no training mix), beside the
# shipped reading and untrained sbp on both.
documents_sbp_wide() {
  data
  local s k docs=${DOCS_RUNS:-runs/documents}
  RUNS=$docs research/documents.sh data
  for k in 4 8; do
    [ -s "$docs/data/kv$k-more-train.jsonl" ] || run setllm data kv-phrased --phrasings train-more --docs $k --n 200 \
      --seed $((30 + k)) --out "$docs/data/kv$k-more-train.jsonl"
  done
  for s in 0 1; do
    [ -s "$D/kv8-held-out-2-s$s.jsonl" ] || run setllm data kv-phrased --phrasings held-out-2 --docs 8 --n "$N_DOCS" \
      --seed $((2000 + s)) --out "$D/kv8-held-out-2-s$s.jsonl"
  done
  sbp_from_shipped sbp-from-shipped-wide \
    "$docs/data/kv10-train-c.jsonl,$docs/data/kv20-train-c.jsonl,$docs/data/qa10-train-c.jsonl,$docs/data/kv4-phrased-train.jsonl,$docs/data/kv8-phrased-train.jsonl,$docs/data/kv4-more-train.jsonl,$docs/data/kv8-more-train.jsonl" \
    2e-3 --limit 160
  for s in 0 1; do documents sbp-from-shipped-wide "$RUNS/adapters/sbp-from-shipped-wide" sbp "$s"; done
  # As shipped (`setllm export adapter` in bf16 to src/setllm/adapters/smollm2-135m-documents-sbp):
  # what `--variant sbp` reads documents with when no adapter is named.
  for s in 0 1; do documents sbp-shipped auto sbp "$s"; done
  for s in 0 1; do
    documents sbp-from-shipped-wide "$RUNS/adapters/sbp-from-shipped-wide" sbp "$s" held-out-2
    documents shipped auto setmask-setpe "$s" held-out-2
    documents untrained-sbp none sbp "$s" held-out-2
  done
}

# The default documents reading as a user gets it: `setllm eval --dataset documents` with no
# --adapter and no --variant (sbp with its shipped documents adapter), on both held-out lists,
# the rows the readings above were measured on.
documents_default() {
  data
  local s list
  for s in 0 1; do
    [ -s "$D/kv8-held-out-2-s$s.jsonl" ] || run setllm data kv-phrased --phrasings held-out-2 --docs 8 --n "$N_DOCS" \
      --seed $((2000 + s)) --out "$D/kv8-held-out-2-s$s.jsonl"
  done
  for s in 0 1; do
    for list in held-out held-out-2; do
      out=$RUNS/eval/default/kv8-$list-s$s
      [ -f "$out/summary.json" ] || run setllm eval --dataset documents --data-file "$D/kv8-$list-s$s.jsonl" \
        --gold-positions 0,4,-1 --out "$out" --no_progress
    done
  done
}

sbp_from_shipped() {  # sbp_from_shipped NAME SPECS LR [extra]: train NAME under sbp from the shipped documents adapter
  local out=$RUNS/adapters/$1 specs=$2 lr=$3; shift 3
  [ -f "$out/adapter_model.safetensors" ] && return 0
  local resume=(); compgen -G "$out/checkpoint-*" >/dev/null && resume=(--resume)
  run setllm train --data "$specs" --variant sbp --init-adapter src/setllm/adapters/smollm2-135m-documents --max-length 640 \
    --lr "$lr" --batch-size 8 --epochs 1 --seed 42 --logging-steps 5 --save-steps 10 --out "$out" --no-progress "${resume[@]}" "$@"
}

# WiSE-FT (Wortsman et al. 2022) on the shipped choose adapter: the base weights plus WISE_SCALE
# times its trained delta, the paper's untuned middle (0.5), not picked on this grid. Documents
# are read by the documents adapter on every route, so only the multiple-choice cells are run.
wise() {
  local scale=${WISE_SCALE:-0.5}
  local out=$RUNS/adapters/choose-wise-$scale
  [ -f "$out/adapter_model.safetensors" ] || run setllm export adapter src/setllm/adapters/smollm2-135m-setllm "$out" --dtype bf16 --scale "$scale"
  SKIP_DOCS=1 evaluate "choose-wise-$scale" "$out" setmask-setpe
}

# The shipped choose recipe on top of the paper's Ultra stage, the Ultra stage of Table A
# (reproduce.sh step ultra: same flags) on UC_ULTRA_N UltraFeedback rows instead of 400: that
# one ended before the Set-LLM had adapted to reading prompts both ways (loss 2.70 vs 1.80).
# Beside the shipped adapter (the same recipe from the base model) this is the Ultra stage's
# effect on the shipped recipe.
ultra_choose() {
  local n=${UC_ULTRA_N:-1600} recipe=src/setllm/adapters/smollm2-135m-setllm.yaml out=$RUNS/adapters/choose-ultra
  local ultra; ultra=$(RUNS=$RUNS/ultra-$n ULTRA_N=$n research/reproduce.sh step ultra setmask-setpe)
  if [ ! -f "$out-bf16/adapter_model.safetensors" ]; then
    local resume=(); compgen -G "$out/checkpoint-*" >/dev/null && resume=(--resume)
    [ -f "$out/adapter_model.safetensors" ] || run setllm train --config "$recipe" --init-adapter "$ultra" --out "$out" --no-progress "${resume[@]}"
    run setllm export adapter "$out" "$out-bf16" --dtype bf16
  fi
  SKIP_DOCS=1 evaluate choose-ultra "$out-bf16" setmask-setpe
}

# The shipped choose adapter taught to rank: its SFT recipe raises the right option's
# likelihood but never lowers the others', which is what choose compares. One more stage on
# fresh train questions (sample seed 7; the recipe's mix, 1/6 of its size), SimPO's loss on
# the summed log-likelihood of option + EOS (beta 1, margin 0: a logistic loss on the score
# difference choose reads) plus the cross-entropy of the right option (CPO's term, weight 1),
# so that the generation routes it also serves keep a generator.
# Since 2026-11-26 the shipped adapter is this run's result, so its start (stage 1, shipped
# until then) comes from git: the three files as commit STAGE1_COMMIT held them.
stage1() {
  local dir=$RUNS/adapters/choose-stage1 f
  mkdir -p "$dir"
  for f in adapter_config.json adapter_model.safetensors setllm.json; do
    [ -s "$dir/$f" ] || git show "${STAGE1_COMMIT:-e62429f}:src/setllm/adapters/smollm2-135m-setllm/$f" > "$dir/$f"
  done
  echo "$dir"
}

rank_choose() {  # rank_choose NAME DATA: the rank stage on DATA questions from stage 1
  local name=$1 data=$2 start; start=$(stage1)
  local out=$RUNS/adapters/$name
  if [ ! -f "$out-bf16/adapter_model.safetensors" ]; then
    local resume=(); compgen -G "$out/checkpoint-*" >/dev/null && resume=(--resume)
    [ -f "$out/adapter_model.safetensors" ] || run setllm train --data "$data" \
      --data-dir "$DATA" --init-adapter "$start" --variant setmask-setpe --objective preference \
      --preference-score sum --preference-beta 1 --preference-margin 0 --preference-sft 1 --lr 1e-3 --batch-size 8 --epochs 1 \
      --max-length 256 --seed 42 --sample-seed 7 --logging-steps 5 --save-steps 10 --out "$out" --no-progress "${resume[@]}"
    run setllm export adapter "$out" "$out-bf16" --dtype bf16
  fi
  SKIP_DOCS=1 evaluate "$name" "$out-bf16" setmask-setpe
}

judge() {  # judge NAME ADAPTER VARIANT: UltraFeedback test pairs in the held-out judge prompt, read with `mean`
  local seed out
  for seed in ${SEEDS:-0 1}; do
    out=$RUNS/eval/$1/ultrafeedback-pairs-held-out-s$seed
    [ -f "$out/summary.json" ] || run setllm eval --dataset ultrafeedback-pairs --data-dir "$DATA" --template held-out \
      --limit "$N_JUDGE" --subset-seed "$seed" --adapter "$2" --variant "$3" --readout mean --seed 0 ${MODEL:+--model "$MODEL"} \
      --out "$out" --no_progress
  done
}

whole_split() {  # whole_split NAME ADAPTER: the cells the goal was missed on, on the whole split
  local spec ds template out
  for spec in piqa:modified piqa:held-out arc_challenge:held-out; do
    ds=${spec%%:*} template=${spec#*:}
    out=$RUNS/eval-full/$1/$ds-$template-all
    [ -f "$out/summary.json" ] || run setllm eval --dataset "$ds" --data-dir "$DATA" --template "$template" --adapter "$2" \
      --variant setmask-setpe --seed 0 --out "$out" --no_progress
  done
}

baselines() {
  evaluate untrained-set none setmask-setpe
  evaluate untrained-causal none causal-pe
}

case "${1:-}" in
  data|ultra|mixed|baselines|framed|wise) "$1" ;;
  causal-documents) causal_documents ;;
  ultra-choose) ultra_choose ;;
  rank-choose) rank_choose choose-rank arc_challenge:100,piqa:400,commonsense_qa:160,social_iqa:160 ;;
  rank-choose-long) rank_choose choose-rank-long arc_challenge:300,piqa:1200,commonsense_qa:480,social_iqa:480 ;;
  documents-phrased) documents_phrased ;;
  documents-sbp) documents_sbp ;;
  documents-sbp-shipped) documents_sbp_shipped ;;
  documents-sbp-mixed) documents_sbp_mixed ;;
  documents-sbp-wide) documents_sbp_wide ;;
  documents-default) documents_default ;;
  eval) shift; evaluate "$@" ;;
  whole-split) shift; whole_split "$@" ;;
  judge) shift; judge "$@" ;;
  all) data; mixed; evaluate mixed "$RUNS/adapters/mixed" setmask-setpe; baselines ;;
  *) echo "usage: $0 data|ultra|mixed|eval NAME ADAPTER VARIANT|baselines|causal-documents|documents-phrased|documents-sbp|documents-sbp-shipped|documents-sbp-mixed|documents-sbp-wide|documents-default|framed|wise|ultra-choose|rank-choose|rank-choose-long|whole-split NAME ADAPTER|judge NAME ADAPTER VARIANT|all" >&2; exit 2 ;;
esac
