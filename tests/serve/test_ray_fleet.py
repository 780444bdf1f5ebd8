"""`setllm serve --replicas N` as a fleet that loses nothing: a replica killed with requests in
flight on it loses none of them (the endpoint sends them to another replica, which gives the
single server's answer); replicas share the disk tier (`--cache-dir`): several write the same
documents at once, and replicas that replace dead ones read them from the folder instead of
computing them; SIGTERM to the main process or to its whole group, SIGINT, and a double Ctrl-C
each answer every open request (its answer, or the single server's JSON 503), within the drain
bound plus 10 s, and leave no process behind; an idle fleet stops within 10 s.

Each test starts a fleet on a local Ray instance (tens of seconds on a busy 2-core CPU)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

pytest.importorskip("ray.serve")
psutil = pytest.importorskip("psutil")

from fastapi.testclient import TestClient  # noqa: E402
from process_tree import engines, kill, processes  # noqa: E402
from server_process import listening_url  # noqa: E402

from setllm.serve.ray.ingress import REPLICA_HEADER, stat_total  # noqa: E402

pytestmark = pytest.mark.slow
START_S = 240
SRC = str(Path(__file__).resolve().parents[2] / "src")
DOCS = ["Paris is in France.", "Rome is in Italy.", "Bern is in Switzerland.", "Oslo is in Norway.", "Lima is in Peru."]
LONG = {"prompt": "Read:\n{{" + "||".join(DOCS[:3]) + "}} Say:", "max_new_tokens": 200}  # a generation that takes a while
DRAIN_S = 60  # --drain-s of the fleets that stop with requests open


def flags(model_dir: str, *more: str) -> list[str]:
    return ["--model", model_dir, "--adapter", "none", "--variant", "sbp", "--cache-mb", "10", "--no-batch-check",
            "--max-batch-size", "2", *more]


def ray_temp_dir() -> tempfile.TemporaryDirectory:
    """A Ray node's ``--temp-dir``: under the temp folder (``$TMPDIR``, else /tmp), where Ray
    puts its sessions by default too; not under ``tmp_path``, whose long name would not leave
    Ray's socket paths within their 107 bytes."""
    return tempfile.TemporaryDirectory(prefix="setllm-ray-")


def test_ray_nodes_write_under_tmpdir(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what gettempdir() reads $TMPDIR into
    with ray_temp_dir() as temp:
        assert Path(temp).parent == tmp_path


@contextmanager
def fleet(*args: str):
    """``(process, url)``: `setllm serve --port 0 ARGS` once it listens; everything it started is
    killed after, whatever the test did."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "SETLLM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([SRC, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}
    proc = subprocess.Popen([sys.executable, "-m", "setllm", "serve", "--port", "0", *args], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, env=env, start_new_session=True)  # its own group, as under a shell
    try:
        yield proc, listening_url(proc, time.monotonic() + START_S)
    finally:
        left = processes(proc)
        kill(left)
        proc.wait()
        psutil.wait_procs(left, timeout=10)


def replica_pid(url: str, replica: str) -> int:
    """The process of the replica ``replica`` (by name), as /metrics of the endpoint says."""
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(f'setllm_replica_info{{replica="{replica}"'):
            return int(line.split('pid="')[1].split('"')[0])
    raise AssertionError(f"/metrics names no replica {replica}")


@pytest.fixture(scope="module")
def one_server(model_dir):
    """The single server of the same flags, in-process: the answers a fleet must give."""
    from setllm.cli import build_parser
    from setllm.cli.common import config_from_args
    from setllm.cli.serve import replica_app
    from setllm.serve import ServeConfig

    _, parser = build_parser("serve")
    args = parser.parse_args(flags(model_dir))
    with TestClient(replica_app(args, config_from_args(ServeConfig, args)), raise_server_exceptions=False) as client:
        yield client


def concurrently(url: str, bodies: list[tuple[str, dict]]) -> tuple[list[threading.Thread], list]:
    """Each ``(path, body)`` posted from a thread of its own; ``results`` fills with
    ``(status, json)``, or ``("no answer", error)`` where the connection gave none."""
    results: list = []

    def post(path: str, body: dict) -> None:
        try:
            r = httpx.post(url + path, json=body, timeout=180)
            results.append((r.status_code, r.json()))
        except httpx.HTTPError as e:
            results.append(("no answer", repr(e)))

    threads = [threading.Thread(target=post, args=pb) for pb in bodies]
    for t in threads:
        t.start()
    return threads, results


def wait_in_flight(url: str, n: int, results: list, within_s: float = 60) -> None:
    """Until all ``n`` requests reached the endpoint (in flight there, or answered into ``results``)."""
    deadline = time.monotonic() + within_s
    while _value(httpx.get(url + "/metrics").text, "setllm_endpoint_requests_in_flight") + len(results) < n:
        assert time.monotonic() < deadline, f"{n} requests never were in flight"
        time.sleep(0.05)


def test_a_replica_killed_with_requests_in_flight_loses_none(model_dir, one_server):
    """Every request goes where its documents are (``--imbalance`` high): all six are on one
    replica, which is SIGKILLed; each is sent again, to the other, and answers as one server."""
    want = one_server.post("/v1/generate", json=LONG).json()
    with fleet("--replicas", "2", "--imbalance", "100", *flags(model_dir)) as (proc, url):
        first = httpx.post(url + "/v1/generate", json={**LONG, "max_new_tokens": 1}, timeout=120)
        victim = first.headers[REPLICA_HEADER]
        pid = replica_pid(url, victim)
        threads, results = concurrently(url, [("/v1/generate", LONG)] * 6)
        wait_in_flight(url, 6, results)
        time.sleep(0.2)  # sent to the replica: running or queued there
        os.kill(pid, signal.SIGKILL)
        for t in threads:
            t.join(timeout=180)
        assert results == [(200, want)] * 6
        metrics = httpx.get(url + "/metrics").text
        retried = _value(metrics, "setllm_endpoint_retries_total")
        before_death = _value(metrics, f'setllm_replica_requests_total{{replica="{victim}"}}') - 1
        assert retried >= 1 and retried + before_death == 6  # each was answered by the victim before it died, or sent again
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=DRAIN_S + 10)


def test_replicas_share_the_disk_tier(model_dir, one_server, tmp_path):
    """Two replicas read the same new documents at once (power of two: requests spread by load),
    each writing them to the one folder; both are SIGKILLed; the replicas Ray starts in their
    place read the documents back from the folder (disk hits, nothing computed but the
    question) and answer as one server."""
    folder = tmp_path / "shared"
    asks = [{"documents": DOCS, "question": f"Where is city {i}?", "max_new_tokens": 3} for i in range(6)]
    want = [one_server.post("/v1/answer", json=a).json() for a in asks]
    with fleet("--replicas", "2", "--router", "power-of-two", "--cache-dir", str(folder), *flags(model_dir)) as (proc, url):
        threads, results = concurrently(url, [("/v1/answer", a) for a in asks])
        for t in threads:
            t.join(timeout=180)
        assert sorted(map(str, results)) == sorted(str((200, w)) for w in want)
        files = sorted(p.name for p in folder.iterdir())
        assert files and not [f for f in files if f.endswith(".tmp")]  # whole files only, every write renamed into place
        before = httpx.get(url + "/metrics").text
        assert stat_total(before, "setllm_document_cache_disk_writes") >= len(files)  # ... some of them written twice
        dead = engines(proc)
        assert len(dead) == 2
        for p in dead:
            p.kill()
        again = {"documents": DOCS[::-1], "question": "Where is city 0?", "max_new_tokens": 3}
        r = httpx.post(url + "/v1/answer", json=again, timeout=180)  # waits for a new replica
        assert r.status_code == 200 and r.json() == want[0]
        new = r.headers[REPLICA_HEADER]
        after = httpx.get(url + "/metrics").text
        mine = "\n".join(x for x in after.splitlines() if f'{{replica="{new}"}}' in x)
        # every piece (the documents and the text before them) from the folder, none computed, none refused
        assert f"_disk_hits{{replica=\"{new}\"}} {len(files)}" in mine and f"_misses{{replica=\"{new}\"}} 0" in mine, mine
        assert f"_disk_refused{{replica=\"{new}\"}} 0" in mine, mine
        assert sorted(p.name for p in folder.iterdir()) == files
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=DRAIN_S + 10)


def _value(text: str, series: str) -> float:
    return next((float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(series + " ")), 0.0)


def stop(proc: subprocess.Popen, how: str) -> None:
    if how == "term-group":
        os.killpg(os.getpgid(proc.pid), signal.SIGTERM)  # as systemd's default, or `kill -- -PGID`
    else:
        proc.send_signal(signal.SIGTERM if how == "term" else signal.SIGINT)
    if how == "int-twice":
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)


@pytest.mark.parametrize("how", ["term", "term-group", "int", "int-twice"])
def test_a_stop_answers_every_open_request_and_leaves_nothing_running(model_dir, one_server, how):
    """Eight generations open (two running, six queued on the one replica); the stop: SIGTERM to
    the process or to its group, or SIGINT drain, answering each; a second SIGINT answers the
    rest with the single server's JSON 503. No connection goes unanswered, the process exits
    within the drain bound plus 10 s, and no process it started is left."""
    want = one_server.post("/v1/generate", json=LONG).json()
    with fleet("--replicas", "1", "--drain-s", str(DRAIN_S), *flags(model_dir)) as (proc, url):
        threads, results = concurrently(url, [("/v1/generate", LONG)] * 8)
        wait_in_flight(url, 8, results)
        started = processes(proc)
        assert len(engines(proc)) == 1 and len(started) > 3
        signalled = time.monotonic()
        stop(proc, how)
        proc.wait(timeout=DRAIN_S + 10)
        took = time.monotonic() - signalled
        for t in threads:
            t.join(timeout=10)
        rest = proc.stderr.read()
        assert proc.returncode == 0, rest
        assert took < DRAIN_S + 10 and rest.rstrip().endswith("setllm serve: stopped")
        assert len(results) == 8
        if how == "int-twice":
            stopped = (503, {"error": "server stopped before this request finished"})
            assert all(r in ((200, want), stopped) for r in results), results
            assert stopped in results and "second signal: answering" in rest
        else:
            assert results == [(200, want)] * 8
        gone, alive = psutil.wait_procs(started, timeout=5)
        assert not alive, [p.info if hasattr(p, "info") else p.pid for p in alive]


def test_an_idle_fleet_stops_within_10_s_on_sigterm_to_its_group(model_dir):
    with fleet("--replicas", "2", *flags(model_dir)) as (proc, url):
        assert httpx.get(url + "/health").status_code == 200
        started = processes(proc)
        signalled = time.monotonic()
        os.killpg(os.getpgid(proc.pid), signal.SIGTERM)
        proc.wait(timeout=30)
        took = time.monotonic() - signalled
        assert proc.returncode == 0 and took < 10, took
        assert not psutil.wait_procs(started, timeout=5)[1]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def ray_node(log: Path, *args: str, env: dict | None = None):
    """``ray start --block ARGS`` (a Ray node, as a user starts one) until it says it runs; it
    and everything it started are stopped after."""
    ray = str(Path(sys.executable).parent / "ray")
    with open(log, "w") as out:
        node = subprocess.Popen([ray, "start", "--block", "--node-ip-address", "127.0.0.1", "--disable-usage-stats", *args],
                                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "block forever" not in log.read_text():
            assert node.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.25)
        yield node
    finally:
        started = processes(node)
        node.terminate()  # `ray start --block` stops its node on SIGTERM
        kill(psutil.wait_procs(started, timeout=30)[1])


def test_two_ray_nodes_one_replica_each_the_same_bits_routed_by_documents(model_dir, one_server, tmp_path):
    """`ray start --head`, then `ray start --address` (a node of its own resources, here on the
    same machine), then `setllm serve --replicas 2 --ray-address`: a CPU per node and per
    replica puts one replica on each node; answers are the single server's; a set of
    documents goes back to the replica that read it, in any order."""
    port, temp = free_port(), ray_temp_dir()
    head = ["--head", "--port", str(port), "--num-cpus", "1", "--resources", '{"node_a": 1}', "--include-dashboard", "false",
            "--dashboard-port", str(free_port()), "--ray-client-server-port", str(free_port()), "--dashboard-agent-listen-port", "0",
            "--temp-dir", temp.name]
    with temp, ray_node(tmp_path / "head.log", *head):
        token = {"RAY_AUTH_MODE": "token"} if (Path.home() / ".ray" / "auth_token").exists() else {}  # as the head set it up
        with ray_node(tmp_path / "node.log", "--address", f"127.0.0.1:{port}", "--num-cpus", "1", "--resources", '{"node_b": 1}',
                      "--dashboard-agent-listen-port", "0", env=token):
            with fleet("--replicas", "2", "--ray-address", f"127.0.0.1:{port}", *flags(model_dir)) as (proc, url):
                where = {}
                for i in range(4):  # new sets go to the replica holding the fewest documents: both take some
                    docs = [f"Town {i}{j} is on river {j}." for j in range(3)]
                    body = {"documents": docs, "question": "Which river?", "max_new_tokens": 3}
                    r = httpx.post(url + "/v1/answer", json=body, timeout=120)
                    assert (r.status_code, r.json()) == (200, one_server.post("/v1/answer", json=body).json())
                    again = httpx.post(url + "/v1/answer", json={**body, "documents": docs[::-1]}, timeout=120)
                    assert again.json() == r.json() and again.headers[REPLICA_HEADER] == r.headers[REPLICA_HEADER]
                    where[r.headers[REPLICA_HEADER]] = True
                metrics = httpx.get(url + "/metrics").text
                nodes = {line.split('node="')[1].split('"')[0] for line in metrics.splitlines() if line.startswith("setllm_replica_info{")}
                assert len(where) == 2 and len(nodes) == 2, metrics  # two replicas, on two nodes
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=60) == 0


def test_a_signal_while_the_replicas_load_ends_the_start(model_dir):
    """As one server ends at once on a signal while its model loads: the start ends, Ray with it."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "SETLLM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([SRC, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])}
    proc = subprocess.Popen([sys.executable, "-m", "setllm", "serve", "--port", "0", "--replicas", "2", *flags(model_dir)],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + START_S
        while not engines(proc):  # Ray is up, the replicas are loading
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() is not None else "no replica"
            time.sleep(0.1)
        started = processes(proc)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert "listening" not in proc.stderr.read()
        assert not psutil.wait_procs(started, timeout=10)[1]
    finally:
        kill(processes(proc))
        proc.wait()
