"""Resolve, then build: :func:`plan_load` turns :class:`setllm.LoadOptions` and a kind of task
into one immutable :class:`LoadPlan` (the model source, the adapter, what its ``setllm.json``
records, the reading and where it came from, the plan of ``answer``'s documents reading),
without torch and without loading a weight. Every loader builds from a plan
(:meth:`setllm.SetLLM.build`, :class:`setllm.AdapterBank`, the server, the CLI's checks and
``--dry-run``, resumed ``--output`` jobs), so the variant is decided here alone and each
``setllm.json`` is read once per load: by :func:`setllm.loading.record.read_record`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..errors import SetLLMWarning
from .adapters import Origin
from .options import LoadOptions, threads_from_env
from .record import METADATA_FILE, Reading, Record, read_record
from .shipped import chosen_adapter
from .sources import DEFAULT_MODEL, embedded_or

DOCUMENTS = "documents"  # the kind of task answer() reads, and the shipped adapter of that kind
# The files of an adapter folder that decide its answers (training logs and checkpoints do not).
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin", METADATA_FILE)
MODEL_FILES = ("*.json", "*.safetensors", "*.bin", "*.gguf", "*.model", "*.txt")  # config, weights, tokenizer
EDGE = 1 << 20  # bytes read at each end of a weights file


@dataclass(frozen=True)
class LoadPlan:
    """What a load will build, decided once (:func:`plan_load`).

    Attributes:
        options: the options planned (a copy: the plan never changes under its caller).
        kind: the kind of task whose shipped adapter ``adapter="auto"`` means.
        model: the model source (None: the embedded one).
        adapter: the adapter folder (None: none).
        record: its ``setllm.json`` (with no adapter, the model folder's), read once.
        reading: how prompts will be read, and where the variant came from.
        cautions: what the reading asks against the record, said when the model loads.
        documents: the plan of the reading ``answer`` uses where ``adapter="auto"`` picks
            another adapter for documents (None: this one answers).
    """

    options: LoadOptions
    kind: str
    model: str | None
    adapter: str | None
    record: Record
    reading: Reading
    cautions: tuple[str, ...] = ()
    documents: LoadPlan | None = None

    @property
    def origin(self) -> Origin:
        """Which model and adapter the build reads with (from the plan: no file is read)."""
        return Origin.loaded(self.model, self.adapter, self.record.info)

    def for_adapter(self, adapter: str, record: Record) -> LoadPlan:
        """This plan's options with ``adapter`` (its ``setllm.json`` as ``record``, read
        already): an :class:`setllm.AdapterBank`'s view of one of its adapters."""
        return LoadPlan(self.options, self.kind, self.model, adapter, record, *_reading(self.options, record))

    def read_as(self) -> dict:
        """The keyword arguments of :class:`setllm.SetLLM` for this plan: the reading, the
        checks and where it came from."""
        o = self.options
        return {**self.reading.as_dict(), "exact": o.exact, "batch_size": o.batch_size, "allow_untested": o.allow_untested,
                "threads": o.threads if o.threads is not None else threads_from_env(), "origin": self.origin}

    def say_cautions(self) -> None:
        """Warn, as the model loads, where the reading asked differs from the record."""
        for text in self.cautions:
            warnings.warn(text, SetLLMWarning, stacklevel=4)

    def answer_fingerprint(self) -> str:
        """A short hash of what decides an answer beyond its input: the base model (by name;
        a local one also by :func:`local_model_fingerprint` of its files), the adapter's
        files (weights and record), the variant and the reading choices as they will be
        read (a variant named or left to the adapter's record is the same). Needs no model,
        so a resumed ``--output`` is checked before one loads. Dtype, device, batch size,
        attention and ``exact`` are left out: they change floats, not which model answers.
        A method, not a field: it reads the weights files, which a load does not need."""
        model = self.model
        local = model is not None and Path(model).exists()
        if local:
            model = str(Path(model).resolve())
        h = hashlib.sha256(repr((model or "embedded", sorted(self.reading.as_dict().items()))).encode())
        if local:  # a folder or file retrained in place under the same path is another model
            h.update(local_model_fingerprint(Path(model)).encode())
        for name in ADAPTER_FILES if self.adapter else ():
            data = self.record.raw if name == METADATA_FILE else _bytes(Path(self.adapter) / name)
            if data is not None:
                h.update(name.encode() + data)
        return h.hexdigest()[:16]

    def describe(self) -> str:
        """The plan in a few lines (``--dry-run``)."""
        r = self.reading
        lines = [f"model: {self.model or DEFAULT_MODEL}", f"adapter: {self.adapter or 'none'}",
                 f"variant: {r.variant} (from {r.variant_from}); chat {'on' if r.chat else 'off'}; eos {'on' if r.eos else 'off'}",
                 f"dtype: {self.options.dtype}; device: {self.options.device or 'default'}; attention: {self.options.attn}"]
        if self.record.raw is not None:
            lines.append(f"record: {json.dumps(dataclasses.asdict(self.record.info))}")
        lines += [f"caution: {text}" for text in self.cautions]
        if self.documents is not None:
            d = self.documents
            lines.append(f"answer reads documents with: adapter {d.adapter or 'none'}, variant {d.reading.variant} (from {d.reading.variant_from})")
        return "\n".join(lines)


def plan_load(options: LoadOptions, kind: str = "choose") -> LoadPlan:
    """The plan of loading ``options`` for ``kind`` of task (the one place the adapter and the
    reading are decided); the documents reading's plan with it where ``adapter="auto"``
    means another adapter for documents."""
    options = dataclasses.replace(options)  # a copy, checked again: the plan never changes under its caller
    model = embedded_or(options.model)
    adapter = chosen_adapter(options.adapter, model, options.variant, kind)
    documents = chosen_adapter(options.adapter, model, options.variant, DOCUMENTS)
    record = read_record(adapter or model)
    plan = LoadPlan(options, kind, model, adapter, record, *_reading(options, record))
    if kind != DOCUMENTS and documents != adapter:
        plan = dataclasses.replace(plan, documents=plan_load(options, DOCUMENTS))
    return plan


def _reading(options: LoadOptions, record: Record) -> tuple[Reading, tuple[str, ...]]:
    return record.reading_for(options.variant, options.chat, options.eos)


def _bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


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
