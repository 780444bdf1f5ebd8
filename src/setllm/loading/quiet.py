"""Library noise the user cannot act on, hidden while weights load or save."""

from __future__ import annotations

import warnings
from contextlib import contextmanager


@contextmanager
def quiet_loading(progress: bool):
    """Hide library noise the user cannot act on while loading (or saving) weights: transformers'
    "Loading weights" and "Writing model shards" bars (unless ``progress``; download bars stay,
    a download is long and happens once) and the
    ``is_gradient_checkpointing`` FutureWarning that PEFT triggers in transformers 5.x. The
    switches are put back afterwards."""
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    bars, hub_bars_off = hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        if not progress:
            hf_logging.disable_progress_bar()  # switches the hub's bars off too: back on below
            if not hub_bars_off:
                hub_utils.enable_progress_bars()
        try:
            yield
        finally:
            if not progress and bars:
                hf_logging.enable_progress_bar()
            if not progress and hub_bars_off:
                hub_utils.disable_progress_bars()
