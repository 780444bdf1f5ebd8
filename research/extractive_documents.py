"""A candidate documents reading: the answer constrained to a span of the documents, every span
scored as an option is (its text + EOS as the response, the one scoring driver) and the best
written. Spans: runs of 1 to --max-words words of each document, trailing punctuation dropped.
Writes a run folder research/natural_table.py reads (summary.json, predictions.jsonl).

    python research/extractive_documents.py runs/natural/data/held-out-k8-s0.jsonl --adapter auto --out runs/natural/eval/extractive/held-out-k8-s0

The reading is order-free when the variant is (the options are scored as a set under it; in
exact mode sorted)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from setllm import SetLLM
from setllm.tasks import documents as docs
from setllm.tasks.base import load_records


def spans(documents, max_words: int) -> list[str]:
    """Every run of 1..max_words words of every document, once, in a fixed (sorted) order."""
    out = set()
    for d in documents:
        words = [w.strip(".,;:!?\"'()") for w in d.split()]
        for i in range(len(words)):
            for n in range(1, max_words + 1):
                if i + n <= len(words) and all(words[i : i + n]):
                    out.add(" ".join(words[i : i + n]))
    return sorted(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--adapter", default="auto")
    p.add_argument("--variant", default=None)
    p.add_argument("--max-words", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    lm = SetLLM.from_pretrained(adapter=args.adapter, variant=args.variant, kind="documents")
    records, _ = load_records(docs.TASK, data_file=str(args.data))
    args.out.mkdir(parents=True, exist_ok=True)
    rows, started = [], time.perf_counter()
    for r in records:
        options = spans(r.documents, args.max_words)
        scores = lm.score(docs.documents_prompt(list(r.documents), r.question), options)
        best = options[max(range(len(options)), key=lambda i: scores[i].logprob)]
        if r.answerable:
            rows.append({"id": r.id, "answer": r.answer, "generated": [best], "positions": ["*"],
                         "correct": [docs.normalise(best) == docs.normalise(r.answer)], "holds": [docs.holds_answer(best, r.answer)]})
        else:
            rows.append({"id": r.id, "answerable": False, "generated": [best], "said": docs.unanswered_kind(best, r.documents)})
    answered = [(r, row) for r, row in zip(records, rows) if r.answerable]
    acc = 100.0 * sum(row["correct"][0] for _, row in answered) / len(answered)
    said = [row["said"] for row in rows if row.get("answerable") is False]
    fm = docs.failure_modes([(r, row["generated"][0]) for r, row in answered])
    held = round(100.0 * sum(row["holds"][0] for _, row in answered) / len(answered), 4)  # one run per row: single = random
    summary = {"n": len(answered), "variant": lm.variant.name, "adapter": args.adapter, "one_run_per_question": lm.variant.invariant,
               "accuracy_by_gold_position": {"*": round(acc, 4)}, "gold_position_mean": round(acc, 4),
               "answer_in_text": {"single": held, "random": held},
               "failure_modes": {"by_gold_position": {"*": fm}, "mean": fm},
               "unanswerable": {"n": len(said), **{k: said.count(k) for k in ("empty", "abstains", "from_a_document", "other")}},
               "max_words": args.max_words, "wall_time_s": round(time.perf_counter() - started, 3),
               "command": shlex.join(["python", "research/extractive_documents.py", *sys.argv[1:]])}
    (args.out / "predictions.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"{args.data.name}: exact {acc:.1f}%, in text {summary['answer_in_text']['random']:.1f}%, {fm}, {summary['wall_time_s']} s")


if __name__ == "__main__":
    main()
