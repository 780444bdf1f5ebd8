"""Library noise the user cannot act on, hidden while weights load or save."""

from __future__ import annotations

import functools
import sys
import warnings
from contextlib import contextmanager


def on_terminal() -> bool:
    """Whether progress bars belong on stderr: only on a terminal. In a log (stderr a file or
    a pipe) a bar's carriage returns join all its updates, and the lines printed after it,
    into one line."""
    return sys.stderr.isatty()


@contextmanager
def quiet_loading(progress: bool):
    """Hide library noise the user cannot act on while loading (or saving) weights: transformers'
    "Loading weights", "Writing model shards" and GGUF conversion bars (unless ``progress``; download bars stay,
    a download is long and happens once) and the
    ``is_gradient_checkpointing`` FutureWarning that PEFT triggers in transformers 5.x. The
    switches are put back afterwards."""
    from huggingface_hub import utils as hub_utils
    from transformers import modeling_gguf_pytorch_utils as gguf
    from transformers.utils import logging as hf_logging

    bars, hub_bars_off = hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()
    gguf_bar = gguf.tqdm  # the GGUF reader's own tqdm ("Converting and de-quantizing GGUF tensors"), not behind transformers' switch
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        if not progress:
            hf_logging.disable_progress_bar()  # switches the hub's bars off too: back on below
            if not hub_bars_off:
                hub_utils.enable_progress_bars()
            gguf.tqdm = functools.partial(gguf_bar, disable=True)
        try:
            yield
        finally:
            gguf.tqdm = gguf_bar
            if not progress and bars:
                hf_logging.enable_progress_bar()
            if not progress and hub_bars_off:
                hub_utils.disable_progress_bars()
