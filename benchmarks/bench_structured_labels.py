"""Labelled tasks of our own, in phrasings no training mix saw, answered two ways on the
embedded model, each under every rotation of the label list (each label listed first once):
the order-free choice (``choice=``, the labels shown as a set, or not shown) and free
generation with the labels listed in the prompt, its first label word taken as the answer.
(Each question names the labels in one fixed order, the same under every rotation.) Prints
accuracy, the position bias (how often the answer is the label listed first; 1/k is no bias)
and, beside them, the majority label's and the label-listed-first's accuracy.

``--task`` picks the task (sentiment: 3 labels; topic: 4), ``--seed`` the subset of its
items (``--items`` of them), ``--adapter none --variant causal-pe`` reads the base model itself.

    python benchmarks/bench_structured_labels.py --task sentiment --seed 0
    python benchmarks/bench_structured_labels.py --task topic --seed 1 --adapter none --variant causal-pe
"""

from __future__ import annotations

import argparse
import random
import re
from collections import Counter
from dataclasses import dataclass

import setllm


@dataclass(frozen=True)
class Task:
    labels: tuple[str, ...]
    items: tuple[tuple[str, str], ...]  # (text, gold label)
    ask: str  # the question, {text} and {labels} in it
    answer_word: str  # what the answer is called after the question

    def question(self, text: str) -> str:
        return self.ask.format(text=text, labels=", ".join(self.labels[:-1]) + " or " + self.labels[-1])


TASKS = {
    "sentiment": Task(("positive", "negative", "neutral"), (
        ("The soup was cold and the waiter was rude.", "negative"), ("Wonderful food and friendly staff.", "positive"),
        ("I waited an hour and the bill was wrong.", "negative"), ("Best pizza I have had in years.", "positive"),
        ("The room was dirty and smelled bad.", "negative"), ("A lovely evening, we will come back.", "positive"),
        ("The shop opens at nine on weekdays.", "neutral"), ("The parcel arrived on Tuesday.", "neutral"),
        ("The menu lists three kinds of soup.", "neutral"), ("Terrible service, never again.", "negative"),
        ("The guide was funny and kind.", "positive"), ("The train leaves from platform two.", "neutral"),
        ("My new phone broke after two days.", "negative"), ("The hotel has forty rooms.", "neutral"),
        ("What a delightful little bakery!", "positive"), ("The noise kept us awake all night.", "negative"),
    ), "Review: {text}\nIs the sentiment of this review {labels}?", "Sentiment"),
    "topic": Task(("sports", "politics", "science", "food"), (
        ("The striker scored twice in the final minutes.", "sports"), ("Parliament passed the new budget on Friday.", "politics"),
        ("Astronomers found water vapour on a distant planet.", "science"), ("Add the garlic once the onions are soft.", "food"),
        ("The coach was fired after five straight losses.", "sports"), ("The senator announced she will run for governor.", "politics"),
        ("A new vaccine cut infections by half in trials.", "science"), ("This bread needs to rise for two hours.", "food"),
        ("She won the marathon in record time.", "sports"), ("Voters rejected the tax plan in a referendum.", "politics"),
        ("The enzyme breaks down plastic in days.", "science"), ("Serve the soup hot with fresh herbs.", "food"),
        ("The tennis match went to a fifth set.", "sports"), ("The minister resigned over the scandal.", "politics"),
        ("Physicists measured the particle's mass again.", "science"), ("The curry is best the day after cooking.", "food"),
    ), "Headline: {text}\nWhich topic is this headline about: {labels}?", "Topic"),
}


def rotations(labels: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [labels[i:] + labels[:i] for i in range(len(labels))]


def free_answer(lm, task: Task, text: str, order) -> str | None:
    listed = "\n".join(order)
    out = lm.generate(f"{task.question(text)}\nLabels:\n{listed}\n{task.answer_word}:", max_new_tokens=6, stop=["\n"])
    found = re.search("|".join(task.labels), out.lower())
    return found.group(0) if found else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", choices=list(TASKS), default="sentiment")
    ap.add_argument("--seed", type=int, default=0, help="which subset of the task's items")
    ap.add_argument("--items", type=int, default=10, help="items in the subset")
    ap.add_argument("--adapter", default="auto")
    ap.add_argument("--variant", default=None)
    args = ap.parse_args()
    task = TASKS[args.task]
    items = random.Random(args.seed).sample(task.items, min(args.items, len(task.items)))
    lm = setllm.SetLLM.from_pretrained(adapter=args.adapter, variant=args.variant)
    prompt = lambda text: f"{task.question(text)}\n{task.answer_word}:"  # noqa: E731
    ways = {"order-free choice, labels shown as a set": lambda t, o: lm.generate(prompt(t), choice=list(o), show_schema=True),
            "order-free choice, labels not shown": lambda t, o: lm.generate(prompt(t), choice=list(o)),
            "free generation, parsed": lambda t, o: free_answer(lm, task, t, o)}
    orders = rotations(task.labels)
    total = len(items) * len(orders)
    print(f"task {args.task}, seed {args.seed}: {len(items)} items x {len(orders)} label orders; adapter {args.adapter}, "
          f"variant {lm.variant.name}")
    majority = Counter(gold for _, gold in items).most_common(1)[0][1] / len(items)
    print(f"baselines: majority label {majority:.3f}; the label listed first {1 / len(orders):.3f} on average")
    for name, answer in ways.items():
        right = first = unparsed = 0
        worst = 1.0
        for order in orders:
            got = [answer(text, order) for text, _ in items]
            hits = sum(g == gold for g, (_, gold) in zip(got, items))
            right, worst = right + hits, min(worst, hits / len(items))
            first += sum(g == order[0] for g in got)
            unparsed += sum(g is None for g in got)
        print(f"{name}: accuracy {right / total:.3f} (worst order {worst:.3f}), answer is the first label listed "
              f"{first / total:.3f}, unparsed {unparsed / total:.3f} ({total} answers)")


if __name__ == "__main__":
    main()
