"""``setllm data``: generate document-set data, seeded, with no download
(:mod:`setllm.tasks.documents`).

``setllm data kv-retrieval --pairs 20 --n 500 --seed 1 --out kv.jsonl``: Liu et al.'s
key-value retrieval. ``setllm data kv-phrased --phrasings held-out --docs 8 --out kv.jsonl``:
key-value facts in many phrasings (train ones, or held-out ones no training mix holds).
``setllm data worlds --family held-out --docs 8 --n 40 --out natural.jsonl``: natural sentences about
fictional companies, towns and people, several questions a set, one that no document answers.
``setllm data qa-lookup --source commonsense_qa --docs 10 --out qa.jsonl``: natural-language
statements from a benchmark. ``setllm data mc-framed --task piqa --n 2400 --out piqa.jsonl``: a benchmark's questions as training
rows in several frames (:mod:`setllm.generators.frames`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from .common import RawHelpFormatter, add_command, config_from_args, plain_help


def add_parser(sub, name: str = "data"):
    from ..generators.documents import KVRetrievalConfig, QALookupConfig
    from ..generators.frames import MCFramedConfig
    from ..generators.phrasings import KVPhrasedConfig
    from ..generators.worlds import WorldsConfig

    p = sub.add_parser(name, help="generate document-set data (key-value retrieval, benchmark lookups)",
                       description=_examples(__doc__.split("\n\n")[1]), formatter_class=RawHelpFormatter)
    gens = p.add_subparsers(dest="generator", required=True, metavar="GENERATOR")
    kv = add_command(gens, "kv-retrieval", [KVRetrievalConfig], help="k random UUID-like key-value pairs as documents; ask one key",
                     description="Liu et al. (2023)'s synthetic key-value retrieval: each row's documents are K pairs "
                                 '"key": "value" of random hex strings, the question names one key, the answer is its value.')
    kv.set_defaults(func=cmd_kv)
    ph = add_command(gens, "kv-phrased", [KVPhrasedConfig], help="key-value facts in many phrasings (train or held-out ones)",
                     description="Key-value facts as documents, each row in one phrasing (e.g. 'The code for X is Y.'), "
                                 "keys and values of several kinds; --phrasings held-out draws from phrasings no training mix holds.")
    ph.set_defaults(func=cmd_phrased)
    wo = add_command(gens, "worlds", [WorldsConfig], help="natural sentences about fictional companies, towns, people (train or held-out words)",
                     description="Natural-language documents: facts about fictional companies, towns, people, products and clubs, one "
                                 "fact a document, several questions per set in other words than the facts, one that no document answers.")
    wo.set_defaults(func=cmd_worlds)
    qa = add_command(gens, "qa-lookup", [QALookupConfig], help="a benchmark's questions and answers as statements; ask one",
                     description="Natural-language documents: each labelled question of a benchmark, with its answer, as a "
                                 "statement among K-1 statements of other questions; the question is asked again.")
    qa.set_defaults(func=cmd_qa)
    mc = add_command(gens, "mc-framed", [MCFramedConfig], help="a benchmark's questions as training rows in several frames",
                     description="Multiple-choice training rows (prompt, response) in one of several frames each, the paper's "
                                 "template among them, the options as a set; never the held-out template.")
    mc.set_defaults(func=cmd_framed)
    return p


def _examples(text: str) -> str:
    """The module docstring's examples (````command````: what it writes) as help: each
    command on a line of its own, what it writes under it, no reST markup."""
    pairs = re.findall(r"``(.+?)``:\s+(.+?)(?=\s*``|$)", text, re.S)
    return "\n".join(f"{plain_help(cmd)}\n    {plain_help(what)}" for cmd, what in pairs) or plain_help(text)


def cmd_kv(args: argparse.Namespace) -> int:
    from ..generators.documents import KVRetrievalConfig, kv_retrieval

    c = config_from_args(KVRetrievalConfig, args)
    return _write(kv_retrieval(c.pairs, c.n, c.seed, c.key_length, c.value_length), c.out, args.generator)


def cmd_phrased(args: argparse.Namespace) -> int:
    from ..generators.phrasings import KVPhrasedConfig, kv_phrased

    c = config_from_args(KVPhrasedConfig, args)
    return _write(kv_phrased(c.phrasings, c.docs, c.n, c.seed), c.out, args.generator)


def cmd_worlds(args: argparse.Namespace) -> int:
    from ..generators.worlds import WorldsConfig, worlds

    c = config_from_args(WorldsConfig, args)
    return _write(worlds(c.family, c.docs, c.n, c.seed, c.questions, c.unanswerable), c.out, args.generator)


def cmd_qa(args: argparse.Namespace) -> int:
    from ..generators.documents import QALookupConfig, qa_lookup
    from ..tasks import get_task, load_records

    c = config_from_args(QALookupConfig, args)
    records, _ = load_records(get_task(c.source), c.split, c.data_dir)
    return _write(qa_lookup(records, c.docs, c.n, c.seed), c.out, args.generator)


def cmd_framed(args: argparse.Namespace) -> int:
    from ..generators.frames import MCFramedConfig, mc_framed
    from ..io.records import DataError
    from ..tasks import TASKS, load_records

    c = config_from_args(MCFramedConfig, args)
    if c.task not in TASKS:
        raise DataError(f"--task: one of the multiple-choice benchmarks ({', '.join(TASKS)}), got {c.task!r}")
    records, _ = load_records(TASKS[c.task], c.split, c.data_dir)
    return _write(mc_framed(TASKS[c.task], records, c.n or None, c.seed), c.out, args.generator)


def _write(rows: list[dict], out: str, what: str) -> int:
    """Write ``rows`` to ``out`` and say so in one line: how many rows of what, where."""
    from ..errors import InputError

    path = Path(out)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    except OSError as e:
        raise InputError(f"--out {out}: cannot write it ({e.strerror})") from None
    print(f"wrote {len(rows)} {what} rows to {out}", file=sys.stderr)
    return 0
