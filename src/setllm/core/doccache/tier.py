"""The document cache's disk tier: each piece's keys and values in a folder, one safetensors
file a piece, found again by the key the memory cache uses (:class:`setllm.core.doccache.keys.PieceKey`:
weights, adapters, variant, dtype, tokenizer, prefix tokens, element tokens), so a restarted
process, or another one sharing the folder, reads a document it has read before from disk
instead of computing it.

- **Every byte is checked before it is used.** A file holds its whole key and a checksum of
  that key, its tensors' header entries (names, dtypes, shapes, offsets) and all of its
  tensor data. A read verifies the format, the key and the checksum before a tensor is made:
  a file whose bytes are not what was written (a flipped bit, data overwritten with other
  values of the same size, a truncated tail) or that was written for another key (two files
  swapped, another model's or adapter's piece copied over, an older format) is refused with
  one warning naming it, counted (``refused``), and the piece computed again and written
  anew. Nothing unverified reaches memory or an answer, in any process sharing the folder.
  The checksum is XXH3-128 (xxhash): it guards against damage, not against someone who can
  write the folder (they could write a valid file under any key), and it runs at memory speed
  (about 11 GB/s here, where SHA-256 runs at 1.2), so checking costs a few percent of reading
  a piece back (``check_s`` counts it; docs/documents.md measures it).
- A file is written to a temporary name in the folder, then renamed (:func:`os.replace`, atomic
  on one file system): a process sharing the folder sees the whole file or none.
- The folder is bounded by bytes (the files' sizes on disk), least recently used out (a file
  found is touched, so a restart's scan knows the order). The bound holds for what this
  process writes and reads; files another process writes count once this one reads them.
- **The tier owns only its own files**: ``setllm-doc-<40 hex>.safetensors`` (:func:`file_name`)
  and their temporary names. Any other file in the folder (a model's ``model.safetensors``, a
  user's notes) is never counted, read, evicted or deleted.
- **A folder fault turns the tier off, not the request**: a folder that cannot be made or
  written (read-only, a file where the folder should be, a full disk) leaves the cache in
  memory only, with one warning in the log naming the folder and the error; what a request
  hears (a warning sent back with it by a server) never names a path or an OS error.

Shapes: as :mod:`setllm.core.doccache.store` (``(k [1, Hkv, n, d], v)`` per layer).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time
import uuid
import warnings
from collections import OrderedDict
from pathlib import Path

import torch
import xxhash
from safetensors.torch import save as save_tensors

from ...errors import SetLLMWarning
from .keys import FORMAT, PieceKey

SUFFIX = ".safetensors"
PREFIX = "setllm-doc-"
OWN = re.compile(re.escape(PREFIX) + r"[0-9a-f]{40}" + re.escape(SUFFIX))  # the names this tier writes, and the only ones it touches
log = logging.getLogger("setllm.doccache")
Layers = list[tuple[torch.Tensor, torch.Tensor]]


class DiskTier:
    """Pieces on disk under ``directory``, at most ``max_bytes`` of files. Safe to share
    between threads, and the folder between processes."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int):
        self.directory = Path(directory).expanduser()
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self._files: OrderedDict[str, int] = OrderedDict()  # name -> bytes, least recently used first
        self.hits = self.writes = self.refused = self.evictions = self.bytes = 0
        self.check_s = 0.0  # seconds spent verifying checksums
        self.fault: str | None = None  # why the folder is not used (None: it is)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            found = []
            for path in self.directory.iterdir():
                if OWN.fullmatch(path.name):
                    try:
                        st = path.stat()
                    except FileNotFoundError:
                        continue
                    found.append((st.st_mtime, path.name, st.st_size))
        except OSError as e:
            self._fail(e)
            return
        for _, name, size in sorted(found):
            self._files[name] = size
            self.bytes += size
        with self._lock:
            self._evict()

    def get(self, key: PieceKey) -> Layers | None:
        """The piece under ``key``, or None where there is none or its file is refused."""
        if self.fault is not None:
            return None
        name = file_name(key)
        path = self.directory / name
        try:
            data = _read(path)
        except FileNotFoundError:
            with self._lock:
                self._forget(name)
            return None
        except OSError as e:
            self._fail(e)
            return None
        start = time.perf_counter()
        why, header = _verify(data, key)
        checked = time.perf_counter() - start
        layers = None
        if why is None:
            why, layers = _layers(data, header, key)
        with self._lock:
            self.check_s += checked
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
        if why is not None:  # the file's name, not its folder: a server sends this warning to the request's client
            warnings.warn(f"document cache: refused {name} ({why}); the document is computed again", SetLLMWarning, stacklevel=2)
            return None
        try:
            os.utime(path)  # most recently used: a restart's scan orders by this
        except OSError:
            pass
        return layers

    def put(self, key: PieceKey, layers: Layers) -> None:
        """Write ``layers`` under ``key`` once (a piece larger than the bound is not written)."""
        name = file_name(key)
        with self._lock:
            if name in self._files or self.fault is not None:
                return
        path = self.directory / name
        temp = self.directory / f".{name}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
        try:
            _write_file(temp, _encode(key, layers))
            size = temp.stat().st_size
            if size > self.max_bytes:
                temp.unlink()
                return
            os.replace(temp, path)  # atomic: readers see the whole file or none
        except OSError as e:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            self._fail(e)
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
                _remove(self.directory / name)
            self._files.clear()
            self.bytes = 0

    def _fail(self, error: OSError) -> None:
        """Stop using the folder (once): the cache goes on in memory, the log says why."""
        with self._lock:
            if self.fault is not None:
                return
            self.fault = f"{type(error).__name__}: {error.strerror or error}"
            self._files.clear()
            self.bytes = 0
        log.warning("document cache: cannot use the folder %s (%s); documents are kept in memory only", self.directory, self.fault)

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
            _remove(self.directory / name)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):  # gone already, or the folder turned read-only: the bound is kept in memory
        path.unlink(missing_ok=True)


def file_name(key: PieceKey) -> str:
    return PREFIX + key.digest()[:40] + SUFFIX


def _encode(key: PieceKey, layers: Layers) -> list:
    """The bytes of ``key``'s file, in chunks: safetensors' layout, with the key and the
    checksum of everything a reader will use in its metadata."""
    tensors = {f"{kind}{i}": t.detach().contiguous().cpu() for i, pair in enumerate(layers) for kind, t in zip("kv", pair)}
    raw = save_tensors(tensors, metadata={"format": FORMAT, "key": key.text(), "layers": str(len(layers))})
    n = int.from_bytes(raw[:8], "little")
    header, data = json.loads(raw[8 : 8 + n]), memoryview(raw)[8 + n :]
    header["__metadata__"]["xxh3_128"] = _checksum(header, data)
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()  # the same bytes for the same piece, in any process
    head += b" " * (-len(head) % 8)  # safetensors aligns the data that follows its header to 8 bytes
    return [len(head).to_bytes(8, "little"), head, data]


def _write_file(path: Path, chunks: list) -> None:
    with open(path, "wb") as f:
        for chunk in chunks:
            f.write(chunk)


def _checksum(header: dict, data) -> str:
    """XXH3-128 of the key, the tensors' header entries and the tensor data: every byte a
    read turns into the piece (the metadata's other fields are checked as values)."""
    meta = header["__metadata__"]
    entries = {k: v for k, v in header.items() if k != "__metadata__"}
    h = xxhash.xxh3_128(f"{meta.get('format')}\0{meta.get('key')}\0{meta.get('layers')}\0".encode())
    h.update(json.dumps(entries, sort_keys=True, separators=(",", ":")).encode() + b"\0")
    h.update(data)
    return h.hexdigest()


def _read(path: Path) -> bytearray:
    """A file's bytes, in a buffer the piece's tensors are then views of (no second copy)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = bytearray(size)
        got = f.readinto(data)
    return data if got == size else data[:got]


def _verify(data, key: PieceKey) -> tuple[str | None, dict | None]:
    """``(why the file is refused, None)``, or ``(None, its header)`` once its format, its key
    and the checksum of its bytes are what ``key`` wrote."""
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
    if meta.get("key") != key.text():
        return "foreign: written for another model, adapter, variant or text", None
    if len(data) != end or meta.get("xxh3_128") != _checksum(header, memoryview(data)[8 + n :]):
        return "damaged: its bytes do not match its checksum", None
    return None, header


DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def _layers(data: bytearray, header: dict, key: PieceKey) -> tuple[str | None, Layers | None]:
    """The verified file's tensors as views of ``data`` (safetensors' layout: after the
    8-byte length and the header, each tensor at its offsets)."""
    start = 8 + int.from_bytes(data[:8], "little")
    tensors = {}
    try:
        for name, v in header.items():
            if name != "__metadata__":
                shape, (lo, hi) = v["shape"], v["data_offsets"]
                flat = torch.frombuffer(data, dtype=DTYPES[v["dtype"]], count=(hi - lo) // DTYPES[v["dtype"]].itemsize, offset=start + lo)
                tensors[name] = flat.view(shape)
        layers = [(tensors[f"k{i}"], tensors[f"v{i}"]) for i in range(int(header["__metadata__"]["layers"]))]
    except (KeyError, ValueError, RuntimeError, TypeError) as e:
        return f"damaged: {type(e).__name__}: {e}", None
    if len(tensors) != 2 * len(layers) or any(t.dim() != 4 or t.shape[2] != key.n_tokens for pair in layers for t in pair):
        return "damaged: its tensors do not hold the piece's tokens", None
    return None, layers
