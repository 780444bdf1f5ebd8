"""Multiple-choice benchmark records: reading local JSONL and the HF hub.

Local files follow ``<data-dir>/<benchmark>/<split>.jsonl`` with records
``{"id", "question", "context"?, "choices": [...], "label": int}`` (the format of
``../shared/data``). Where the hub is reachable, the same benchmarks load through
``datasets`` and are normalised to the same record.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError


class DataError(InputError):
    """A data file or record is malformed; the message names file and line."""


@dataclass(frozen=True)
class MCRecord:
    """One multiple-choice question. ``label`` is None where the split is unlabelled."""

    id: str
    question: str
    choices: tuple[str, ...]
    label: int | None
    context: str | None = None


@dataclass(frozen=True)
class BenchmarkSource:
    """Where a benchmark lives and which split the paper evaluates on."""

    name: str
    hub_path: str
    hub_config: str | None
    eval_split: str


BENCHMARKS: dict[str, BenchmarkSource] = {
    b.name: b
    for b in [
        BenchmarkSource("arc_challenge", "allenai/ai2_arc", "ARC-Challenge", "test"),
        # PIQA's and CSQA's test labels were never released: evaluate on validation.
        BenchmarkSource("piqa", "ybisk/piqa", None, "validation"),
        BenchmarkSource("commonsense_qa", "tau/commonsense_qa", None, "validation"),
        BenchmarkSource("social_iqa", "allenai/social_i_qa", None, "validation"),
    ]
}


def get_benchmark(name: str) -> BenchmarkSource:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise DataError(f"unknown benchmark {name!r}; choose one of: {', '.join(BENCHMARKS)}") from None


def parse_record(obj: object, where: str, require_label: bool = True) -> MCRecord:
    """Validate one JSON object as an :class:`MCRecord`; errors say ``where``."""
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for key in ("question", "choices"):
        if key not in obj:
            raise DataError(f"{where}: missing field {key!r}")
    choices = obj["choices"]
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) and c.strip() for c in choices):
        raise DataError(f"{where}: 'choices' must be a list of at least two non-empty strings")
    if not isinstance(obj["question"], str):
        raise DataError(f"{where}: 'question' must be a string")
    label = obj.get("label")
    if label is None and require_label:
        raise DataError(f"{where}: missing 'label' (an unlabelled split cannot be scored or trained on)")
    if label is not None and (not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < len(choices)):
        raise DataError(f"{where}: 'label' must be an integer index into 'choices' (0..{len(choices) - 1}), got {label!r}")
    context = obj.get("context")
    if context is not None and not isinstance(context, str):
        raise DataError(f"{where}: 'context' must be a string")
    return MCRecord(str(obj.get("id", where)), obj["question"], tuple(choices), label, context or None)


def iter_jsonl(path: str | Path, errors: str = "raise") -> Iterator[tuple[str, object]]:
    """Yield ``("file:line", parsed object)`` for each non-blank line.

    A malformed line raises :class:`DataError`, or with ``errors="yield"`` is yielded as
    that error so the caller can count and skip it.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as e:
                error = DataError(f"{where}: malformed JSON ({e.msg})")
                if errors != "yield":
                    raise error from None
                yield where, error


def read_mc_jsonl(path: str | Path, require_label: bool = True) -> list[MCRecord]:
    return [parse_record(obj, where, require_label) for where, obj in iter_jsonl(path)]


def subset(records: list, limit: int | None = None, seed: int | None = None) -> list:
    """The first ``limit`` records, or a seeded random sample of ``limit`` if ``seed`` is set."""
    if limit is None or limit >= len(records):
        return list(records)
    if seed is None:
        return list(records[:limit])
    picked = sorted(random.Random(seed).sample(range(len(records)), limit))
    return [records[i] for i in picked]


def load_benchmark(name: str, split: str | None = None, data_dir: str | Path | None = None,
                   limit: int | None = None, seed: int | None = None) -> list[MCRecord]:
    """Records of a benchmark split, from ``data_dir`` if given, else from the HF hub."""
    source = get_benchmark(name)
    split = split or source.eval_split
    if data_dir is not None:
        path = Path(data_dir) / name / f"{split}.jsonl"
        if not path.exists():
            have = sorted(p.stem for p in (Path(data_dir) / name).glob("*.jsonl"))
            raise DataError(f"{path}: no such file (splits here: {', '.join(have) or 'none'})")
        records = read_mc_jsonl(path)
    else:
        records = _from_hub(source, split)
    return subset(records, limit, seed)


def _from_hub(source: BenchmarkSource, split: str) -> list[MCRecord]:
    try:
        import datasets
    except ImportError:
        raise DataError("loading from the hub needs `datasets` (pip install 'setllm[eval]'), or pass --data-dir") from None
    try:
        ds = datasets.load_dataset(source.hub_path, source.hub_config, split=split)
    except Exception as e:  # network, missing split, ...: one clear line for the user
        raise DataError(f"could not load {source.hub_path} split {split!r} from the hub ({type(e).__name__}); pass --data-dir") from None
    return [_normalise_hub_row(source.name, row, i) for i, row in enumerate(ds)]


def _normalise_hub_row(name: str, row: dict, i: int) -> MCRecord:
    where = f"{name}[{i}]"
    if name == "arc_challenge":
        labels = row["choices"]["label"]
        obj = {"id": row["id"], "question": row["question"], "choices": row["choices"]["text"], "label": labels.index(row["answerKey"])}
    elif name == "piqa":
        obj = {"question": row["goal"], "choices": [row["sol1"], row["sol2"]], "label": row["label"]}
    elif name == "commonsense_qa":
        labels = row["choices"]["label"]
        key = row["answerKey"]
        obj = {"id": row["id"], "question": row["question"], "choices": row["choices"]["text"], "label": labels.index(key) if key else None}
    else:  # social_iqa: labels are the strings "1".."3"
        obj = {"context": row["context"], "question": row["question"], "choices": [row["answerA"], row["answerB"], row["answerC"]], "label": int(row["label"]) - 1}
    obj.setdefault("id", f"{name}-{i}")
    return parse_record(obj, where, require_label=False)
