"""Social IQa (Sap et al. 2019): a context, a question about it, three options.

Both templates keep the paper's instruction and context. The *original* one numbers the
options ``(0) .. (2)`` and scores the number, which ties each option to a position: it is
order-sensitive for every variant. The *modified* one drops the numbering and puts the
options in a set, scoring their text.
"""

from ..core.text.prompt import Set, template_prompt
from ..io.records import MCRecord
from .base import HubSource, MCTask, Ordering, Rendered, Template, register, shown

HEAD = "Question: Given the context, answer correctly the question.\nContext: {context}\nQuestion: {question}\n\nChoices:\n"


def numbered(record: MCRecord, order: Ordering) -> Rendered:
    lines = "".join(f"({i}) {c}\n" for i, c in enumerate(shown(record, order)))
    head = HEAD.format(context=record.context, question=record.question)
    return Rendered(template_prompt([head + lines + "Answer:"]), [f"({i})" for i in range(len(order))])


def as_set(record: MCRecord, order: Ordering) -> Rendered:
    # Each element ends with its own newline and "Answer:" follows the set (see mc_prompt).
    head = HEAD.format(context=record.context, question=record.question)
    options = shown(record, order)
    return Rendered(template_prompt([head, Set([f"{c}\n" for c in options]), "Answer:"]), options)


def normalise(row: dict) -> dict:
    # The hub's labels are the strings "1".."3".
    return {"context": row["context"], "question": row["question"], "choices": [row["answerA"], row["answerB"], row["answerC"]],
            "label": int(row["label"]) - 1}


TASK = register(MCTask("social_iqa", "SIQA", Template(numbered, True, False), Template(as_set, True, True), eval_split="validation",
              hub=HubSource("allenai/social_i_qa", None, normalise), needs_context=True, position=3))
