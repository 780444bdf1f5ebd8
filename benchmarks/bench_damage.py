"""A damaged document cache folder, read by a real server and by the library: wrong answers and
unrefused reads over the five kinds of damage (goal: 0 and 0).

1. A default ``setllm serve --cache-dir D`` (the embedded model; ``/v1/answer`` reads under
   ``sbp`` with its documents adapter) answers ``--questions`` questions over documents drawn
   from a pool, and stops: the folder holds the prefix and every document, once.
2. One file is damaged in each way: a bit flipped in its data; its data overwritten with other
   values of the same size; two files swapped; the same document's piece computed by other
   weights (the base model, no adapter, in another folder) copied over its file; a file
   rewritten in the format of earlier releases.
3. A second server on the folder answers the same questions (documents in another order): every
   answer must be the first server's, and every damaged file refused (``/metrics``).
4. The files are damaged again and the library (``SetLLM.from_pretrained()`` with
   ``cache_documents(directory=D)``) answers them: the same answers, every damaged file refused.

    python benchmarks/bench_damage.py --threads 1 --json damage.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

WORDS = "river stone garden lamp winter orange violin harbor copper meadow signal ladder candle forest silver".split()


def pool(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"The code of {rng.choice(WORDS)}-{i} is {rng.randint(1000, 9999)}.\n" for i in range(n)]


def questions(docs: list[str], n: int, per: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        chosen = rng.sample(docs, per)
        name = chosen[0].split(" is ")[0].removeprefix("The code of ")
        out.append({"documents": chosen, "question": f"What is the code of {name}?", "max_new_tokens": 8})
    return out


@contextlib.contextmanager
def server(args, folder: Path):
    """A real default ``setllm serve --cache-dir folder``, and an HTTP client for it."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "setllm", "serve", "--port", str(port), "--threads", str(args.threads), "--no-batch-check",
           "--cache-dir", str(folder)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + 300
        while time.monotonic() < end:
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        with httpx.Client(base_url=url, timeout=600) as client:
            yield client, proc
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def ask(client, bodies: list[dict]) -> list[str]:
    return [client.post("/v1/answer", json=b).json()["answer"] for b in bodies]


def refused(client) -> float:
    lines = client.get("/metrics").text.splitlines()
    return next(float(line.split()[1]) for line in lines if line.startswith("setllm_document_cache_disk_refused "))


def key_of(path: Path) -> dict:
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    return json.loads(json.loads(data[8 : 8 + n])["__metadata__"]["key"])


def rewrite_meta(path: Path, change) -> None:
    data = path.read_bytes()
    n = 8 + int.from_bytes(data[:8], "little")
    header = json.loads(data[8:n])
    change(header["__metadata__"])
    head = json.dumps(header).encode()
    path.write_bytes(len(head).to_bytes(8, "little") + head + data[n:])


def damage(folder: Path, foreign: Path) -> list[Path]:
    """Damage one document file in each of the five ways; the damaged files."""
    docs = sorted((p for p in folder.glob("*.safetensors") if key_of(p)["document"] is not None), key=lambda p: p.name)
    flip, overwrite, swap_a, swap_b, other, old = docs[:6]
    data = flip.read_bytes()
    at = (8 + int.from_bytes(data[:8], "little") + len(data)) // 2
    flip.write_bytes(data[:at] + bytes([data[at] ^ 0x04]) + data[at + 1 :])
    data = overwrite.read_bytes()
    n = 8 + int.from_bytes(data[:8], "little")
    overwrite.write_bytes(data[:n] + random.Random(0).randbytes(len(data) - n))
    a, b = swap_a.read_bytes(), swap_b.read_bytes()
    swap_a.write_bytes(b)
    swap_b.write_bytes(a)
    wanted = key_of(other)
    twin = next(p for p in foreign.glob("*.safetensors") if (key_of(p)["prefix"], key_of(p)["document"]) == (wanted["prefix"], wanted["document"]))
    other.write_bytes(twin.read_bytes())  # the same document, computed by the base model: another reading's piece
    rewrite_meta(old, lambda meta: meta.update(format="setllm-document-piece/1", key="[]"))
    return [flip, overwrite, swap_a, swap_b, other, old]


def foreign_pieces(bodies: list[dict], folder: Path) -> None:
    """The same documents read by the base model under sbp (no adapter), into ``folder``."""
    from setllm import SetLLM

    lm = SetLLM.from_pretrained(adapter="none", variant="sbp")
    lm.cache_documents(512, directory=folder)
    for b in bodies:
        lm.answer(b["documents"], b["question"], max_new_tokens=1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--questions", type=int, default=6)
    p.add_argument("--pool", type=int, default=12, help="documents the questions draw from")
    p.add_argument("--per", type=int, default=6, help="documents per question")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    bodies = questions(pool(args.pool, 0), args.questions, args.per, 1)
    shuffled = [{**b, "documents": random.Random(i).sample(b["documents"], len(b["documents"]))} for i, b in enumerate(bodies)]
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder, foreign = Path(tmp) / "cache", Path(tmp) / "foreign"
        with server(args, folder) as (client, _):
            want = ask(client, bodies)
        foreign_pieces(bodies, foreign)
        bad = damage(folder, foreign)
        with server(args, folder) as (client, proc):
            got = ask(client, shuffled)
            server_refused = refused(client)
        result["server"] = {"answers": len(got), "wrong": sum(a != b for a, b in zip(got, want)), "damaged_files": len(bad),
                            "refused": server_refused, "unrefused": len(bad) - server_refused}
        print(json.dumps(result["server"]), flush=True)
        bad = damage(folder, foreign)
        from setllm import SetLLM

        lm = SetLLM.from_pretrained()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lm.cache_documents(512, directory=folder)
            got = [lm.answer(b["documents"], b["question"], max_new_tokens=8) for b in shuffled]
        stats = lm.document_cache.stats()
        said = [str(w.message) for w in caught if "document cache: refused" in str(w.message)]
        result["library"] = {"answers": len(got), "wrong": sum(a != b for a, b in zip(got, want)), "damaged_files": len(bad),
                             "refused": stats.disk_refused, "unrefused": len(bad) - stats.disk_refused, "warnings": len(said),
                             "named": sorted({s.split("refused ")[1].split(" (")[0] for s in said}) == sorted(map(str, bad))}
        print(json.dumps(result["library"]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
