"""Does an adapter still write? The mean log-likelihood per token of UltraFeedback's chosen
responses (test split: rows no training mix holds) after their instructions, rendered as
``setllm train --data ultrafeedback`` renders them, under each model named: a generator's
measure for the adapter that also serves ``generate`` and the OpenAI routes.

    python research/response_likelihood.py --adapters none,src/setllm/adapters/smollm2-135m-setllm,DIR --n 60

Prints one line per model: mean over rows of the per-token log-likelihood (response + EOS),
± its standard error, and the mean paired difference to the first model named.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # report_io, shared with the speed scripts
from report_io import mean_se  # noqa: E402

from setllm import SetLLM  # noqa: E402
from setllm.io.records import iter_jsonl  # noqa: E402
from setllm.tasks.ultrafeedback import instruction_pair  # noqa: E402

MAX_TOKENS = 384  # prompt + response: the training runs' longest


def rows(data_dir: str, seed: int) -> list:
    """Every test pair (instruction prompt, chosen response), in a seeded order."""
    pairs = [instruction_pair(obj, where) for where, obj in iter_jsonl(Path(data_dir) / "ultrafeedback" / "test.jsonl")]
    random.Random(seed).shuffle(pairs)
    return pairs


def per_token(lm: SetLLM, pairs: list) -> list[float]:
    scores = lm.score_many([p for p, _ in pairs], [[r] for _, r in pairs])
    return [row[0].mean_logprob for row in scores]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapters", required=True, help="comma-separated: none, or adapter directories")
    ap.add_argument("--data-dir", default="../shared/data")
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    names = args.adapters.split(",")
    fits, first = None, None
    for name in names:
        lm = SetLLM.from_pretrained(adapter=name)
        if fits is None:  # the first model's tokenizer decides which rows fit; every model reads the same rows
            fits = [(p, r) for p, r in rows(args.data_dir, args.seed) if len(lm.encode(p)) + len(lm.response_ids(p, r)) <= MAX_TOKENS][: args.n]
        got = per_token(lm, fits)
        mean, se = mean_se(got)
        line = f"{name}: {mean:.4f} ± {se:.4f} per token over {len(got)} responses"
        if first is None:
            first = got
        else:
            dm, dse = mean_se([a - b for a, b in zip(got, first)])
            line += f"; minus {names[0]}: {dm:+.4f} ± {dse:.4f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
