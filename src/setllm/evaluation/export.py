"""Write a benchmark split as ``setllm train`` data, rendered with an evaluation template.

``setllm train --data arc_challenge`` renders benchmarks with its own (modified) template;
to train on exactly what ``setllm eval`` asks, e.g. the paper's *original* template (the
``Causal Mask+PE*`` rows) or the paper's SIQA wording, export the split and train on the file:

    python -m setllm.evaluation.export --dataset arc_challenge --template original \\
        --data-dir ../shared/data --split train --out data/arc_original_train.jsonl
    setllm train --data data/arc_original_train.jsonl --variant causal-pe --out runs/arc-orig

Each line is ``{"id", "prompt": <JSON set prompt>, "response": <correct option>}``, options in
the dataset's order.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .orderings import identity
from .tasks import TASKS, TEMPLATES, get_task, load_records


def export(dataset: str, template: str, out: str | Path, split: str = "train", data_dir: str | None = None,
           limit: int | None = None, subset_seed: int | None = None) -> int:
    """Write the rendered split to ``out``; returns the number of examples."""
    task = get_task(dataset)
    records, _ = load_records(task, split, data_dir, None, limit, subset_seed)
    render = task.template(template).render
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for r in records:
            shown = render(r, identity(len(r.choices)))
            row = {"id": r.id, "prompt": shown.prompt.to_json()["prompt"], "response": shown.options[r.label]}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(records)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m setllm.evaluation.export", description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True, choices=list(TASKS))
    p.add_argument("--template", default="original", choices=list(TEMPLATES))
    p.add_argument("--split", default="train")
    p.add_argument("--data-dir", metavar="D", help="read <D>/<dataset>/<split>.jsonl (default: the HF hub)")
    p.add_argument("--limit", type=int, metavar="N")
    p.add_argument("--subset-seed", type=int, metavar="S")
    p.add_argument("--out", required=True, metavar="FILE")
    args = p.parse_args(argv)
    from ..cli.common import run_guarded

    return run_guarded(lambda a: print(f"{export(a.dataset, a.template, a.out, a.split, a.data_dir, a.limit, a.subset_seed)} examples -> {a.out}", file=sys.stderr), args)


if __name__ == "__main__":
    sys.exit(main())
