"""Many rows from a JSONL file, answers to a JSONL file: checked first, batched, in input
order, resumable, and with nothing half-written (a line cut by a kill is dropped on resume).

Every answer row carries the ``id`` of its input row (the row's own ``id``, else its index),
``row``, a hash of the input row's content, ``by``, a hash of the model that answered
(:meth:`setllm.LoadOptions.answer_fingerprint`), and ``settings``, what else its answer depends on as the
run resolved it (a judge's readout: the one asked, else the one its adapter records, never
the raw flag). On a rerun an answer counts as done only where both ``id`` and ``row`` match an
input row: an output holding answers to other rows (another input file, an edited row) is
refused rather than handed back as if it answered these, and so are answers by another model
(another adapter, variant or reading), answers under other settings (named) and an output
that is the input file itself; ``overwrite`` starts over.

Used by ``setllm choose --input``, ``setllm judge --input`` and ``setllm answer --input`` (any command that maps rows to rows).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SetLLMWarning
from .records import DataError, iter_jsonl

Row = dict[str, Any]


def row_hash(obj: object) -> str:
    """A short hash of an input row's content (key order does not matter)."""
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass
class Rows:
    """The rows of an input file that parsed, and what was skipped (with ``skip_bad``)."""

    rows: list[Row]
    skipped: list[str] = field(default_factory=list)  # "file:line: message", in file order
    skipped_at: list[int] = field(default_factory=list)  # the index in the file of each skipped row

    def skip(self, rows: Sequence[Row], errors: Sequence[str]) -> None:
        """Count ``rows`` (parsed, found bad later, e.g. too long for the model) as skipped."""
        gone = {id(r) for r in rows}
        self.rows = [r for r in self.rows if id(r) not in gone]
        at = [*zip(self.skipped_at, self.skipped), *((r["index"], e) for r, e in zip(rows, errors))]
        at.sort(key=lambda pair: pair[0])
        self.skipped_at, self.skipped = [i for i, _ in at], [e for _, e in at]

    def warn(self, path: str | Path) -> None:
        """The one warning of a read with skipped rows: how many, and the first in file order."""
        if self.skipped:
            warnings.warn(f"--skip-bad: skipped {len(self.skipped)} bad row(s) of {path}; the first: {self.skipped[0]}", SetLLMWarning, stacklevel=3)


def read_rows(path: str | Path, parse: Callable[[object, str], Row], skip_bad: bool = False, warn: bool = True) -> Rows:
    """Every row parsed (``parse(obj, "file:line") -> row`` raises :class:`DataError`), with an
    ``id`` (default: the row's index) unique across the file, the hash ``row`` of its
    content, ``where`` (``file:line``) and ``index``.
    A bad row stops the read, or with ``skip_bad`` is skipped and counted (``warn``: with
    the one warning now; else the caller gives it, :meth:`Rows.warn`, once it has skipped
    what else it finds)."""
    rows, seen, skipped, skipped_at = [], {}, [], []
    for i, (where, obj) in enumerate(iter_jsonl(path, errors="yield")):
        try:
            if isinstance(obj, DataError):
                raise obj
            row = parse(obj, where)
            row["id"] = str(obj["id"]) if isinstance(obj, dict) and "id" in obj else str(i)
            if row["id"] in seen:
                raise DataError(f"{where}: duplicate id {row['id']!r} (first at {seen[row['id']]})")
        except DataError as e:
            if not skip_bad:
                raise
            skipped.append(str(e))
            skipped_at.append(i)
            continue
        row.update(row=row_hash(obj), where=where, index=i)
        seen[row["id"]] = where
        rows.append(row)
    read = Rows(rows, skipped, skipped_at)
    if warn:
        read.warn(path)
    if not rows:
        raise DataError(f"{path}: no rows" + (f" (all {len(skipped)} skipped as bad)" if skipped else ""))
    return read


def check_output(output: str | Path, input: str | Path) -> None:
    """Fail now, before a model loads, if ``output`` is the input file or cannot be written;
    a file or folder made to find out is removed again (nothing is written before the rows
    are known to fit the model)."""
    path = Path(output)
    if path.exists() and Path(input).exists() and os.path.samefile(path, input):
        raise DataError(f"--output {path} is the --input file; answers go to a file of their own")
    made = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.open("a").close()
    except OSError as e:
        raise DataError(f"--output {path}: cannot write it ({e.strerror})") from None
    finally:
        for p in made:  # the file first, then the folders made for it, innermost first
            try:
                p.unlink() if p == path else p.rmdir()
            except OSError:
                pass


def todo(rows: Sequence[Row], output: str | Path, overwrite: bool = False, by: str | None = None,
         settings: dict | None = None, verb: str = "answered") -> list[Row]:
    """The rows not yet answered in ``output`` (all of them with ``overwrite``, which empties
    it). An answer to a row that is not among ``rows``, (``by`` given) one by another model,
    or (``settings`` given) one under other settings is refused, naming its line (and the
    setting: "was judged under another readout")."""
    output = Path(output)
    if overwrite and output.exists():
        output.write_bytes(b"")
    wanted = {(r["id"], r["row"]) for r in rows}
    done = set()
    again = "use another --output, or --overwrite to start over"
    for lineno, key, answered_by, answered_under in _answered(output):
        if settings and not isinstance(answered_under, dict):  # an older setllm hashed them into the row
            raise DataError(f"--output {output}:{lineno} was {verb} by an older setllm that did not record its {', '.join(settings)}; {again}")
        if key not in wanted:
            raise DataError(f"--output {output}:{lineno} answers a row that is not in this --input (id {key[0]!r}, other content); {again}")
        if by is not None and answered_by != by:
            raise DataError(f"--output {output}:{lineno} was answered by another model (another model, adapter, variant or reading "
                            f"than this run's); {again}")
        for name, value in (settings or {}).items():
            if answered_under.get(name) != value:
                raise DataError(f"--output {output}:{lineno} was {verb} under another {name} ({answered_under.get(name)!r}; "
                                f"this run: {value!r}); {again}")
        done.add(key)
    return [r for r in rows if (r["id"], r["row"]) not in done]


def _answered(output: Path) -> list[tuple[int, tuple[str, str], str | None, object]]:
    """``(line, (id, row hash), by, settings)`` of each answer in ``output`` (``by`` and
    ``settings`` None where an older setllm did not record them); a trailing partial line (a
    kill) is cut off."""
    if not output.exists():
        return []
    data = output.read_bytes()
    if data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
        with output.open("r+b") as f:
            f.truncate(len(data))
    keys = []
    for lineno, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        try:
            obj = json.loads(line)
            keys.append((lineno, (str(obj["id"]), str(obj["row"])), obj.get("by"), obj.get("settings")))
        except (ValueError, KeyError, TypeError):
            raise DataError(f"--output {output}:{lineno}: not an answer row of setllm; use another --output, or --overwrite to start over") from None
    return keys


def run(rows: Sequence[Row], output: str | Path, answer: Callable[[list[Row]], list[Row]], batch_size: int, progress: bool = True,
        total: int | None = None, by: str | None = None, settings: dict | None = None) -> int:
    """Answer ``rows`` (those :func:`todo` left), ``batch_size`` at a time, appending each batch
    as it finishes; each answer gets its row's ``id`` and ``row`` (and ``by``, the model's
    identity, and ``settings``, when given). Returns how many were answered. ``total``: all
    rows of the input, for the progress bar."""
    from tqdm.auto import tqdm

    output = Path(output)
    total = len(rows) if total is None else total
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("a", encoding="utf-8") as out:
        try:
            fcntl.flock(out, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataError(f"--output {output}: another setllm process is writing it") from None
        with tqdm(total=total, initial=total - len(rows), unit="row", disable=not progress) as bar:
            for lo in range(0, len(rows), batch_size):
                batch = list(rows[lo : lo + batch_size])
                for row, result in zip(batch, answer(batch)):
                    stamp = {"row": row["row"]} | ({"by": by} if by is not None else {}) | ({"settings": settings} if settings else {})
                    out.write(json.dumps({"id": row["id"], **result, **stamp}, ensure_ascii=False) + "\n")
                out.flush()
                os.fsync(out.fileno())
                bar.update(len(batch))
    return len(rows)
