"""``setllm judge``: which candidate response is best, read as a set (order-invariant).

One question: ``setllm judge "instruction" --candidates "first" "second" [--json]``.
Many: ``setllm judge --input rows.jsonl --output verdicts.jsonl`` (rows
``{"id"?, "instruction", "input"?, "candidates": [...]}``; verdicts
``{"id", "best", "ranking", "scores"}`` in input order, indices into the row's candidates;
a rerun with the same ``--output`` skips the rows already judged).
"""

from __future__ import annotations

import argparse
import json

from ..errors import InputError
from ..loading.options import LoadOptions
from ..readouts import DEFAULT_READOUT, READOUTS
from .common import (
    add_command,
    add_file_job_flags,
    announce,
    check_fit,
    load_plan,
    load_setllm,
    plain_help,
    run_file_job,
)


def add_parser(sub, name: str = "judge"):
    p = add_command(sub, "judge", [LoadOptions], help="judge candidate responses as a set: no order or label bias",
                    description=plain_help(__doc__.split("\n\n")[1]))
    p.add_argument("instruction", nargs="?", help="the instruction the candidates respond to")
    p.add_argument("--candidates", nargs="+", metavar="TEXT", help="the candidate responses (at least two)")
    p.add_argument("--task-input", metavar="TEXT",
                   help='the instruction\'s input, if any (shown under it): the "input" field of --input rows and of POST /v1/judge, '
                        "Python's judge(..., input=); named --task-input here because --input is the rows file")
    p.add_argument("--tie-margin", type=float, default=0.0, metavar="X", help="best two scores within X nats are a tie (default: 0)")
    p.add_argument("--readout", choices=list(READOUTS),
                   help=f"how candidates are scored (setllm.readouts; docs/judging.md); default: the one the adapter "
                        f"was trained for (its setllm.json), else {DEFAULT_READOUT}")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_file_job_flags(p, "JSONL of rows to judge (see above); verdicts go to --output", "JSONL of verdicts, in input order")
    p.set_defaults(func=cmd_judge)
    return p


def cmd_judge(args: argparse.Namespace) -> int:
    if args.tie_margin < 0:
        raise InputError(f"--tie-margin must be >= 0, got {args.tie_margin}")
    if args.input or args.output:
        return _judge_file(args)
    if args.instruction is None or not args.candidates:
        raise InputError("pass INSTRUCTION and --candidates, or --input FILE.jsonl --output FILE.jsonl")
    from .. import verbs

    row = verbs.judge(args.instruction, args.candidates, args.task_input, verbs.flag)  # checked before the model loads
    candidates = list(row.candidates)
    lm = load_setllm(args, kind="judge")
    announce(lm, args, "judge", args.readout)
    v = lm.judge(row.instruction, candidates, input=row.input, tie_margin=args.tie_margin, readout=args.readout)
    if args.json:  # indices into the candidates, as --input, the server and Python give them
        print(json.dumps({"best": v.best, "ranking": v.ranking, "scores": v.scores, "variant": lm.variant.name, "model": lm.origin.model,
                          "adapter": lm.origin.adapter, "readout": args.readout or lm.judge_readout}, ensure_ascii=False))
    else:
        for i in v.ranking:
            print(f"{'*' if i == v.best else ' '} {v.scores[i]:10.4f}  {candidates[i]}")
        print(f"best: {candidates[v.best] if v.best is not None else '(tie)'}")
    return 0


def _judge_file(args: argparse.Namespace) -> int:
    readout = resolved_readout(args)  # the job's key: the readout it resolves to, not the raw flag

    def make_answer(lm, rows):
        def answer(batch):
            verdicts = lm.judge_many([(r["instruction"], r["candidates"], r["input"]) for r in batch], args.tie_margin, readout)
            return [{"id": r["id"], "best": v.best, "ranking": v.ranking, "scores": v.scores} for r, v in zip(batch, verdicts)]

        return answer

    def fit(lm, row):
        """A row that does not fit the model's context is named (never a silent cut), with the part to shorten."""
        from ..readouts import JudgeRow, get_readout

        asks = get_readout(readout).asks(JudgeRow(row["instruction"], tuple(row["candidates"]), row["input"]))
        check_fit(lm, row, asks, {"instruction": row["instruction"], "input": row["input"], "candidates": row["candidates"]})

    return run_file_job(args, _judge_row, make_answer, ("instruction", "candidates"), "judged", kind="judge",
                        settings={"readout": readout}, fit=fit)


def resolved_readout(args: argparse.Namespace) -> str:
    """The readout a judge run reads with, known before the model loads: ``--readout``, else
    the one its adapter (or model folder) records in ``setllm.json``, else the default; the
    same rule as :attr:`setllm.SetLLM.judge_readout`."""
    from ..readouts import trained_readout

    return args.readout or trained_readout(load_plan(args, "judge").record.info)


def _judge_row(obj: object, where: str) -> dict:
    from ..tasks.judge import parse_row

    # Judging needs no label (a row's label, if any, is for `setllm eval --dataset judge`).
    record = parse_row({**obj, "label": None} if isinstance(obj, dict) else obj, where, require_label=False)
    return {"instruction": record.question, "candidates": [c.strip() for c in record.choices], "input": record.context, "where": where}
