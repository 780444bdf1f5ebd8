"""PIQA (Bisk et al. 2020): physical commonsense, a goal and two solutions."""

from .base import CONTINUATION, OPTION_SET, HubSource, MCTask, register


def normalise(row: dict) -> dict:
    return {"question": row["goal"], "choices": [row["sol1"], row["sol2"]], "label": row["label"]}


# PIQA's test labels were never released: the paper evaluates on validation.
TASK = register(MCTask("piqa", "PIQA", CONTINUATION, OPTION_SET, eval_split="validation", hub=HubSource("ybisk/piqa", None, normalise), position=0))
