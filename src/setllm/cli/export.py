"""``setllm export``: a benchmark split as training data, or a trained adapter for shipping.

``setllm train --data arc_challenge`` renders benchmarks in the modified template; to train on
exactly what ``setllm eval`` asks under another template (the paper's *original* one, the
``Causal Mask+PE*`` rows), export the split and train on the file::

    setllm export data --dataset arc_challenge --template original --out arc_orig.jsonl
    setllm export data --data-file mine.jsonl --template original --out mine_orig.jsonl
    setllm export adapter runs/my-adapter dist/my-adapter --dtype bf16
"""

from __future__ import annotations

import sys

from .common import RawHelpFormatter, plain_help


def add_parser(sub, name: str = "export"):
    import textwrap

    from ..tasks import TASKS, TEMPLATES

    intro, _, examples = __doc__.partition("::\n\n")  # the docstring's prose, then its example commands
    p = sub.add_parser("export", help="write a benchmark split as training data, or a trained adapter for shipping",
                       description=textwrap.fill(plain_help(intro) + ("." if examples else ""), 79),
                       epilog="examples:\n" + examples.rstrip() if examples else None, formatter_class=RawHelpFormatter)
    kinds = p.add_subparsers(dest="what", required=True, metavar="WHAT")
    d = kinds.add_parser("data", help="a benchmark split (or your own multiple-choice file) rendered with an evaluation template, "
                                      "as `setllm train` JSONL",
                         description='Each line is {"id", "prompt": <JSON set prompt>, "response": <correct option>}, options in the '
                                     'dataset\'s order. (`setllm train --data FILE` reads a --data-file file itself, in the modified template.)')
    which = d.add_mutually_exclusive_group(required=True)
    which.add_argument("--dataset", choices=list(TASKS))
    which.add_argument("--data-file", metavar="F", help="your own JSONL of {question, choices, label, context?}, as `setllm eval --data-file` reads")
    d.add_argument("--template", default="original", choices=list(TEMPLATES), help="default: original")
    d.add_argument("--split", default="train", help="default: train")
    d.add_argument("--data-dir", metavar="D", help="read <D>/<dataset>/<split>.jsonl (default: the HF hub)")
    d.add_argument("--limit", type=int, metavar="N")
    d.add_argument("--subset-seed", type=int, metavar="S")
    d.add_argument("--out", required=True, metavar="FILE")
    d.set_defaults(func=cmd_export_data)
    a = kinds.add_parser("adapter", help="copy what loading needs from a `setllm train` output (weights cast to --dtype)")
    a.add_argument("src", metavar="RUN_DIR")
    a.add_argument("dest", metavar="DEST_DIR")
    a.add_argument("--dtype", default="bf16", choices=["bf16", "float32"], help="weight dtype (default: bf16, half the size)")
    a.add_argument("--scale", type=float, default=1.0, metavar="S",
                   help="ship the base weights plus S times the trained delta, 0 <= S <= 1 (a weight-space ensemble "
                        "with the base model, WiSE-FT; default: 1, the adapter as trained)")
    a.add_argument("--overwrite", action="store_true", help="write into a DEST_DIR that already holds files (replacing the adapter's files there)")
    a.set_defaults(func=cmd_export_adapter)
    return p


def cmd_export_data(args) -> int:
    from ..training.export import export_split

    n = export_split(args.dataset, args.template, args.out, args.split, args.data_dir, args.limit, args.subset_seed, args.data_file)
    print(f"{n} examples -> {args.out}", file=sys.stderr)
    return 0


def cmd_export_adapter(args) -> int:
    from ..training.export import export_adapter

    print(f"adapter -> {export_adapter(args.src, args.dest, args.dtype, args.scale, args.overwrite)}", file=sys.stderr)
    return 0
