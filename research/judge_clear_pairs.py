"""Clear judge pairs, better answer shorter or longer (a real-model test of the judge, tried first).

Six hand-written pairs whose better response is obvious to a reader: three where it is the
shorter one (a length rule picking the longer fails them) and three where it is the longer
one (a rule picking the shorter fails them). Each judge reads each pair in both orders;
prints, per judge and readout, which pairs it got right (`R`) or wrong (`.`) and whether the
two orders agreed.

Usage: python research/judge_clear_pairs.py [--judge NAME=ADAPTER:READOUT ...]
       (ADAPTER: auto = the shipped judge adapter, none, or a path; default: the shipped
       judge under likelihood and mean, and the model without an adapter under mean)
"""

from __future__ import annotations

import argparse

from setllm import SetLLM

PAIRS = [  # (instruction, better, worse)
    ("What is the capital of France?", "Paris.", "The capital of France is Rome, a large city in the north of the country."),
    ("How many legs does a spider have?", "Eight.", "A spider has six legs, like every other insect in the garden."),
    ("What is 2 + 3?", "5", "2 + 3 equals 7, because you add the two numbers together."),
    ("Name a fruit.", "An apple is a fruit that grows on trees.", "A rock."),
    ("Explain why the sky is blue.", "Sunlight is scattered by the air, and blue light is scattered more than red light, so the sky looks blue.",
     "Because."),
    ("Give a synonym of happy.", "Joyful is a synonym of happy.", "Sad."),
]
DEFAULT_JUDGES = ["shipped=auto:likelihood", "shipped=auto:mean", "untrained=none:mean"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--judge", action="append", metavar="NAME=ADAPTER:READOUT", help="a judge to read the pairs with (repeatable)")
    args = p.parse_args()
    print("| judge | readout | better shorter (3) | better longer (3) | right | same verdict in both orders |")
    print("|---|---|---|---|---|---|")
    loaded: dict[str, SetLLM] = {}
    for spec in args.judge or DEFAULT_JUDGES:
        name, _, rest = spec.partition("=")
        adapter, _, readout = rest.rpartition(":")
        if not (name and adapter and readout):
            p.error(f"--judge {spec!r}: give NAME=ADAPTER:READOUT")
        if adapter not in loaded:  # one load per adapter, however many readouts read it
            loaded[adapter] = SetLLM.from_pretrained(adapter=adapter, kind="judge")
        lm = loaded[adapter]
        marks, same = [], 0
        for instruction, better, worse in PAIRS:
            a = lm.judge(instruction, [better, worse], readout=readout).best
            b = lm.judge(instruction, [worse, better], readout=readout).best
            marks.append("R" if a == 0 else ".")
            same += (a == 0) == (b == 1)
        print(f"| {name} | {readout} | {''.join(marks[:3])} | {''.join(marks[3:])} | {marks.count('R')}/6 | {same}/6 |")


if __name__ == "__main__":
    main()
