"""Load ``(model, tokenizer)`` from any source (:mod:`.sources`), plus an adapter: never
remote code, never pickled weights unless asked, every failure one line."""

from __future__ import annotations

from pathlib import Path

import torch

from ..core.layout.variants import check_attention
from ..core.model.families import fit_attention
from ..errors import ModelLoadError
from .adapters import apply_adapter, base_key, check_adapter, recorded_base
from .checks import check_model_files
from .hub import hub_access, looks_local
from .options import apply_threads
from .plan import LoadPlan
from .quiet import quiet_loading
from .record import AdapterInfo
from .sources import DEFAULT_MODEL, PUBLIC_IDS, resolve


def load_model(
    model: str | None = None,
    adapter: str | None = None,
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = "sdpa",
    device: str | None = None,
    allow_pickle: bool = False,
    *,
    allow_base_mismatch: bool = False,
    progress: bool = False,
    merge: bool = False,
    record: AdapterInfo | None = None,
):
    """Load ``(model, tokenizer)``; ``adapter`` is a local PEFT adapter directory.

    The adapter stays unmerged (PEFT's LoRA layers, ``W x + B (A x)``): the function it was
    trained as, and the one computation of every surface, an :class:`setllm.AdapterBank`'s
    views included, so a request gets the same bits wherever it is read (merging gives
    other float rounding; ``merge=True`` folds it in, for comparisons:
    ``benchmarks/bench_merge.py`` measures both).

    ``allow_base_mismatch`` applies an adapter recorded as trained on another base model (with
    a warning) instead of refusing it. ``progress`` keeps transformers' progress bars (a
    "Loading weights" bar per load; off by default: noise for small models). ``record``: the
    adapter's ``setllm.json`` as a plan read it (None: read here).
    """
    check_attention(attn_implementation, "attn_implementation")  # before any download or load
    return _load(model, adapter, dtype, attn_implementation, device=device, allow_pickle=allow_pickle,
                 allow_base_mismatch=allow_base_mismatch, progress=progress, merge=merge, record=record)


def _load(model, adapter, dtype, attn_implementation, *, device, allow_pickle, allow_base_mismatch, progress=False, merge=False,
          record=None):
    """:func:`load_model` with its options checked (a plan's are, by :class:`setllm.LoadOptions`):
    every step of loading first, then the family's attention, the one step that needs the
    model (a load reads down the layers once: loading here, the model's core after)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adir = check_adapter(adapter, model or DEFAULT_MODEL, allow_pickle, allow_base_mismatch, record) if adapter is not None else None
    path = resolve(model)
    check_not_an_adapter(path)
    check_model_files(path)
    cache_only = hub_access(path, offline_fix(path))
    kwargs = dict(trust_remote_code=False, **({"local_files_only": True} if cache_only else {}))
    # transformers 5.x looks for a PEFT adapter in the repo without passing local_files_only on
    # (and so retries an unreachable hub for ~25 s): pass it there too.
    adapter_lookup = {"adapter_kwargs": {"local_files_only": True}} if cache_only else {}
    with quiet_loading(progress):
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
            net = AutoModelForCausalLM.from_pretrained(
                path, dtype=dtype, attn_implementation=None if attn_implementation == "sdpa" else attn_implementation,  # see fit_attention
                use_safetensors=None if allow_pickle else True,
                **kwargs, **adapter_lookup,
            )
        except (OSError, ValueError, safetensor_error()) as e:
            raise ModelLoadError(explain_load_error(path, e)) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if adir is not None:
        net = apply_adapter(net, adir, model or DEFAULT_MODEL, merge)
    if device:
        net = net.to(device)
    net.eval()
    fit_attention(net, attn_implementation)  # the family's own where it cannot run sdpa (gemma2: eager)
    return net, tokenizer


def build(cls: type, plan: LoadPlan, progress: bool = False):
    """``cls`` (:class:`setllm.SetLLM` or a subclass) on the model ``plan`` decided, read as it
    says: the cautions said, the weights loaded (:func:`load_as`), the class handed the
    reading and the plan of ``answer``'s documents reading. The one build of every loader
    that makes a model of its own; the class comes from above, so a load runs down the
    layers once."""
    plan.say_cautions()
    read = plan.read_as()
    net, tok = load_as(plan)
    return cls(net, tok, progress=progress, documents=plan.documents, **read)


def load_as(plan: LoadPlan, adapter: bool = True):
    """``(model, tokenizer)`` as a :class:`setllm.loading.plan.LoadPlan` says (threads, dtype,
    device, attention: ``auto`` is sdpa, switched to flex attention for long prompts), with
    its adapter on it, unmerged (``adapter=False``: none): the one way the library, the CLI
    and the server load."""
    from ..core.forward.runtime import use_auto_attention

    options = plan.options
    apply_threads(options.threads)  # before loading: loading and every forward run on them
    auto = options.attn == "auto"
    net, tok = _load(plan.model, plan.adapter if adapter else None, options.torch_dtype, "sdpa" if auto else options.attn,
                     device=options.device or default_device(), allow_pickle=options.allow_pickle,
                     allow_base_mismatch=options.allow_base_mismatch, record=plan.record.info)  # options checked; loading takes a second: no bar
    if auto:
        use_auto_attention(net)
    if options.cuda_graphs:
        from ..core.forward import graphs

        graphs.enable(net)  # refused where the model is not on CUDA
    return net, tok


def check_not_an_adapter(path: str) -> None:
    """Refuse a PEFT adapter folder given as the model (an exported adapter names its base for
    plain PEFT, which transformers would fetch from the hub): it is read as ``--adapter``."""
    folder = Path(path)
    if not (folder.is_dir() and (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file()):
        return
    base = recorded_base(folder)
    if base is None:
        with_base = "with its base model as --model"
    elif base_key(base) == DEFAULT_MODEL:
        with_base = "with no --model: it was trained on the embedded model, the default"
    else:
        with_base = f"with --model {base}, the base it was trained on (or a local copy of it)"
    raise ModelLoadError(f"model {path!r} is a PEFT adapter, not a model: pass it as --adapter {path} (Python: adapter=...) "
                         f"{with_base}")


def offline_fix(path: str) -> str:
    """The fix an error names where the hub cannot serve ``path``: a packaged model's public id
    (what an exported adapter names as its base, for plain PEFT) is setllm's own copy."""
    name = {hub_id: key for key, hub_id in PUBLIC_IDS.items()}.get(path)
    if name is None:
        return "pass a local path to a downloaded model instead"
    how = "leave out --model" if name == DEFAULT_MODEL else f"pass --model {name}"
    return f"it is the model setllm packages as {name} (quantized): {how} to read that copy without the hub, or pass a local path to a downloaded model"


def default_device() -> str | None:
    """Where a model goes when no device is named: the GPU where there is one (as
    ``--device``'s help says; a model left on the CPU beside an idle GPU is a silent slowdown),
    else where it loaded."""
    return "cuda" if torch.cuda.is_available() else None


def safetensor_error() -> type[Exception]:
    from safetensors import SafetensorError

    return SafetensorError


def explain_load_error(path: str, e: Exception) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if isinstance(e, safetensor_error()):
        return f"could not load model {path!r}: a weights file is not valid safetensors ({first})"
    if not Path(path).exists():
        if looks_local(path):
            return f"model {path!r} not found: no such directory"
        return f"model {path!r} not found: not a local directory, and the Hugging Face hub could not provide it ({first})"
    return f"could not load model {path!r}: {first}"
