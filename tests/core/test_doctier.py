"""The document cache's disk tier (:mod:`setllm.core.doctier`): a restarted process finds the
documents it read before, with the same bits; the folder holds what its accounting says,
least recently used out; a damaged, truncated or foreign file is refused in one warning and
recomputed; two processes sharing the folder never read a half-written file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load
from tiny import tiny_model, tiny_tokenizer

from setllm import Set, SetLLM
from setllm.core import doccache, doctier

DOCS = [f"Note {i}: the {w} fox jumps over the lazy dog.\n" for i, w in enumerate(["quick", "brown", "red", "old", "small"])]
OPTIONS = ["fox", "dog"]


def prompt(docs):
    return ["Documents:\n", Set(list(docs)), "Question: which one jumps?\nAnswer:"]


@pytest.fixture
def lm():
    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), "sbp")
    yield lm
    doccache._attached.pop(doccache._weights(lm.model), None)


def restart(lm, folder, **kw):
    """A fresh memory cache on the same folder, as a restarted process has."""
    doccache._attached.pop(doccache._weights(lm.model), None)
    return lm.cache_documents(64, directory=folder, **kw)


def files(folder) -> list[Path]:
    return sorted(Path(folder).glob("*.safetensors"))


def test_a_restarted_process_reads_its_documents_from_disk_with_the_same_bits(lm, tmp_path):
    store = lm.cache_documents(64, directory=tmp_path)
    first = lm.score(prompt(DOCS[:4]), OPTIONS)
    assert store.stats().disk_writes == 5 and len(files(tmp_path)) == 5  # the prefix and four documents, once each
    store = restart(lm, tmp_path)
    assert lm.score(prompt(DOCS[3::-1]), OPTIONS) == first
    s = store.stats()
    assert (s.misses, s.disk_hits, s.disk_writes) == (0, 5, 0)  # nothing computed, nothing written again


def test_the_folder_holds_what_its_accounting_says_least_recently_used_out(tmp_path):
    layers = [(torch.randn(1, 2, 7, 4), torch.randn(1, 2, 7, 4))]
    tier = doctier.DiskTier(tmp_path, 10**9)
    tier.put(("k", 0, tuple(range(7))), layers)
    size = files(tmp_path)[0].stat().st_size
    tier = doctier.DiskTier(tmp_path, 3 * size)  # a restart: the folder scanned
    assert tier.bytes == size and tier.entries == 1
    for i in range(1, 3):
        tier.put(("k", i, tuple(range(7))), layers)
    assert tier.get(("k", 0, tuple(range(7)))) is not None  # 0 is now the most recently used
    tier.put(("k", 3, tuple(range(7))), layers)
    assert tier.get(("k", 1, tuple(range(7)))) is None and tier.evictions == 1
    on_disk = sum(p.stat().st_size for p in files(tmp_path))
    assert on_disk == tier.bytes <= tier.max_bytes
    got = tier.get(("k", 0, tuple(range(7))))
    assert all(torch.equal(a, b) for pair, mine in zip(got, layers) for a, b in zip(pair, mine))


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "damaged":
        path.write_bytes(data[:8] + b"}" * (len(data) - 8))  # the header overwritten
    else:  # foreign: a whole, valid file written for another document, under this one's name
        other = sorted(p for p in path.parent.glob("*.safetensors") if p != path)[0]
        path.write_bytes(other.read_bytes())


@pytest.mark.parametrize("how", ["truncated", "damaged", "foreign"])
def test_a_bad_file_is_refused_in_one_warning_and_the_document_computed_again(lm, tmp_path, how):
    lm.cache_documents(64, directory=tmp_path)
    want = lm.score(prompt(DOCS[:3]), OPTIONS)
    before = {p.name: p.read_bytes() for p in files(tmp_path)}
    victim = max(files(tmp_path), key=lambda p: p.stat().st_size)  # a document's file, not the prefix's
    _damage(victim, how)
    store = restart(lm, tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert lm.score(prompt(DOCS[:3]), OPTIONS) == want
    refused = [str(w.message) for w in caught if "document cache" in str(w.message)]
    assert len(refused) == 1 and refused[0].startswith(f"document cache: refused {victim} ({how.split()[0]}")
    assert "\n" not in refused[0]
    s = store.stats()
    assert (s.disk_refused, s.misses, s.disk_writes) == (1, 1, 1)
    assert _content(victim.read_bytes()) == _content(before[victim.name])  # written again, whole


def _content(data: bytes):
    """A piece file's metadata and tensors (the header's order of fields may vary)."""
    n = int.from_bytes(data[:8], "little")
    tensors = load(data)
    return json.loads(data[8 : 8 + n])["__metadata__"], {k: t.tolist() for k, t in sorted(tensors.items())}


WRITER = textwrap.dedent("""
    import sys, time, torch
    from setllm.core import doctier
    from setllm.core.doctier import DiskTier
    real_save = doctier.save_file
    def slow_save(tensors, filename, metadata=None):  # a slow disk: half the file, a pause, the rest
        real_save(tensors, filename + ".whole", metadata=metadata)
        data = open(filename + ".whole", "rb").read()
        with open(filename, "wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
            time.sleep(0.02)
            f.write(data[len(data) // 2 :])
        import os
        os.remove(filename + ".whole")
    doctier.save_file = slow_save
    tier = DiskTier(sys.argv[1], 10**9)
    for round in range(int(sys.argv[2])):
        for i in range(4):
            tier._files.clear()  # write again each round: a reader may open the file at any moment
            g = torch.Generator().manual_seed(i)
            k, v = torch.randn(1, 4, 300, 16, generator=g), torch.randn(1, 4, 300, 16, generator=g)
            tier.put(("doc", i, tuple(range(300))), [(k.clone(), v.clone()) for _ in range(4)])
    open(sys.argv[1] + ".done", "w").close()
""")

READER = textwrap.dedent("""
    import os, sys, warnings, torch
    from setllm.core.doctier import DiskTier
    warnings.simplefilter("error")  # a refused file fails the reader
    found = 0
    while not os.path.exists(sys.argv[1] + ".done"):  # read while the writer writes
        tier = DiskTier(sys.argv[1], 10**9)
        for i in range(4):
            got = tier.get(("doc", i, tuple(range(300))))
            if got is not None:
                g = torch.Generator().manual_seed(i)
                want = (torch.randn(1, 4, 300, 16, generator=g), torch.randn(1, 4, 300, 16, generator=g))
                assert len(got) == 4 and all(torch.equal(k, want[0]) and torch.equal(v, want[1]) for k, v in got)
                found += 1
    print(found)
""")


def test_two_processes_sharing_the_folder_never_read_a_half_written_file(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"), os.environ.get("PYTHONPATH", "")])}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), "25"], env=env)
    reader = subprocess.run([sys.executable, "-c", READER, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert writer.wait(timeout=300) == 0
    assert reader.returncode == 0, reader.stderr[-2000:]
    assert int(reader.stdout) > 0  # it did read files while they were being written
    assert not list(tmp_path.glob("*.tmp"))
