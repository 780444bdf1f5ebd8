"""One copy of a base model's weights under several LoRA adapters.

``SetLLM.from_pretrained(adapter=...)`` loads one adapter on its own copy of the model; a
second adapter would need a second copy (a 7B model in bf16: 14 GB each). An
:class:`AdapterBank` loads the base once and keeps every adapter beside it (PEFT's multiple
adapters); ``bank[name]`` is a :class:`setllm.SetLLM` view that switches the shared model to
its adapter before each forward, read as that adapter was trained (``setllm.json``). Requests
for different adapters never share a forward (the server splits a batch by adapter, as vLLM's
LoRA serving batches per adapter).

Every setllm surface reads an adapter unmerged, ``W x + B (A x)`` as it was trained, so a
view gives the bits of ``SetLLM.from_pretrained(adapter=...)``, ``setllm choose`` and the
lm-eval backend for the same adapter (merging, ``(W + B A) x``, is the same function in other
float rounding: up to 5.7e-5 per token for the shipped adapters, ``benchmarks/bench_adapters.py``;
``benchmarks/bench_merge.py`` measures what each reading costs). Within one bank the bits of a
request do not depend on what else it serves.

    bank = AdapterBank.from_pretrained(adapters={"choose": "auto", "judge": "auto", "mine": "runs/x"})
    bank["mine"].choose("Which is a fruit?", ["apple", "dog"])
    bank["none"].score(...)    # every adapter off, read as the bank reads (``--adapter none``)
    bank.base.score(...)       # the base model as it is: no adapter, read causally (``--variant causal-pe``)
    list(bank)                 # every name a view is indexed by: the adapters', then "none" and "base"
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from .api import SetLLM
from .errors import InputError
from .loading.adapters import apply_adapter, check_adapter
from .loading.model import load_as
from .loading.options import LoadOptions
from .loading.plan import LoadPlan, plan_load
from .loading.record import Record, read_record
from .loading.shipped import SHIPPED_ADAPTERS, default_adapter
from .loading.sources import DEFAULT_MODEL, embedded_or
from .reader import switched
from .sharing import model_lock

NONE = "none"  # the view with every adapter off, read under the bank's variant (as ``--adapter none``)
BASE = "base"  # the base model as it is: every adapter off, read causally (as ``--variant causal-pe`` everywhere)
BASE_VARIANT = "causal-pe"
_UNKNOWN = object()  # no switch made yet: the first one always runs


def shipped_adapters() -> dict[str, str]:
    """The embedded model's shipped adapters this install has, by kind (choose, judge, documents)."""
    return {kind: path for kind in SHIPPED_ADAPTERS if (path := default_adapter(kind)) is not None}


def resolve_adapters(adapters: Mapping[str, str], model: str | None) -> dict[str, str]:
    """Name -> adapter folder; ``"auto"`` under a shipped kind's name (choose, judge,
    documents) is that shipped adapter (the embedded model only)."""
    out = {}
    for name, path in adapters.items():
        if not name or name in (NONE, BASE) or "=" in name:
            raise InputError(f"adapter name {name!r}: a non-empty name without '=', other than {NONE!r} and {BASE!r}")
        if path == "auto":
            if embedded_or(model) is not None or name not in SHIPPED_ADAPTERS or default_adapter(name) is None:
                raise InputError(f"adapter {name}=auto: 'auto' names a shipped adapter of the embedded model "
                                 f"({', '.join(SHIPPED_ADAPTERS)}); give a folder")
            path = default_adapter(name)
        out[name] = str(path)
    return out


@dataclass
class AdapterBank(Mapping):
    """A PEFT-wrapped base model, its adapters by name, and how each is read.

    Build it with :meth:`from_pretrained` or :meth:`load`; index it by adapter name (or
    :data:`NONE`, :data:`BASE`) for a :class:`setllm.SetLLM` view. A read-only mapping:
    iterating gives every name it can be indexed by (``dict(bank)``: name -> view). Views are cheap and share everything;
    views used from several threads take turns (each computation holds the model's lock, :mod:`setllm.sharing`).
    """

    model: object
    tokenizer: object
    plan: LoadPlan  # the base model's (no adapter), under which every adapter is read
    records: dict[str, Record]  # each adapter's setllm.json, read once
    paths: dict[str, str]
    _active: object = field(default=_UNKNOWN, init=False)
    _views: dict[str, SetLLM] = field(default_factory=dict, init=False)

    @classmethod
    def from_pretrained(cls, model: str | None = None, adapters: Mapping[str, str] | None = None, **options) -> AdapterBank:
        """``adapters``: name -> PEFT adapter folder (or ``"auto"`` for a shipped kind);
        default: every adapter shipped with the embedded model. ``options``: the fields of
        :class:`setllm.LoadOptions` (``adapter`` excepted)."""
        return cls.load(LoadOptions(model, "none", **options), adapters)

    @classmethod
    def load(cls, options: LoadOptions, adapters: Mapping[str, str] | None = None) -> AdapterBank:
        """``options``' base model (its ``adapter`` left out) with ``adapters`` (as in :meth:`from_pretrained`)."""
        plan = plan_load(dataclasses.replace(options, adapter="none"))
        paths = resolve_adapters(adapters, plan.model) if adapters is not None else shipped_adapters()
        if not paths:
            raise InputError("an adapter bank needs at least one adapter")
        base_name = plan.model or DEFAULT_MODEL
        records = {n: read_record(p) for n, p in paths.items()}
        dirs = {n: check_adapter(p, base_name, options.allow_pickle, options.allow_base_mismatch, records[n].info) for n, p in paths.items()}
        net, tok = load_as(plan)
        for name, adir in dirs.items():
            net = apply_adapter(net, adir, base_name, merge=False, name=name)
        net.eval()
        return cls(net, tok, plan, records, {n: str(d) for n, d in dirs.items()})

    @property
    def names(self) -> list[str]:
        """The adapters' names (without :data:`NONE` and :data:`BASE`)."""
        return list(self.paths)

    def __iter__(self):
        return iter([*self.paths, NONE, BASE])

    def __len__(self) -> int:
        return len(self.paths) + 2

    def __contains__(self, name: object) -> bool:
        return name in self.paths or name in (NONE, BASE)

    def __getitem__(self, name: str) -> SetLLM:
        if name not in self:
            raise KeyError(f"no adapter {name!r} in this bank (it has: {', '.join(self)})")
        if name not in self._views:
            view = self._view(None if name in (NONE, BASE) else name)
            self._views[name] = view.with_variant(BASE_VARIANT) if name == BASE else view
        return self._views[name]

    @property
    def base(self) -> SetLLM:
        """The base model as it is: no adapter, read causally (what ``--variant causal-pe`` loads)."""
        return self[BASE]

    def _view(self, name: str | None) -> SetLLM:
        plan = self.plan if name is None else self.plan.for_adapter(self.paths[name], self.records[name])
        plan.say_cautions()
        return switched(SetLLM(self.model, self.tokenizer, **plan.read_as()), lambda: self.using(name))

    @contextmanager
    def using(self, name: str | None):
        """The shared model switched to adapter ``name`` (None: every adapter off) and held
        there until the block ends: a view on another thread waits (one adapter is active at
        a time, and a forward must not see a switch halfway)."""
        with model_lock(self.model):  # the lock every view of these weights takes (setllm.sharing)
            self._activate(name)
            yield self.model

    def _activate(self, name: str | None) -> None:
        if name == self._active:  # a switch walks every LoRA layer: only when it changes
            return
        lora = self.model.base_model
        if name is None:
            lora.disable_adapter_layers()
        else:
            lora.enable_adapter_layers()
            self.model.set_adapter(name, inference_mode=True)
        self._active = name
