"""The UltraFeedback test pairs that fit a CPU budget: those whose judge prompt plus the longer
response is at most --max-tokens tokens (SmolLM2 tokenizer), as judge rows (the two responses
in a seeded random order, ties dropped) for `setllm eval --dataset judge --data-file`.

Usage: python research/judge_short_pairs.py [--data ../shared/data/ultrafeedback/test.jsonl] [--max-tokens 512] --out F.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from transformers import AutoTokenizer

from setllm.io.records import iter_jsonl
from setllm.loading import embedded_model_dir
from setllm.tasks.judge import judge_prompt, pair_row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="../shared/data/ultrafeedback/test.jsonl")
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    tok = AutoTokenizer.from_pretrained(embedded_model_dir(progress=False))
    kept = total = 0
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for where, obj in iter_jsonl(args.data):
            row = pair_row(obj, where)
            total += 1
            if row is None:
                continue
            prompt = judge_prompt(row["instruction"], row["candidates"]).text()
            longest = max(len(tok.encode(c)) for c in row["candidates"])
            if len(tok.encode(prompt)) + longest + 1 <= args.max_tokens:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                kept += 1
    print(f"{kept} of {total} pairs fit {args.max_tokens} tokens -> {args.out}")


if __name__ == "__main__":
    main()
