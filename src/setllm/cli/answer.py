"""``setllm answer``: answer a question from documents read as one set (order-invariant).

One question: ``setllm answer --documents notes.txt "Lena leads billing." --question "Who leads billing?"``
(each FILE is one document, its whole text; any other argument is a document's text).
Many: ``setllm answer --input rows.jsonl --output answers.jsonl`` (rows ``{"id"?, "documents":
[...], "question"}``, as ``setllm eval --dataset documents`` reads them, ``answer`` and
``gold`` not needed; answers ``{"id", "answer"}`` in input order; a rerun with the same
``--output`` skips the rows already answered). With no ``--adapter`` the embedded model reads
with its shipped documents adapter, under ``sbp``: each document read once and reused, in any
order (``--cache-mb``, ``--cache-dir``); the last line on stderr says what the cache reused.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from ..core.doccache import CacheOptions, reuse_line
from ..errors import InputError
from ..loading.options import LoadOptions
from .common import add_command, add_file_job_flags, announce, config_from_args, load_setllm, plain_help, run_file_job

KIND = "documents"  # the shipped adapter `--adapter auto` reads documents with


def add_parser(sub, name: str = "answer"):
    p = add_command(sub, "answer", [LoadOptions, CacheOptions], help="answer a question from documents read as a set",
                    description=plain_help(__doc__.split("\n\n")[1]))
    p.add_argument("--documents", nargs="+", metavar="FILE|TEXT",
                   help="the documents, read as one set: a file is one document (its text), anything else is a document's text; "
                        "an argument that looks like a path (a folder, a separator, a file extension) but names no file is an error")
    p.add_argument("--text", action="store_true", help="read every --documents argument as text, never as a file")
    p.add_argument("--question", metavar="TEXT", help="the question the documents answer")
    p.add_argument("--max-new-tokens", type=int, default=32, metavar="N", help="the longest answer, in tokens (greedy, up to a newline)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_file_job_flags(p, 'JSONL of {"id"?, "documents": [...], "question"}; answers go to --output',
                       'JSONL of {"id", "answer", "row", "by"} in input order')
    p.set_defaults(func=cmd_answer)
    return p


def cmd_answer(args: argparse.Namespace) -> int:
    from .. import verbs

    if args.input or args.output:
        verbs.answer(["-"], "-", args.max_new_tokens, verbs.flag)  # the library's check of max_new_tokens, before the model loads
        return _answer_file(args)
    if not args.documents or args.question is None:
        raise InputError("pass --documents FILE|TEXT... and --question TEXT, or --input FILE.jsonl --output FILE.jsonl")
    documents = [_document(d, f"--documents[{i}]", args.text) for i, d in enumerate(args.documents)]
    request = verbs.answer(documents, args.question, args.max_new_tokens, verbs.flag)  # checked before the model loads
    cache_options = config_from_args(CacheOptions, args)
    lm = load_setllm(args, kind=KIND)
    announce(lm, args, KIND)
    cache = _cache(lm, cache_options)
    text = lm.answer(request.documents, request.question, request.max_new_tokens)
    if args.json:
        print(json.dumps({"answer": text, "variant": lm.variant.name, "model": lm.origin.model, "adapter": lm.origin.adapter},
                         ensure_ascii=False))
    else:
        print(text)
    if not text:
        print("setllm: the answer is empty (the first line generated was blank)", file=sys.stderr)
    _say_reuse(cache)
    return 0


def _cache(lm, options: CacheOptions):
    """The document cache as the flags say, where the reading can use one (else None)."""
    from ..core import doccache

    return options.attach(lm) if doccache.variant_problem(lm.variant) is None else None


def _say_reuse(cache) -> None:
    if cache is not None:
        print(reuse_line(cache.stats()), file=sys.stderr)


def _looks_like_path(arg: str) -> bool:
    """A single word with a separator or a file extension (``notes.txt``, ``docs/a``, ``~/x``):
    meant as a file, not as a document's text."""
    if "\n" in arg or len(arg) > 255 or re.search(r"\s", arg):
        return False
    return "/" in arg or os.sep in arg or arg.startswith("~") or re.search(r"\.[A-Za-z][A-Za-z0-9]{0,4}$", arg) is not None


def _document(arg: str, where: str, text: bool = False) -> str:
    """A file's text, or the argument itself (``text``: always); never empty. An argument that
    looks like a path but names no readable file is an error, not a document."""
    path = Path(arg).expanduser()
    from_file = not text and path.is_file()
    if not text and path.is_dir():
        raise InputError(f"{where}: {arg} is a folder; name its files (e.g. {arg.rstrip('/')}/*.txt), one document each")
    if from_file:
        from ..io.files import read_text

        arg = read_text(str(path), "document")
    elif not text and _looks_like_path(arg):
        raise InputError(f"{where}: no file {arg!r}; to read it as a document's text, pass --text")
    if not arg.strip():
        raise InputError(f"{where}: a document must be non-empty text" + (f" ({path} is empty)" if from_file else ""))
    return arg


def _answer_file(args: argparse.Namespace) -> int:
    from .. import verbs

    def request(row) -> verbs.Answer:
        return verbs.answer(row["documents"], row["question"], args.max_new_tokens)

    cache_options, used = config_from_args(CacheOptions, args), []

    def make_answer(lm, rows):
        used.append(_cache(lm, cache_options))

        def answer(batch):
            texts = lm.answer_many([(r["documents"], r["question"]) for r in batch], args.max_new_tokens)
            return [{"id": r["id"], "answer": t} for r, t in zip(batch, texts)]

        return answer

    def fit(lm, row):
        """A row whose prompt with the longest answer does not fit the model is named, with the part to shorten."""
        from ..core.text.prompt import PromptError, PromptTooLong
        from ..io.records import DataError
        from .common import longest_part

        try:
            asked = request(row)
            lm.generate_request(asked.prompt, asked.config, "answer")
        except PromptError as e:
            hint = f"; {longest_part(lm, {'documents': row['documents'], 'question': row['question']})}" if isinstance(e, PromptTooLong) else ""
            raise DataError(f"{row['where']} (id {row['id']!r}): {e}{hint}") from None

    code = run_file_job(args, _answer_row, make_answer, ("documents", "question"), "answered", kind=KIND,
                        positional=(), settings={"max_new_tokens": args.max_new_tokens}, fit=fit)
    _say_reuse(used[0] if used else None)
    return code


def _answer_row(obj: object, where: str) -> dict:
    from ..tasks.documents import parse_row

    # Answering needs no answer (a row's answer and gold, if any, are for `setllm eval --dataset documents`).
    if isinstance(obj, dict):
        obj = {**obj, "answer": "-", "gold": 0}
    record = parse_row(obj, where)
    return {"documents": list(record.documents), "question": record.question, "where": where}
