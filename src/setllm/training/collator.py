"""Examples -> token features -> padded training batches, through the inference encoder.

One code path with inference: prompts and responses are encoded by the same
:class:`setllm.core.tokens.codec.Codec` (the same tokenizer calls, canonical element order for
invariant variants, BOS, chat frame, response + EOS); batches are built by
:func:`setllm.core.tokens.batch.collate` and the mask is rendered by :mod:`setllm.core.forward.runtime` in the loss.

Shapes: B examples, N tokens after padding, R response tokens (max over the batch).

Batches are padded on the LEFT: positions are explicit and padding is masked, so the side
does not change the model's output, but left padding puts every response at the end of its
row. The loss then needs logits for the last R + 1 columns only (``logits_to_keep``), not
for the whole prompt: the LM head (49k x 576 for SmolLM2) is a large share of the compute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..core.layout.masks import TokenLayout
from ..core.text.prompt import PromptError
from ..core.tokens.batch import collate
from ..core.tokens.codec import Codec
from ..core.tokens.encoding import EncodedPrompt
from ..errors import InputError
from .examples import Example

IGNORE = -100


@dataclass
class LengthReport:
    """How the over-long policy treated the examples."""

    kept: int = 0
    truncated: int = 0
    skipped: list[str] = field(default_factory=list)

    def line(self, max_length: int) -> str:
        return (f"{self.kept} examples kept, {self.truncated} with the response truncated to fit {max_length} tokens, "
                f"{len(self.skipped)} skipped as too long" + (f" (first: {self.skipped[0]})" if self.skipped else ""))


def featurize(codec: Codec, examples: Sequence[Example], max_length: int, overlong: str = "truncate",
              min_response_tokens: int = 8) -> tuple[list[dict], LengthReport]:
    """Token features for each example, applying the over-long policy.

    Policy: an example longer than ``max_length`` is dropped under ``skip``; under
    ``truncate`` its response is cut (it then has no EOS: it did not end there) unless that
    leaves fewer than ``min_response_tokens`` of it, in which case it is dropped too. The
    prompt is never cut: a cut set or question would teach the model a different task.
    """
    report = LengthReport()
    out = []
    for ex in examples:
        try:
            enc = codec.encode(ex.prompt)
        except PromptError as e:  # longer than the model's context
            report.skipped.append(f"{ex.where}: {e}")
            continue
        resp = codec.response_ids(ex.prompt, ex.response, eos=True)
        room = max_length - len(enc)
        if len(resp) > room:
            if overlong == "skip" or room < min(min_response_tokens, len(resp)):
                report.skipped.append(f"{ex.where}: {len(enc)} prompt + {len(resp)} response tokens > {max_length}")
                continue
            resp = resp[:room]
            report.truncated += 1
        out.append(feature(enc, resp))
        report.kept += 1
    return out, report


def featurize_preferences(codec: Codec, examples: Sequence[Example], max_length: int) -> tuple[list[dict], LengthReport]:
    """Token features for ``--objective preference``: one item per row, holding the better
    candidate's feature first, then each other candidate's (the same prompt each time). A
    row is kept only if every candidate fits ``max_length`` whole: the loss reads each
    candidate's log-likelihood, which a cut response would change."""
    check_rankable(examples)
    report = LengthReport()
    out = []
    for ex in examples:
        try:
            enc = codec.encode(ex.prompt)
        except PromptError as e:
            report.skipped.append(f"{ex.where}: {e}")
            continue
        responses = [codec.response_ids(ex.prompt, text, eos=True) for text in (ex.response, *ex.rejected)]
        longest = max(len(r) for r in responses)
        if len(enc) + longest > max_length:
            report.skipped.append(f"{ex.where}: {len(enc)} prompt + {longest} response tokens > {max_length}")
            continue
        group = [feature(enc, r) for r in responses]
        # input_ids: the longest row, for the Trainer's length-grouped sampler.
        out.append({"input_ids": max((g["input_ids"] for g in group), key=len), "group": group})
        report.kept += 1
    return out, report


def check_rankable(examples: Sequence[Example]) -> None:
    """``--objective preference`` needs rows with candidates: refuse the first with nothing to rank."""
    for ex in examples:
        if not ex.rejected:
            raise InputError(f"{ex.where}: --objective preference trains on rows with candidates to rank (a benchmark, "
                             "ultrafeedback-judge, or JSONL rows with 'instruction', 'candidates' and 'label'); this example has no "
                             "other candidate to rank below its response")


def feature(enc: EncodedPrompt, resp: Sequence[int]) -> dict:
    """One example as plain lists; ``input_ids`` holds prompt + response so that the
    Trainer's length-grouped sampler sees the full length."""
    return {"input_ids": enc.input_ids + list(resp), "prompt_len": len(enc), "set_ids": enc.set_ids, "element_ids": enc.element_ids}


def split_feature(f: dict) -> tuple[EncodedPrompt, list[int]]:
    n = f["prompt_len"]
    return EncodedPrompt(f["input_ids"][:n], f["set_ids"], f["element_ids"]), f["input_ids"][n:]


@dataclass
class SetCollator:
    """Trainer collator: features -> tensors (the Trainer moves only tensors between devices).

    The :class:`~setllm.core.layout.masks.TokenLayout` travels as its four tensors and is rebuilt in the
    loss; ``labels`` are the response tokens (-100 on prompt and padding).
    """

    positions: str
    pad_id: int

    def __call__(self, features: Sequence[dict]) -> dict[str, torch.Tensor]:
        prompts, responses = zip(*(split_feature(f) for f in features))
        batch = collate(prompts, self.positions, self.pad_id, responses=responses, padding_side="left")
        lay = batch.layout
        is_response = lay.valid & ~lay.is_prompt
        return {
            "input_ids": batch.input_ids,  # [B, N]
            "position_ids": batch.position_ids,  # [B, N]
            "valid": lay.valid,
            "is_prompt": lay.is_prompt,
            "set_ids": lay.set_ids,
            "element_ids": lay.element_ids,
            "labels": batch.input_ids.masked_fill(~is_response, IGNORE),  # [B, N]
        }


@dataclass
class PreferenceCollator:
    """Rows with candidates -> one batch of all their candidates' rows (each row's better candidate
    first) plus ``group`` (which row each belongs to, 0..G-1) and ``chosen`` (is it the better)."""

    positions: str
    pad_id: int

    def __call__(self, items: Sequence[dict]) -> dict[str, torch.Tensor]:
        rows = [f for item in items for f in item["group"]]
        batch = SetCollator(self.positions, self.pad_id)(rows)
        batch["group"] = torch.tensor([g for g, item in enumerate(items) for _ in item["group"]])
        batch["chosen"] = torch.tensor([j == 0 for item in items for j in range(len(item["group"]))])
        return batch


def layout_of(inputs: dict[str, torch.Tensor]) -> TokenLayout:
    return TokenLayout(inputs["valid"], inputs["is_prompt"], inputs["set_ids"], inputs["element_ids"], inputs["position_ids"])
