"""The document cache's disk tier: each piece's keys and values in a folder, one safetensors
file a piece, found again by the key the memory cache uses (weights, adapter, variant, prefix
tokens, element tokens), so a restarted process, or another one sharing the folder, reads a
document it has read before from disk instead of computing it.

- A file is named by a hash of its key and holds the whole key in its metadata: a file whose
  key, format or tensors are not what the key says (foreign: another model's, another
  version's; damaged; truncated) is refused with one warning and the piece computed again,
  never read.
- A file is written to a temporary name in the folder, then renamed (:func:`os.replace`, atomic
  on one file system): a process sharing the folder sees the whole file or none.
- The folder is bounded by bytes (the files' sizes on disk), least recently used out (a file
  found is touched, so a restart's scan knows the order). The bound holds for what this
  process writes and reads; files another process writes count once this one reads them.

Shapes: as :mod:`setllm.core.doccache` (``(k [1, Hkv, n, d], v)`` per layer).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import uuid
import warnings
from collections import OrderedDict
from pathlib import Path

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save_file

from ..errors import SetLLMWarning

FORMAT = "setllm-document-piece/1"
SUFFIX = ".safetensors"
Layers = list[tuple[torch.Tensor, torch.Tensor]]


class DiskTier:
    """Pieces on disk under ``directory``, at most ``max_bytes`` of files. Safe to share
    between threads, and the folder between processes."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int):
        self.directory = Path(directory).expanduser()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._files: OrderedDict[str, int] = OrderedDict()  # name -> bytes, least recently used first
        self.hits = self.writes = self.refused = self.evictions = self.bytes = 0
        found = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            found.append((st.st_mtime, path.name, st.st_size))
        for _, name, size in sorted(found):
            self._files[name] = size
            self.bytes += size
        with self._lock:
            self._evict()

    def get(self, key: tuple) -> Layers | None:
        """The piece under ``key``, or None where there is none or its file is refused."""
        name = file_name(key)
        path = self.directory / name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            with self._lock:
                self._forget(name)
            return None
        why, layers = _parse(data, key)
        with self._lock:
            if why is not None:
                self.refused += 1
                self._forget(name)
            else:
                self.hits += 1
                if name not in self._files:
                    self.bytes += len(data)
                self._files[name] = len(data)
                self._files.move_to_end(name)
                self._evict()
        if why is not None:
            warnings.warn(f"document cache: refused {path} ({why}); the document is computed again", SetLLMWarning, stacklevel=2)
            return None
        try:
            os.utime(path)  # most recently used: a restart's scan orders by this
        except OSError:
            pass
        return layers

    def put(self, key: tuple, layers: Layers) -> None:
        """Write ``layers`` under ``key`` once (a piece larger than the bound is not written)."""
        name = file_name(key)
        with self._lock:
            if name in self._files:
                return
        tensors = {f"{kind}{i}": t.detach().contiguous().cpu() for i, pair in enumerate(layers) for kind, t in zip("kv", pair)}
        path = self.directory / name
        temp = self.directory / f".{name}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
        try:
            save_file(tensors, str(temp), metadata={"format": FORMAT, "key": key_text(key), "layers": str(len(layers))})
            size = temp.stat().st_size
            if size > self.max_bytes:
                temp.unlink()
                return
            os.replace(temp, path)  # atomic: readers see the whole file or none
        except OSError as e:
            temp.unlink(missing_ok=True)
            warnings.warn(f"document cache: could not write {path} ({e}); the piece is kept in memory only", SetLLMWarning, stacklevel=2)
            return
        with self._lock:
            self.writes += 1
            self._forget(name)
            self._files[name] = size
            self.bytes += size
            self._evict()

    def clear(self) -> None:
        """Remove every piece file this tier knows of."""
        with self._lock:
            for name in list(self._files):
                (self.directory / name).unlink(missing_ok=True)
            self._files.clear()
            self.bytes = 0

    @property
    def entries(self) -> int:
        return len(self._files)

    def _forget(self, name: str) -> None:
        size = self._files.pop(name, None)
        if size is not None:
            self.bytes -= size

    def _evict(self) -> None:
        while self.bytes > self.max_bytes and self._files:
            name, size = self._files.popitem(last=False)
            self.bytes -= size
            self.evictions += 1
            (self.directory / name).unlink(missing_ok=True)


def key_text(key: tuple) -> str:
    """``key`` as text (strings, None and tuples of token ids: the same text in any process)."""
    return json.dumps(key, separators=(",", ":"))


def file_name(key: tuple) -> str:
    return hashlib.sha256(key_text(key).encode()).hexdigest()[:40] + SUFFIX


def _parse(data: bytes, key: tuple) -> tuple[str | None, Layers | None]:
    """``(why the file is refused, None)`` or ``(None, its layers)``."""
    if len(data) < 8:
        return "truncated: no header", None
    n = int.from_bytes(data[:8], "little")
    if n > len(data) - 8:
        return "truncated: shorter than its header says", None
    try:
        header = json.loads(data[8 : 8 + n])
        meta = header.get("__metadata__") or {}
        end = 8 + n + max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    except (ValueError, UnicodeDecodeError, AttributeError, KeyError, TypeError, IndexError):
        return "damaged: its header is not a safetensors header", None
    if len(data) < end:
        return "truncated: shorter than its header says", None
    if meta.get("format") != FORMAT:
        return f"foreign: format {meta.get('format')!r}, not {FORMAT!r}", None
    if meta.get("key") != key_text(key):
        return "foreign: written for another model, adapter, variant or text", None
    try:
        tensors = load_tensors(data)
        layers = [(tensors[f"k{i}"], tensors[f"v{i}"]) for i in range(int(meta["layers"]))]
    except Exception as e:  # safetensors says what is wrong in its own exception types
        return f"damaged: {type(e).__name__}: {e}", None
    n_tokens = len(key[-1])
    if len(tensors) != 2 * len(layers) or any(t.dim() != 4 or t.shape[2] != n_tokens for pair in layers for t in pair):
        return "damaged: its tensors do not hold the piece's tokens", None
    return None, layers
