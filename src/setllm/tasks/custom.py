"""A user's own JSONL of ``{"question", "choices", "label", "context"?}`` (``--data-file``):
the generic templates, no hub source."""

from .base import CONTINUATION, OPTION_SET, MCTask, register

TASK = register(MCTask("custom", "custom", CONTINUATION, OPTION_SET, eval_split="test"))
