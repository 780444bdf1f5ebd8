"""``setllm eval`` and ``setllm report``: the paper's multiple-choice evaluation protocol."""

from __future__ import annotations

import argparse
import sys

from ..loading.options import LoadOptions
from .common import add_command, config_from_args, load_plan, load_setllm, warn_if_untrained


def add_parser(sub, name: str):
    return _eval_parser(sub) if name == "eval" else _report_parser(sub)


def _eval_parser(sub):
    from ..evaluation.config import EvalConfig

    p = add_command(
        sub, "eval", [EvalConfig, LoadOptions], config_file=True,
        help="evaluate a model on a multiple-choice benchmark under option orderings",
        description="Score every question of a benchmark under the orderings of its options and report accuracy per mode "
                    "(single, random, adversarial, majority). Writes --out/summary.json and predictions.jsonl; "
                    "rerunning with the same --out resumes.")
    p.set_defaults(func=cmd_eval)
    return p


def _report_parser(sub):
    r = sub.add_parser(
        "report", help="paper-style table and figures from `setllm eval` run directories",
        description="Print the Rand./Adv. accuracy table (markdown) of the run directories, and save the majority-vote "
                    "figures (accuracy and agreement with Set-LLM by vote count) as PNG.")
    r.add_argument("dirs", nargs="+", metavar="DIR", help="run directories (each with summary.json)")
    r.add_argument("--plot-dir", metavar="DIR", help="where to save the PNG figures (default: the first DIR)")
    r.add_argument("--markdown", metavar="FILE", help="also write the tables to FILE")
    r.add_argument("--no-plots", action="store_true", help="print the tables only")
    r.set_defaults(func=cmd_report)
    return r


def cmd_eval(args: argparse.Namespace) -> int:
    from ..evaluation.config import EvalConfig
    from ..evaluation.runner import run_eval
    from ..tasks import get_task, load_records

    cfg = config_from_args(EvalConfig, args)
    # Read the data first: a bad record should not wait for the model to load.
    task = get_task(cfg.dataset)
    records, source = load_records(task, cfg.split, cfg.data_dir, cfg.data_file, cfg.limit, cfg.subset_seed, cfg.skip_bad)
    import torch

    from ..io.rundir import World

    world = World.start()  # under accelerate launch / torchrun: one rank of N, each on its own GPU
    args.device = world.device(args.device, torch.cuda.is_available())
    # Judging and documents have shipped adapters of their own; the benchmarks read with the choose one.
    kind = "choose" if task.kind == "mc" else task.kind
    if task.kind == "mc":  # templates are the multiple-choice tasks; said from the plan, before the model loads
        load_plan(args, kind).record.info.check_template(cfg.template)
    lm = load_setllm(args, progress=False, kind=kind)
    warn_if_untrained(lm, args)
    summary = run_eval(lm, cfg, records, meta={"model": lm.origin.model, "adapter": lm.origin.adapter, "source": source})
    if world.is_main:
        print(_result_line(summary))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..evaluation.report import (
        check_writable,
        load_run,
        markdown_table,
        save_plots,
        write_markdown,
    )

    plot_dir, plot_what = (Path(args.plot_dir), "--plot-dir") if args.plot_dir else (Path(args.dirs[0]), "plot folder (the first DIR)")
    # Outputs are checked before anything is read or printed: a bad path is one line, not a traceback after the table.
    if args.markdown:
        check_writable(Path(args.markdown), "--markdown", folder=False)
    if not args.no_plots:
        check_writable(plot_dir, plot_what)
    runs = [load_run(d) for d in args.dirs]
    table = markdown_table(runs)
    print(table)
    if args.markdown:
        write_markdown(args.markdown, table)  # makes the folder, adds the final newline
    if not args.no_plots:
        for path in save_plots(runs, plot_dir, plot_what):
            print(f"saved {path}", file=sys.stderr)
    return 0


def _result_line(s: dict) -> str:
    acc = ", ".join(f"{m} {v:.2f}%" for m, v in s["accuracy"].items())
    extra = f"; answer changes across orderings: {s['invariance_flips']}/{s['invariance_runs']}" if "invariance_flips" in s else ""
    if "position_consistency" in s:  # a judge: the swapped order and its position bias beside the data's order
        extra += (f"; swapped {s['accuracy_swapped']:.2f}%, position consistency {s['position_consistency']:.2f}%, "
                  f"first-slot rate {s['first_slot_rate']:.2f}%")
    template = f" ({s['template']})"
    if "accuracy_by_gold_position" in s:  # documents rows have no template: --template does not apply to them
        template = ""
        by = ", ".join(f"{k}: {v:.2f}%" for k, v in s["accuracy_by_gold_position"].items())
        extra += f"; by gold position: {by}; gap {s['gold_position_gap']:.2f}" + (" (one run per row)" if s["one_run_per_question"] else "")
        fm, u = s["failure_modes"]["mean"], s["unanswerable"]
        extra += (f"; gold answer in the text {s['answer_in_text']['random']:.2f}%; {fm['collapses']:g} answers given to 3+ questions, "
                  f"{fm['wrong_type']:g} of the wrong type, {fm['copied_document']:g} copied documents")
        if u["n"]:
            extra += f"; {u['n']} questions no document answers: {u['abstains'] + u['empty']} abstained, {u['from_a_document']} answered from a document"
    if "document_cache" in s:  # documents read once (sbp): what the cache spared, at its own computing rate
        c = s["document_cache"]
        disk = f" ({c['disk_hits']} from disk)" if "disk_hits" in c else ""
        extra += f"; documents cached: {c['hits']} pieces reused{disk}, {c['misses']} computed, about {c['saved_s_estimate']:.1f} s saved"
    return f"{s['dataset']} {s['split']} n={s['n']} {s['variant']}{template}: {acc}{extra}"
