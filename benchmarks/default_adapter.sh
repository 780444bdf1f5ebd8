#!/usr/bin/env bash
# The shipped adapter's acceptance check (issue 8, point 4): on 300 seeded questions of each
# benchmark (--subset-seed 0, single mode, modified template, options scored as text + EOS),
# the default adapter against the untrained model read with SetMask+SetPE.
#
# Usage (repository root, venv active):  benchmarks/default_adapter.sh [untrained|adapter DIR NAME]
# Resumable: `setllm eval` continues a run in its --out directory. Logs each command.
set -euo pipefail
cd "$(dirname "$0")/.."
R=benchmarks/reproduce.sh
RUNS=${RUNS:-runs/default}
DATASETS=(piqa arc_challenge commonsense_qa social_iqa)

evaluate_all() {  # evaluate_all NAME ADAPTER
  for ds in "${DATASETS[@]}"; do
    $R step evaluate "$RUNS/eval/$1/$ds" "$ds" "$2" setmask-setpe modified single "SetMask+SetPE ($1)"
  done
}

case "${1:-}" in
  untrained) evaluate_all untrained none ;;
  adapter) evaluate_all "$3" "$2" ;;
  *) echo "usage: $0 [untrained|adapter DIR NAME]" >&2; exit 2 ;;
esac
