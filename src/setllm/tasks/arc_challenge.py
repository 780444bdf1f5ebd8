"""ARC-Challenge (Clark et al. 2018): grade-school science questions, 3-5 options."""

from .base import CONTINUATION, OPTION_SET, HubSource, MCTask, register


def normalise(row: dict) -> dict:
    labels = row["choices"]["label"]  # "A".."D" or "1".."4"
    return {"id": row["id"], "question": row["question"], "choices": row["choices"]["text"], "label": labels.index(row["answerKey"])}


TASK = register(MCTask("arc_challenge", "ARC", CONTINUATION, OPTION_SET, eval_split="test",
              hub=HubSource("allenai/ai2_arc", "ARC-Challenge", normalise), position=1))
