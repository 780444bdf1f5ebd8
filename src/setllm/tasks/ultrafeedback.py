"""UltraFeedback (Cui et al. 2023) as instruction data: instruction -> chosen response.

The paper's "Ultra" models are first instruction-tuned on it. Local rows (``../shared/data``)
are ``{"instruction", "response", "rejected"}``; the hub's binarized set has ``prompt`` and
``chosen`` (a chat list). The prompt is ``Question: <instruction>\\nAnswer:``: the cue the
benchmark template ends with, so both stages teach one prompt/answer format; it holds no set
but is still read bidirectionally under the Set-LLM mask.
"""

from __future__ import annotations

from ..data import DataError
from ..prompt import SetPrompt, template_prompt

NAME = "ultrafeedback"
HUB = ("HuggingFaceH4/ultrafeedback_binarized", "train_prefs")


def instruction_pair(obj: object, where: str) -> tuple[SetPrompt, str]:
    """``(prompt, response)`` of one row; a malformed row raises :class:`DataError`."""
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    instruction = obj.get("instruction", obj.get("prompt"))
    response = obj.get("response", obj.get("chosen"))
    if isinstance(response, list):  # the hub's chat form: [user, assistant]
        response = response[-1].get("content") if response and isinstance(response[-1], dict) else None
    if not isinstance(instruction, str) or not instruction.strip():
        raise DataError(f"{where}: missing or empty 'instruction'")
    if not isinstance(response, str) or not response.strip():
        raise DataError(f"{where}: missing or empty 'response' (the chosen answer)")
    # Strip: trailing spaces/newlines would tokenize differently on their own (see templates).
    return template_prompt([f"Question: {instruction.strip()}\nAnswer:"]), response.strip()


def hub_rows() -> list[dict]:
    try:
        import datasets
    except ImportError:
        raise DataError("loading from the hub needs `datasets` (pip install 'setllm[eval]'), or pass --data-dir") from None
    try:
        return list(datasets.load_dataset(HUB[0], split=HUB[1]))
    except Exception as e:  # network, missing split, ...: one clear line for the user
        raise DataError(f"could not load {HUB[0]} from the hub ({type(e).__name__}); pass --data-dir") from None
