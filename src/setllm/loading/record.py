"""What a trained model or adapter records in ``setllm.json`` (:class:`AdapterInfo`): what it
was trained as; the file as a load plan reads it, once (:func:`read_record`), and the reading
it decides (:meth:`Record.reading_for`). Plain data, no torch: the judge's readouts
(:mod:`setllm.readouts`) and the verbs read it without loading a model; :mod:`.adapters`
checks and loads the adapter itself."""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..core.layout.variants import DEFAULT_VARIANT, VARIANTS
from ..errors import ModelLoadError, SetLLMWarning

METADATA_FILE = "setllm.json"


# The judge readouts a setllm.json may record (setllm.readouts defines them, and checks that
# it defines exactly these: a record is read long before, and far below, the judge).
READOUT_NAMES = ("likelihood", "mean", "pmi", "verdict")


@dataclass(frozen=True)
class AdapterInfo:
    """What a trained model or adapter records in ``setllm.json``: what it was trained as.

    Attributes:
        base_model: the model the adapter was trained on.
        variant: the variant (mask + positions) it was trained under.
        template: the prompt template of its training data.
        chat: whether prompts were wrapped in the chat template.
        eos: whether responses ended with EOS (then options are scored as text + EOS).
        readout: the judge readout it was trained to be read with (``--objective preference``
            trains the ``mean`` readout); None: the default.
    """

    base_model: str | None = None
    variant: str | None = None
    template: str | None = None
    chat: bool = False
    eos: bool = True  # every setllm version trained with EOS; older files lack the key
    readout: str | None = None

    @classmethod
    def read(cls, adapter_dir: str | Path) -> AdapterInfo:
        """What ``adapter_dir``'s ``setllm.json`` records (nothing there: the defaults). A load
        reads it once, in its plan (:func:`read_record`)."""
        path = Path(adapter_dir) / METADATA_FILE
        return cls.parse(path.read_bytes(), path) if path.is_file() else cls()

    @classmethod
    def parse(cls, raw: bytes, path: Path) -> AdapterInfo:
        """The record in ``raw``, the bytes of ``path``; one line naming the file where it is not one."""
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
            info = cls(**{k: data[k] for k in ("base_model", "variant", "template", "chat", "eos", "readout") if k in data})
        except (ValueError, TypeError, UnicodeDecodeError) as e:
            raise ModelLoadError(f"{path}: not a valid setllm.json ({str(e).splitlines()[0]})") from None
        if info.variant is not None and info.variant not in VARIANTS:
            raise ModelLoadError(f"{path}: unknown variant {info.variant!r}")
        if info.readout is not None and info.readout not in READOUT_NAMES:
            raise ModelLoadError(f"{path}: unknown readout {info.readout!r} (known: {', '.join(READOUT_NAMES)})")
        return info

    def write(self, adapter_dir: str | Path, **extra) -> None:
        payload = {k: v for k, v in dataclasses.asdict(self).items() if not (k == "readout" and v is None)} | extra
        (Path(adapter_dir) / METADATA_FILE).write_text(json.dumps(payload, indent=2) + "\n")

    @property
    def answers_plain_prompts(self) -> bool:
        """Trained by setllm to generate answers after plain prompts (supervised, the chat
        template off): the template's roles and tokens are text it never read, and inside
        them it may answer nothing at all (the shipped documents adapter gives EOS first).
        setllm records a template for every adapter it trains and a readout for preference
        training alone (:func:`setllm.training.run.save`), which trains a scorer that keeps
        the base model's chat."""
        return self.template is not None and not self.chat and self.readout is None

    def check_template(self, asked: str) -> None:
        """Warn when prompts are read with another template than the training data's."""
        if self.template is not None and asked != self.template:
            warnings.warn(f"the model was trained with template={self.template}; reading it with template={asked} as asked",
                          SetLLMWarning, stacklevel=2)

    def reading(self, variant: str | None = None, chat: bool | None = None, eos: bool | None = None) -> dict:
        """How to read prompts for this model: what it was trained as, unless the caller
        asks otherwise (allowed, with a warning naming both)."""
        asked = {"variant": variant, "chat": chat, "eos": eos}
        recorded = {"variant": self.variant, "chat": self.chat if self.variant else None, "eos": self.eos if self.variant else None}
        for key, value in asked.items():
            if value is not None and recorded[key] is not None and value != recorded[key]:
                warnings.warn(f"the model was trained with {key}={recorded[key]}; reading it with {key}={value} as asked",
                              SetLLMWarning, stacklevel=3)
        out = {k: asked[k] if asked[k] is not None else recorded[k] for k in asked}
        return {"variant": out["variant"] or DEFAULT_VARIANT, "chat": bool(out["chat"]), "eos": True if out["eos"] is None else out["eos"]}


@dataclass(frozen=True)
class Reading:
    """How prompts will be read: the variant, chat and EOS choices, and where the variant
    came from (``asked``, ``setllm.json`` or ``default``)."""

    variant: str
    chat: bool
    eos: bool
    variant_from: str

    def as_dict(self) -> dict:
        return {"variant": self.variant, "chat": self.chat, "eos": self.eos}


@dataclass(frozen=True)
class Record:
    """An adapter's (or a fine-tuned model's) ``setllm.json`` as read once: what it records
    and its bytes (the fingerprint hashes them; None: no file)."""

    info: AdapterInfo = AdapterInfo()
    raw: bytes | None = dataclasses.field(default=None, repr=False)

    def reading_for(self, variant: str | None, chat: bool | None, eos: bool | None) -> tuple[Reading, tuple[str, ...]]:
        """The reading asked (None: what this record says) and the cautions where the two
        differ, kept to be said when the model loads (a plan itself warns of nothing)."""
        given = {k: v for k, v in (("chat", chat), ("eos", eos)) if v is not None}
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            read = self.info.reading(variant=variant, **given)
        came = "asked" if variant is not None else METADATA_FILE if self.info.variant else "default"
        return Reading(**read, variant_from=came), tuple(str(w.message) for w in said)


def read_record(source: str | None) -> Record:
    """``source``'s ``setllm.json``, read once: the adapter's, or with no adapter the model
    folder's (a full fine-tune writes it there); nothing for the embedded model alone."""
    path = Path(source) / METADATA_FILE if source else None
    if path is None or not path.is_file():
        return Record()
    raw = path.read_bytes()
    return Record(AdapterInfo.parse(raw, path), raw)
