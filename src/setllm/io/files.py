"""One reader for every file a user hands setllm (prompt files, JSONL data, config files):
a missing file, a directory, an empty file, a byte-order mark or bytes that are not UTF-8
each get one line naming the file and the line or byte, never a traceback."""

from __future__ import annotations

from pathlib import Path

from ..errors import DataError

BOM = b"\xef\xbb\xbf"


class FileError(DataError):
    """A user's file cannot be read as UTF-8 text; the message names it."""


def check_file(path: str | Path, what: str = "file") -> Path:
    """``path`` as a :class:`Path` if it is an existing regular file."""
    path = Path(path)
    if not path.is_file():
        raise FileError(f"{what} {path}: " + ("is a directory, not a file" if path.is_dir() else "no such file"))
    return path


def decode_line(raw: bytes, path: Path, lineno: int) -> str:
    """One line of a user's file as text (a BOM can only start line 1)."""
    if lineno == 1 and raw.startswith(BOM):
        raise FileError(f"{path}:1: starts with a byte-order mark (BOM); save the file as UTF-8 without BOM")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FileError(f"{path}:{lineno}: not UTF-8 text (byte {e.start}); save the file as UTF-8") from None


def read_text(path: str | Path, what: str = "file") -> str:
    """A whole user file as text; an empty (or all-blank) file is an error too."""
    path = check_file(path, what)
    lines = [decode_line(raw, path, i) for i, raw in enumerate(path.read_bytes().splitlines(keepends=True), 1)]
    text = "".join(lines)
    if not text.strip():
        raise FileError(f"{what} {path}: is empty")
    return text
