"""A labelled task of our own (the sentiment of short reviews, three labels) answered two ways on
the embedded model, each under every order of the label list: the order-free choice
(``choice=``, the labels shown as a set) and free generation with the labels listed in the
prompt, its first label word taken as the answer. (Each question names the labels in one fixed
order, the same under every order of the list.) Prints accuracy and the position bias: how
often the answer is the label listed first (a third is no bias).

    python benchmarks/bench_structured_labels.py
"""

from __future__ import annotations

import itertools
import re

import setllm

LABELS = ("positive", "negative", "neutral")
REVIEWS = [
    ("The soup was cold and the waiter was rude.", "negative"), ("Wonderful food and friendly staff.", "positive"),
    ("I waited an hour and the bill was wrong.", "negative"), ("Best pizza I have had in years.", "positive"),
    ("The room was dirty and smelled bad.", "negative"), ("A lovely evening, we will come back.", "positive"),
    ("The shop opens at nine on weekdays.", "neutral"), ("The parcel arrived on Tuesday.", "neutral"),
    ("The menu lists three kinds of soup.", "neutral"), ("Terrible service, never again.", "negative"),
    ("The guide was funny and kind.", "positive"), ("The train leaves from platform two.", "neutral"),
]


def question(review: str) -> str:
    return f"Review: {review}\nIs the sentiment of this review positive, negative or neutral?"


def free_answer(lm, review: str, order) -> str | None:
    listed = "\n".join(order)
    text = lm.generate(f"{question(review)}\nLabels:\n{listed}\nSentiment:", max_new_tokens=6, stop=["\n"])
    found = re.search("|".join(LABELS), text.lower())
    return found.group(0) if found else None


def main() -> None:
    lm = setllm.SetLLM.from_pretrained()
    ways = {"order-free choice, labels shown as a set": lambda r, o: lm.generate(f"{question(r)}\nSentiment:", choice=list(o), show_schema=True),
            "order-free choice, labels not shown": lambda r, o: lm.generate(f"{question(r)}\nSentiment:", choice=list(o)),
            "free generation, parsed": lambda r, o: free_answer(lm, r, o)}
    for name, answer in ways.items():
        right = first = unparsed = total = 0
        for (review, gold), order in itertools.product(REVIEWS, itertools.permutations(LABELS)):
            got = answer(review, order)
            right += got == gold
            first += got == order[0]
            unparsed += got is None
            total += 1
        print(f"{name}: accuracy {right / total:.3f}, answer is the first label listed {first / total:.3f}, "
              f"unparsed {unparsed / total:.3f} ({total} answers: {len(REVIEWS)} reviews x 6 label orders)")


if __name__ == "__main__":
    main()
