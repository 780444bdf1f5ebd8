#!/usr/bin/env bash
# Rebuilds the shipped adapter src/setllm/adapters/smollm2-135m-setllm/ from scratch.
# Usage (repository root, venv active, ../shared/data present):
#   configs/build_default_adapter.sh            # train (about 30-60 min on a 2-core CPU), export, demo
#   configs/build_default_adapter.sh --resume   # after a kill: continue from the last checkpoint
set -euo pipefail
cd "$(dirname "$0")/.."
out=runs/smollm2-135m-setllm
dest=src/setllm/adapters/smollm2-135m-setllm
setllm train --config configs/smollm2-135m-setllm.yaml --out "$out" "$@"
# Only what loading needs, weights in bf16 (about 5 MB): no checkpoints, no pickles.
python -c "from setllm.training.run import export_adapter; export_adapter('$out', '$dest', 'bf16')"
setllm demo
