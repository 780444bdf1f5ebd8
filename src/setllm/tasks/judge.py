"""Judging candidates as a set: which of k responses to an instruction is best.

The prompt frames every candidate identically and names none of them (no "A"/"B", no
"Response 1"), so no name is tied to a position::

    Instruction: {instruction}
    Input: {input}                       (only when there is one)

    Responses:
    {Response: cand_1\\n, Response: cand_2\\n, ...}   (one set)
    Best response:

The readout is symmetric too: each candidate is scored as the continuation (its text + EOS)
of that same prompt, and the verdict is the highest score. Under an invariant variant the
prompt's encoding, and so every candidate's score, cannot depend on the order the candidates
come in; with ``causal-pe`` the same prompt gives the order-sensitive baseline judge.

Rows: ``{"id"?, "instruction", "input"?, "candidates": [str, ...], "label"?: int}``
(``label`` = index of the better candidate, -1 for a tie). UltraFeedback pairs
(``{"instruction", "response", "rejected"}``) become rows with the two responses in a seeded
random order, so that "the first one" is right half the time.
"""

from __future__ import annotations

import random

from ..core.text.prompt import Set, SetPrompt, template_prompt
from ..io.records import DataError, MCRecord
from .base import HubSource, MCTask, Ordering, Rendered, Template, register, shown

HEAD = "Instruction: {instruction}\n"
FRAME = "Response: {candidate}\n"
EMPTY_FRAME = "Response:\n"  # no space before the newline: a trailing space tokenizes apart
CUE = "Best response:"


def judge_prompt(instruction: str, candidates: list[str], input: str | None = None) -> SetPrompt:
    """The judge prompt; every candidate gets the same frame and no name. An empty
    candidate is a real answer (models do answer with nothing): its frame stands alone."""
    return template_prompt([judge_head(instruction, input) + "Responses:\n", Set([frame(c) for c in candidates]), CUE])


def judge_head(instruction: str, input: str | None = None) -> str:
    """The instruction (and input) the candidates answer, ending in a blank line."""
    return HEAD.format(instruction=instruction.strip()) + (f"Input: {input.strip()}\n" if input else "") + "\n"


def frame(candidate: str) -> str:
    text = candidate.strip()
    return FRAME.format(candidate=text) if text else EMPTY_FRAME


def _renderer(prompt):
    """A judge template's render: ``prompt(instruction, candidates, input)``, the candidates stripped as options."""
    def render(record: MCRecord, order: Ordering) -> Rendered:
        candidates = shown(record, order)
        return Rendered(prompt(record.question, candidates, record.context), [c.strip() for c in candidates])
    return render


def data_order_and_swapped(k: int) -> list[Ordering]:
    """A judge is tested in the data's order and reversed (for a pair: swapped)."""
    return [tuple(range(k)), tuple(reversed(range(k)))]


JUDGE = Template(_renderer(judge_prompt), shows_options=True, options_as_set=True, orderings=data_order_and_swapped)

# `--template held-out`: the same kind of prompt in words written apart from the trained one
# (no line or word of its frame in common) and in no training mix, to measure whether a judge
# adapter learned to judge or learned one prompt. Candidates stay unnamed, one frame each.
HELD_OUT_HEAD = "Request: {instruction}\n"
HELD_OUT_INPUT = "Details: {input}\n"
HELD_OUT_LEAD = "Here are some replies to it.\n"
HELD_OUT_FRAME = "- {candidate}\n"
HELD_OUT_EMPTY = "-\n"
HELD_OUT_CUE = "The most helpful reply is:"


def held_out_judge_prompt(instruction: str, candidates: list[str], input: str | None = None) -> SetPrompt:
    head = HELD_OUT_HEAD.format(instruction=instruction.strip()) + (HELD_OUT_INPUT.format(input=input.strip()) if input else "")
    frames = [HELD_OUT_FRAME.format(candidate=c.strip()) if c.strip() else HELD_OUT_EMPTY for c in candidates]
    return template_prompt([head + HELD_OUT_LEAD, Set(frames), HELD_OUT_CUE])


JUDGE_HELD_OUT = Template(_renderer(held_out_judge_prompt), shows_options=True, options_as_set=True, orderings=data_order_and_swapped)


def parse_row(obj: object, where: str, require_label: bool = True) -> MCRecord | None:
    """A judge row as a record (instruction -> question, input -> context, candidates ->
    choices); None for a tie (label -1), which has no better candidate to score."""
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for key in ("instruction", "candidates"):
        if key not in obj:
            raise DataError(f"{where}: missing field {key!r}")
    if not isinstance(obj["instruction"], str) or not obj["instruction"].strip():
        raise DataError(f"{where}: 'instruction' must be non-empty text")
    cands = obj["candidates"]
    if not isinstance(cands, list) or len(cands) < 2:
        raise DataError(f"{where}: 'candidates' must be a list of at least two responses")
    bad = [i for i, c in enumerate(cands) if not isinstance(c, str)]
    if bad:
        raise DataError(f"{where}: candidate {bad[0]} is not text (an empty response is \"\")")
    if obj.get("input") is not None and not isinstance(obj["input"], str):
        raise DataError(f"{where}: 'input' must be text")
    label = obj.get("label")
    if label is None and require_label:
        raise DataError(f"{where}: missing 'label' (index of the better candidate, -1 for a tie)")
    if label is not None and (isinstance(label, bool) or not isinstance(label, int) or not -1 <= label < len(cands)):
        raise DataError(f"{where}: 'label' must be -1 (tie) or an index into 'candidates' (0..{len(cands) - 1}), got {label!r}")
    if label == -1:
        return None
    return MCRecord(str(obj.get("id", where)), obj["instruction"], tuple(cands), label, obj.get("input") or None)


def pair_row(obj: object, where: str, seed: int = 0) -> dict | None:
    """An UltraFeedback pair as a judge row, the two responses in a seeded random order;
    None for a tie (equal scores), which says nothing about which is better."""
    if not isinstance(obj, dict) or not (isinstance(obj.get("instruction"), str) and obj["instruction"].strip()) \
            or not all(isinstance(obj.get(k), str) for k in ("response", "rejected")):
        raise DataError(f"{where}: expected a non-empty 'instruction' and text 'response' (chosen) and 'rejected'")
    if obj.get("score_chosen") is not None and obj.get("score_chosen") == obj.get("score_rejected"):
        return None
    rid = str(obj.get("id", where))
    chosen_first = random.Random(f"{seed}:{rid}").random() < 0.5
    cands = [obj["response"], obj["rejected"]] if chosen_first else [obj["rejected"], obj["response"]]
    return {"id": rid, "instruction": obj["instruction"], "candidates": cands, "label": 0 if chosen_first else 1}


def normalise_hub_pair(row: dict) -> dict:
    """``HuggingFaceH4/ultrafeedback_binarized`` rows (chat lists) as local pair rows."""
    last = lambda msgs: msgs[-1]["content"] if isinstance(msgs, list) and msgs else msgs  # noqa: E731
    return {"id": row.get("prompt_id"), "instruction": row["prompt"], "response": last(row["chosen"]), "rejected": last(row["rejected"]),
            "score_chosen": row.get("score_chosen"), "score_rejected": row.get("score_rejected")}


def _pair_record(obj: object, where: str) -> MCRecord | None:
    row = pair_row(obj, where)
    return None if row is None else parse_row(row, where)


# `--dataset judge --data-file F.jsonl`: a user's judge rows (ties skipped).
TASK = register(MCTask("judge", "Judge", JUDGE, JUDGE, eval_split="test", kind="judge", parse=parse_row, held_out=JUDGE_HELD_OUT,
                       position=11))
# `--dataset ultrafeedback-pairs`: the held-out UltraFeedback test pairs (ties dropped).
PAIRS = register(MCTask("ultrafeedback-pairs", "UltraFeedback", JUDGE, JUDGE, eval_split="test", kind="judge", folder="ultrafeedback",
               parse=_pair_record, held_out=JUDGE_HELD_OUT, hub=HubSource("HuggingFaceH4/ultrafeedback_binarized", None, normalise_hub_pair,
                                                 {"train": "train_prefs", "test": "test_prefs"}), position=10))
