"""The document cache's disk tier (:mod:`setllm.core.doccache.tier`): a restarted process finds the
documents it read before, with the same bits; the folder holds what its accounting says,
least recently used out; every byte is checked: a damaged, truncated, swapped, foreign or
old file is refused in one warning, recomputed and replaced, in the library, in a server and
in another process sharing the folder; two processes sharing the folder never read a
half-written file."""

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
from setllm.core import doccache
from setllm.core.doccache import tier as doctier
from setllm.core.doccache.keys import PieceKey, ReadingKey
from setllm.errors import SetLLMWarning

READING = ReadingKey("w", (), "sbp", "float32", "t")


def key(i, n=7) -> PieceKey:
    return PieceKey(READING, (1, 2, i), tuple(range(n)))

DOCS = [f"Note {i}: the {w} fox jumps over the lazy dog.\n" for i, w in enumerate(["quick", "brown", "red", "old", "small"])]
OPTIONS = ["fox", "dog"]


def prompt(docs):
    return ["Documents:\n", Set(list(docs)), "Question: which one jumps?\nAnswer:"]


@pytest.fixture
def lm():
    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), "sbp")
    yield lm
    doccache.forget(lm.model)


def restart(lm, folder, **kw):
    """A fresh memory cache on the same folder, as a restarted process has."""
    doccache.forget(lm.model)
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
    tier.put(key(0), layers)
    size = files(tmp_path)[0].stat().st_size
    tier = doctier.DiskTier(tmp_path, 3 * size)  # a restart: the folder scanned
    assert tier.bytes == size and tier.entries == 1
    for i in range(1, 3):
        tier.put(key(i), layers)
    assert tier.get(key(0)) is not None  # 0 is now the most recently used
    tier.put(key(3), layers)
    assert tier.get(key(1)) is None and tier.evictions == 1
    on_disk = sum(p.stat().st_size for p in files(tmp_path))
    assert on_disk == tier.bytes <= tier.max_bytes
    got = tier.get(key(0))
    assert all(torch.equal(a, b) for pair, mine in zip(got, layers) for a, b in zip(pair, mine))


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    n = 8 + int.from_bytes(data[:8], "little")  # where the tensor data starts
    others = sorted(p for p in path.parent.glob("*.safetensors") if p != path)
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "damaged header":
        path.write_bytes(data[:8] + b"}" * (len(data) - 8))
    elif how == "damaged bit":  # one bit of one value flipped, in the middle of the data
        at = (n + len(data)) // 2
        path.write_bytes(data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1 :])
    elif how == "damaged overwrite":  # the whole data section: other values of the same size, header intact
        path.write_bytes(data[:n] + torch.randn((len(data) - n) // 4).numpy().tobytes())
    elif how == "foreign swapped":  # a whole, valid file written for another document, under this one's name
        other = others[0]
        mine = path.read_bytes()
        path.write_bytes(other.read_bytes())
        other.write_bytes(mine)
    elif how == "foreign model":  # the same document's piece, computed by other weights: its key says so
        header = json.loads(data[8:n])
        meta = header["__metadata__"]
        meta["key"] = meta["key"].replace('"weights":"', '"weights":"0')
        head = json.dumps(header).encode()
        path.write_bytes(len(head).to_bytes(8, "little") + head + data[n:])
    else:  # foreign old: the format of earlier releases, the key a tuple
        header = json.loads(data[8:n])
        header["__metadata__"] = {"format": "setllm-document-piece/1", "key": "[\"x\"]", "layers": header["__metadata__"]["layers"]}
        head = json.dumps(header).encode()
        path.write_bytes(len(head).to_bytes(8, "little") + head + data[n:])


DAMAGE = ["truncated", "damaged header", "damaged bit", "damaged overwrite", "foreign swapped", "foreign model", "foreign old"]


@pytest.mark.parametrize("how", DAMAGE)
def test_a_bad_file_is_refused_in_one_warning_and_the_document_computed_again(lm, tmp_path, how):
    lm.cache_documents(64, directory=tmp_path)
    want = lm.score(prompt(DOCS[:3]), OPTIONS)
    text = lm.generate(prompt(DOCS[:3]), max_new_tokens=4)
    before = {p.name: p.read_bytes() for p in files(tmp_path)}
    victim = max(files(tmp_path), key=lambda p: p.stat().st_size)  # a document's file, not the prefix's
    _damage(victim, how)
    bad = {p for p in files(tmp_path) if p.read_bytes() != before[p.name]}
    store = restart(lm, tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert lm.score(prompt(DOCS[:3]), OPTIONS) == want
    refused = [str(w.message) for w in caught if "document cache" in str(w.message)]
    assert len(refused) == len(bad) and all(r.startswith(f"document cache: refused {p.name} ({how.split()[0]}") for r, p in zip(refused, sorted(bad)))
    assert all("\n" not in r for r in refused)
    s = store.stats()
    assert (s.disk_refused, s.misses, s.disk_writes) == (len(bad), len(bad), len(bad))
    for p in bad:  # written again, whole
        assert _content(p.read_bytes()) == _content(before[p.name])
    assert lm.generate(prompt(DOCS[2::-1]), max_new_tokens=4) == text


@pytest.mark.parametrize("how", DAMAGE)
def test_a_bad_file_never_reaches_memory_at_the_tier(tmp_path, how):
    """The tier alone: what :meth:`DiskTier.get` returns is the piece written, or None."""
    tier = doctier.DiskTier(tmp_path, 10**9)
    made = {i: [(torch.randn(1, 2, 7, 4), torch.randn(1, 2, 7, 4)) for _ in range(3)] for i in range(3)}
    for i, layers in made.items():
        tier.put(key(i), layers)
    victim = tmp_path / doctier.file_name(key(1))
    _damage(victim, how)
    tier = doctier.DiskTier(tmp_path, 10**9)
    with pytest.warns(SetLLMWarning, match=f"refused {victim.name} ") as said:  # the file's name, never its folder
        assert tier.get(key(1)) is None
    assert str(tmp_path) not in str(said[0].message) and tier.refused == 1
    for i in (0, 2):
        got = tier.get(key(i))
        assert got is None or all(torch.equal(a, b) for pair, mine in zip(got, made[i]) for a, b in zip(pair, mine))


def test_a_key_is_short_fields_never_an_objects_repr(lm, tmp_path):
    """A piece's key names the weights, adapters, variant, dtype, tokenizer, prefix and document
    in fields; a file's key is its JSON."""
    lm.cache_documents(64, directory=tmp_path)
    lm.score(prompt(DOCS[:2]), OPTIONS)
    keys = [json.loads(json.loads(p.read_bytes()[8 : 8 + int.from_bytes(p.read_bytes()[:8], "little")])["__metadata__"]["key"])
            for p in files(tmp_path)]
    for k in keys:
        assert set(k) == {"reading", "prefix", "document"}
        assert set(k["reading"]) == {"weights", "adapters", "variant", "dtype", "tokenizer", "format"}
        assert k["reading"]["adapters"] == [] and k["reading"]["variant"] == "sbp" and k["reading"]["dtype"] == "float32"
        assert len(k["reading"]["weights"]) == 16 and len(k["reading"]["tokenizer"]) == 16
        assert all(isinstance(t, int) for t in k["prefix"] + (k["document"] or []))
    assert sorted(k["document"] is None for k in keys) == [False, False, True]  # the prefix's piece, then a document each
    assert max(len(p.read_bytes()[:4096].split(b'"key":')[1].split(b'","')[0]) for p in files(tmp_path)) < 400


def test_an_adapter_is_named_in_the_key_by_its_weights(tmp_path):
    """Two adapters over one base: their pieces never meet, and their keys say which is which."""
    from peft import LoraConfig, get_peft_model

    base = tiny_model("llama")
    net = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False), adapter_name="first")
    net.add_adapter("second", LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    lm = SetLLM(net, tiny_tokenizer(), "sbp")
    variant = lm.variant
    a = doccache.reading_key(net, lm.tokenizer, variant)
    net.set_adapter("second")
    b = doccache.reading_key(net, lm.tokenizer, variant)
    with net.disable_adapter():
        none = doccache.reading_key(net, lm.tokenizer, variant)
    assert a.weights == b.weights == none.weights
    assert [n for n, _ in a.adapters] == ["first"] and [n for n, _ in b.adapters] == ["second"] and none.adapters == ()
    assert a.adapters[0][1] != b.adapters[0][1]
    doccache.forget(net)


def _content(data: bytes):
    """A piece file's metadata and tensors (the header's order of fields may vary)."""
    n = int.from_bytes(data[:8], "little")
    tensors = load(data)
    return json.loads(data[8 : 8 + n])["__metadata__"], {k: t.tolist() for k, t in sorted(tensors.items())}


WRITER = textwrap.dedent("""
    import sys, time, torch
    from setllm.core.doccache import tier as doctier
    from setllm.core.doccache.tier import DiskTier
    from setllm.core.doccache.keys import PieceKey, ReadingKey
    def slow_write(path, chunks):  # a slow disk: half the file, a pause, the rest
        data = b"".join(bytes(c) for c in chunks)
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
            time.sleep(0.02)
            f.write(data[len(data) // 2 :])
    doctier._write_file = slow_write
    key = lambda i: PieceKey(ReadingKey("w", (), "sbp", "float32", "t"), (), tuple(range(300 + i)))
    tier = DiskTier(sys.argv[1], 10**9)
    for round in range(int(sys.argv[2])):
        for i in range(4):
            tier._files.clear()  # write again each round: a reader may open the file at any moment
            g = torch.Generator().manual_seed(i)
            k, v = torch.randn(1, 4, 300 + i, 16, generator=g), torch.randn(1, 4, 300 + i, 16, generator=g)
            tier.put(key(i), [(k.clone(), v.clone()) for _ in range(4)])
    open(sys.argv[1] + ".done", "w").close()
""")

READER = textwrap.dedent("""
    import os, sys, warnings, torch
    from setllm.core.doccache.tier import DiskTier
    from setllm.core.doccache.keys import PieceKey, ReadingKey
    key = lambda i: PieceKey(ReadingKey("w", (), "sbp", "float32", "t"), (), tuple(range(300 + i)))
    warnings.simplefilter("error")  # a refused file fails the reader
    found = 0
    while not os.path.exists(sys.argv[1] + ".done"):  # read while the writer writes
        tier = DiskTier(sys.argv[1], 10**9)
        for i in range(4):
            got = tier.get(key(i))
            if got is not None:
                g = torch.Generator().manual_seed(i)
                want = (torch.randn(1, 4, 300 + i, 16, generator=g), torch.randn(1, 4, 300 + i, 16, generator=g))
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


def test_the_same_adapter_weights_give_the_same_key_loaded_alone_or_in_a_bank(tmp_path):
    """A server's bank loads an adapter under its bank name, the library under PEFT's
    ``default``: one adapter, one key (its folder names it, its weights are hashed under plain
    names), so a folder the server filled serves the library and back."""
    from peft import LoraConfig, PeftModel, get_peft_model

    alone = get_peft_model(tiny_model("llama"), LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    folder = tmp_path / "my-adapter"
    alone.save_pretrained(folder)
    banked = PeftModel.from_pretrained(tiny_model("llama"), folder, adapter_name="documents")
    tok = tiny_tokenizer()
    variant = SetLLM(alone, tok, "sbp").variant
    a = doccache.reading_key(alone, tok, variant, str(folder))
    b = doccache.reading_key(banked, tok, variant, str(folder))
    assert a == b and a.adapters[0][0] == "my-adapter"
    base = tiny_model("llama")
    torch.manual_seed(1)  # other LoRA weights on the same base
    retrained = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    assert doccache.reading_key(retrained, tok, variant, str(folder)).adapters != a.adapters  # other weights, the same name: another key


def test_a_cache_set_takes_the_reading_keys_fingerprints_at_once(lm, tmp_path):
    """A server sets its cache at start-up: the weights' and tokenizer's fingerprints are taken
    then, so a replica's first question over documents in the folder pays for neither."""
    from setllm.core.model.owner import owner

    lm.cache_documents(64, directory=tmp_path)
    state = owner(lm.model)
    taken = state.fingerprints
    assert taken is not None and None in taken[1] and lm.tokenizer in state.tokenizer_prints
    lm.score(prompt(DOCS[:2]), OPTIONS)
    assert state.fingerprints is taken  # the same prints: nothing taken again by the question


PLAIN_MODEL = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from tiny import tiny_model, tiny_tokenizer
    from setllm import Set, SetLLM
    lm = SetLLM(tiny_model("llama"), tiny_tokenizer(), "sbp")
    lm.score(["Documents:\\n", Set(["a b\\n", "c d\\n"]), "Answer:"], ["x", "y"])
    print("peft" in sys.modules)
""")


def test_a_model_without_adapters_reads_documents_without_importing_peft():
    """Importing peft costs a process's first question 0.1 s; no PEFT layer exists before it is imported."""
    tests = Path(__file__).parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", PLAIN_MODEL, str(tests)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "False"


def _layers():
    return [(torch.randn(1, 2, 7, 4), torch.randn(1, 2, 7, 4)) for _ in range(3)]


def test_the_tier_touches_only_its_own_files(tmp_path):
    """A folder shared with other files (a model's weights, a note): they are never counted,
    evicted or deleted, however small the bound."""
    (tmp_path / "model.safetensors").write_bytes(b"w" * 3_000_000)
    (tmp_path / "0963ae3e2ee0856817dc58916ad1df687bc7f971.safetensors").write_bytes(b"x" * 10)  # a name like ours, not ours
    size = len(b"".join(bytes(c) for c in doctier._encode(key(0), _layers())))
    tier = doctier.DiskTier(tmp_path, 2 * size)
    assert tier.entries == 0 and tier.bytes == 0
    for i in range(4):
        tier.put(key(i), _layers())
    tier.clear()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0963ae3e2ee0856817dc58916ad1df687bc7f971.safetensors", "model.safetensors"]
    assert (tmp_path / "model.safetensors").stat().st_size == 3_000_000


@pytest.mark.parametrize("fault", ["a file where the folder is", "the folder replaced by a file"])
def test_a_folder_fault_leaves_memory_with_one_log_line_and_no_path_for_clients(tmp_path, fault, caplog):
    folder = tmp_path / "cache"
    if fault == "a file where the folder is":
        folder.write_text("not a folder")
        tier = doctier.DiskTier(folder, 10**9)
    else:
        tier = doctier.DiskTier(folder, 10**9)
        tier.put(key(0), _layers())
        folder.rename(tmp_path / "moved")
        folder.write_text("not a folder")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing a server would send to a client
        for i in range(3):
            tier.put(key(i), _layers())
            assert tier.get(key(i)) is None
    lines = [r.getMessage() for r in caplog.records if r.name == "setllm.doccache"]
    assert len(lines) == 1 and str(folder) in lines[0] and "kept in memory only" in lines[0], lines
    assert tier.fault is not None and tier.entries == 0
