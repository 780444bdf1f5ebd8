"""``setllm choose``, ``setllm generate`` and ``setllm demo``."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys

from ..errors import InputError
from ..loading.options import LoadOptions
from .common import (
    add_command,
    add_file_job_flags,
    announce,
    check_fit,
    config_from_args,
    load_plan,
    load_setllm,
    run_file_job,
)

DEMO_QUESTION = "Which city is the capital of France?"
DEMO_OPTIONS = ["Budapest", "Paris", "Zurich", "Rome"]


def add_parser(sub, name: str):
    return {"choose": _choose_parser, "generate": _generate_parser, "demo": _demo_parser}[name](sub)


def _choose_parser(sub):
    p = add_command(sub, "choose", [LoadOptions], help="answer a multiple-choice question, options as a set",
                    description="Score each option as the answer to QUESTION, with the options in the prompt as a set; "
                                "or answer many: --input rows.jsonl --output answers.jsonl.")
    p.add_argument("question", nargs="?", help="the question text")
    p.add_argument("--options", nargs="+", metavar="OPT", help="the candidate answers (at least two)")
    add_file_job_flags(p, 'JSONL of {"id"?, "question", "options": [...], "context"?}; answers go to --output',
                       'JSONL of {"id", "answer", "index", "scores", "row"} in input order')
    p.add_argument("--context", help="optional context shown before the question")
    p.add_argument("--normalize", action="store_true", help="pick by mean per-token log-likelihood instead of the sum")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_choose)
    return p


def _generate_parser(sub):
    from ..core.forward.generation import GenerationConfig

    p = add_command(sub, "generate", [GenerationConfig, LoadOptions], help="generate a response to a set prompt",
                    description="Generate text for a set prompt given as JSON (--prompt-file F.json) or inline markup (--prompt, or a non-.json file).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt-file", metavar="FILE", help='a JSON prompt {"prompt": ["text", {"set": ["a", "b"]}, ...]}, or a text file in markup')
    src.add_argument("--prompt", metavar="MARKUP", help=r"inline markup, e.g. 'Pick one:\n{{Paris\n||Rome\n}}Answer:'")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--schema", metavar="FILE", help="answer with JSON under this JSON schema (a .json file); its enums, consts and "
                                                        "booleans decided by scoring each value, order-free (docs/structured.md)")
    shape.add_argument("--regex", metavar="RE", help="answer with text matching this regular expression")
    shape.add_argument("--choice", nargs="+", metavar="TEXT", help="answer with one of these, decided by scoring each, order-free")
    shape.add_argument("--grammar", metavar="FILE", help="answer in this Lark grammar (llguidance's dialect)")
    p.add_argument("--show-schema", action="store_true", help="show the schema, regex, choices or grammar before the prompt (its lists as sets)")
    p.set_defaults(func=cmd_generate)
    return p


def _demo_parser(sub):
    p = add_command(sub, "demo", [LoadOptions], help="show the base model's order sensitivity next to Set-LLM's invariance",
                    description="Answer one question under every ordering of its options, with the base model (causal-pe) and Set-LLM.")
    p.add_argument("--question", default=DEMO_QUESTION, help="question to ask")
    p.add_argument("--options", nargs="+", default=DEMO_OPTIONS, metavar="OPT", help="its options (all orderings are tried)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    p.set_defaults(func=cmd_demo)
    return p


def cmd_choose(args: argparse.Namespace) -> int:
    from .. import verbs

    if args.input or args.output:
        return _choose_file(args)
    if args.question is None or args.options is None:
        raise InputError("pass QUESTION and --options, or --input FILE.jsonl --output FILE.jsonl")
    request = verbs.choose(args.question, args.options, args.context, verbs.flag)  # say so before spending seconds loading the model
    lm = load_setllm(args)
    announce(lm, args)
    choice = lm.choose(request.question, list(request.options), context=request.context, normalize=args.normalize)
    if args.json:
        print(json.dumps({
            "answer": choice.answer, "index": choice.index, "variant": lm.variant.name,
            "model": lm.origin.model, "adapter": lm.origin.adapter,
            "scores": {s.text: s.logprob for s in choice.scores},
            "mean_scores": {s.text: s.mean_logprob for s in choice.scores},
        }, ensure_ascii=False))
    else:
        for s in choice.scores:
            mark = "*" if s.text == choice.answer else " "
            print(f"{mark} {s.logprob:10.4f}  {s.text}")
        print(f"answer: {choice.answer}")
    return 0


def _choose_file(args: argparse.Namespace) -> int:
    def make_answer(lm, rows):
        def answer(batch):
            picks = lm.choose_many([(r["question"], r["options"], r["context"]) for r in batch], normalize=args.normalize)
            return [{"id": r["id"], "answer": c.answer, "index": c.index, "scores": [s.logprob for s in c.scores]} for r, c in zip(batch, picks)]

        return answer

    def fit(lm, row):
        from ..core.text.templates import mc_prompt

        asks = [(mc_prompt(row["question"], row["options"], row["context"]), row["options"])]
        check_fit(lm, row, asks, {"question": row["question"], "context": row["context"], "options": row["options"]})

    return run_file_job(args, _choose_row, make_answer, ("question", "options"), "answered", fit=fit)


def _choose_row(obj: object, where: str) -> dict:
    from ..io.records import DataError
    from ..policy import check_choices

    if isinstance(obj, dict) and "options" not in obj and "choices" in obj:  # eval --data-file's name for them: one row format
        obj = {**obj, "options": obj["choices"]}
    if not isinstance(obj, dict) or not isinstance(obj.get("question"), str) or "options" not in obj:
        raise DataError(f"{where}: expected {{\"question\": str, \"options\" (or \"choices\"): [str, ...], \"context\"?: str}}")
    context = obj.get("context")
    if context is not None and not isinstance(context, str):
        raise DataError(f"{where}: 'context' must be a string")
    try:
        options = check_choices(obj["options"], "options")
    except InputError as e:
        raise DataError(f"{where}: {e}") from None
    return {"question": obj["question"], "options": options, "context": context}


def read_prompt(args: argparse.Namespace):
    from ..core.text.prompt import from_json, parse_markup

    if args.prompt is not None:
        return parse_markup(args.prompt)
    from ..io.files import read_text

    text = read_text(args.prompt_file, "prompt file")
    return from_json(text) if args.prompt_file.endswith(".json") else parse_markup(text.rstrip("\n"))


def refuse_a_final_set(prompt, plan) -> None:
    """The codec's refusal of a prompt that ends with a set (:meth:`setllm.core.tokens.codec.Codec.prepare`),
    said before the model loads: it depends only on the reading the load will give. The answer
    would be read from inside whichever element comes last; chat mode's template adds text after."""
    from ..core.layout.variants import get_variant
    from ..core.tokens import codec

    codec.refuse_a_final_set(prompt, get_variant(plan.reading.variant), plan.reading.chat)


def cmd_generate(args: argparse.Namespace) -> int:
    from ..core.forward.generation import GenerationConfig

    prompt = read_prompt(args)  # parse first: a bad prompt should not wait for the model
    config = config_from_args(GenerationConfig, args)
    refuse_a_final_set(prompt, load_plan(args))
    shape = _constraint(args)
    lm = load_setllm(args)
    announce(lm, args)
    if shape is None:
        text = lm.generate(prompt, config)
    else:
        answer = lm.generate_structured(prompt, shape, config, show=args.show_schema)
        answer.value(shape)  # an answer the tokens cut short is an error of one line (give more --max-new-tokens)
        text = answer.text
    said = {"text": text, "variant": lm.variant.name, "model": lm.origin.model, "adapter": lm.origin.adapter}
    print(json.dumps(said, ensure_ascii=False) if args.json else text)
    return 0


def _constraint(args: argparse.Namespace):
    """The answer's constraint from ``--schema`` / ``--regex`` / ``--choice`` / ``--grammar``
    (checked and compiled before the model loads), or None."""
    from .. import structured
    from ..structured.plan import plan

    if args.schema is None and args.regex is None and args.choice is None and args.grammar is None:
        return None
    flag = next(f for f in ("schema", "grammar", "regex", "choice") if getattr(args, f) is not None)
    try:
        if args.schema is not None:
            shape = structured.spec(_read_json(args.schema, "--schema"))
        elif args.grammar is not None:
            shape = structured.spec(grammar=_read_text(args.grammar, "--grammar"))
        else:
            shape = structured.spec(regex=args.regex, choice=args.choice)
        plan(shape, True)  # a constraint the engine cannot compile is said now, not after the load
    except structured.SchemaError as e:
        raise InputError(f"--{flag}: {e}") from None
    return shape


def _read_text(path: str, flag: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise InputError(f"{flag} {path}: {e.strerror}") from None


def _read_json(path: str, flag: str):
    try:
        return json.loads(_read_text(path, flag))
    except json.JSONDecodeError as e:
        raise InputError(f"{flag} {path}: not JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None


MAX_DEMO_OPTIONS = 6  # 720 orderings, each run by both models


def cmd_demo(args: argparse.Namespace) -> int:
    from ..policy import check_choices

    options = check_choices(args.options, "--options")
    if len(options) > MAX_DEMO_OPTIONS:
        raise InputError(f"--options: the demo runs every ordering; {len(options)} options are {math.factorial(len(options))} orderings "
                         f"(at most {MAX_DEMO_OPTIONS} options)")
    args.options = options
    lm = load_setllm(args, progress=False)
    if not lm.variant.invariant:
        lm = lm.with_variant("setmask-setpe")
    announce(lm, args)
    base = _base_model(lm, args)
    orders = list(itertools.permutations(args.options))
    print(f"Q: {args.question}\n{len(orders)} orderings of {len(args.options)} options\n", file=sys.stderr)
    base_answers = _answers(base, args.question, orders, args.progress)
    set_answers = _answers(lm, args.question, orders, args.progress)
    set_variant = lm.variant
    width = max(len(", ".join(o)) for o in orders)
    print(f"{'ordering':<{width}}  {'base (causal-pe)':<18}  Set-LLM ({set_variant.name})")
    for o, a, b in zip(orders, base_answers, set_answers):
        print(f"{', '.join(o):<{width}}  {a:<18}  {b}")
    print()
    for name, answers in (("base model", base_answers), ("Set-LLM", set_answers)):
        top = max(set(answers), key=answers.count)
        n = len(set(answers))
        print(f"{name}: {n} distinct answer{'s' if n != 1 else ''}; differs from its most common answer ({top}) "
              f"in {sum(a != top for a in answers)} of {len(answers)} orderings")
    return 0


def _base_model(lm, args):
    """The base model is the model without any adapter, read causally."""
    if lm.origin.adapter is None:
        return lm.with_variant("causal-pe")
    import dataclasses

    from ..api import SetLLM

    base = dataclasses.replace(config_from_args(LoadOptions, args), adapter="none", variant="causal-pe", exact=None, chat=None, eos=None)
    return SetLLM.load(base)


def _answers(lm, question, orders, progress: bool = True) -> list[str]:
    from tqdm.auto import tqdm

    return [lm.choose(question, list(o)).answer for o in tqdm(orders, desc=lm.variant.name, leave=False, file=sys.stderr, disable=not progress)]
