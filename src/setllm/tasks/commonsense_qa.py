"""CommonsenseQA (Talmor et al. 2019): five options per question."""

from .base import CONTINUATION, OPTION_SET, HubSource, MCTask, register


def normalise(row: dict) -> dict:
    labels, key = row["choices"]["label"], row["answerKey"]
    return {"id": row["id"], "question": row["question"], "choices": row["choices"]["text"], "label": labels.index(key) if key else None}


# The test labels were never released: the paper evaluates on validation.
TASK = register(MCTask("commonsense_qa", "CSQA", CONTINUATION, OPTION_SET, eval_split="validation",
              hub=HubSource("tau/commonsense_qa", None, normalise), position=2))
