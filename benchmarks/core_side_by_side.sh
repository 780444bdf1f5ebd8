#!/usr/bin/env bash
# bench_core.py (a, b) on several commits, one after the other in one run, with this
# checkout's venv: ratios and times side by side (docs/experiments/core-speed.md, "Re-measured side by side").
# Usage: bash benchmarks/core_side_by_side.sh COMMIT [COMMIT ...]   (HEAD's working tree last)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'for d in "$tmp"/*; do git -C "$repo" worktree remove --force "$d" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
for commit in "$@" working-tree; do
  if [ "$commit" = working-tree ]; then dir=$repo; else dir=$tmp/$commit; git -C "$repo" worktree add -q "$dir" "$commit"; fi
  echo "== $commit"
  (cd "$dir" && PYTHONPATH="$dir/src" "$repo/.venv/bin/python" benchmarks/bench_core.py --data-dir "$repo/../shared/data" \
      --n 16 --n-majority 4 --repeats 3 --parts a,b 2>/dev/null)
done
