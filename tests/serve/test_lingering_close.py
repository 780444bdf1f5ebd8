"""A body past the bound, over a raw loopback socket: its 413 reaches the client whole every
time (the server half-closes and drops what still arrives, instead of closing with the body
unread, which resets the connection and can drop the answer), as does the 400 for a request
h11 cannot parse; the connection is then closed: by the client, or by the server at its time
or byte bound, or at once when it stops. Connections closed with their request read whole
close at once, as before."""

from __future__ import annotations

import errno
import json
import socket
import time
import urllib.parse

import pytest
from serve_helpers import running

from setllm.serve import guard, server

TRIES = 20
BODY_BYTES = 8 << 20  # eight times the bound: most of it still on its way when the 413 goes out
CHUNK = 1 << 16


@pytest.fixture(scope="module")
def served(lm):
    with running(lm, batch_check=False) as (srv, _, url):
        address = urllib.parse.urlsplit(url)
        yield srv, (address.hostname, address.port)


def _head(framing: str) -> bytes:
    length = f"Content-Length: {BODY_BYTES}" if framing == "content-length" else "Transfer-Encoding: chunked"
    return f"POST /v1/choose HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{length}\r\n\r\n".encode()


def _body(framing: str) -> bytes:
    if framing == "content-length":
        return b" " * BODY_BYTES
    frame = f"{CHUNK:x}\r\n".encode() + b" " * CHUNK + b"\r\n"
    return frame * (BODY_BYTES // CHUNK) + b"0\r\n\r\n"


def _send_then_read(sock: socket.socket, data: bytes) -> tuple[bytes, str | None]:
    """What a plain client does: write the whole request, then read the answer until the
    server's FIN. ``(answer, None)``, or what the first reset or broken pipe cut short."""
    try:
        sock.sendall(data)
    except OSError as e:  # the server stopped reading; its answer may still be readable
        cut = f"writing: {type(e).__name__}"
    else:
        cut = None
    answer = b""
    try:
        while chunk := sock.recv(1 << 16):
            answer += chunk
    except OSError as e:
        return answer, f"reading: {type(e).__name__}"
    return answer, cut


def _is_whole_413(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = dict(line.lower().split(b": ", 1) for line in lines[1:])
    return (lines[0].startswith(b"HTTP/1.1 413 ") and headers.get(b"connection") == b"close"
            and len(body) == int(headers[b"content-length"]) and "at most" in json.loads(body)["error"])


def _wait_until_closed(srv, within: float) -> float:
    """Seconds until the server holds no connection; fails past ``within``."""
    started = time.monotonic()
    while srv.server_state.connections:
        assert time.monotonic() - started < within, f"{len(srv.server_state.connections)} connection(s) still open"
        time.sleep(0.01)
    return time.monotonic() - started


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_every_413_for_a_body_past_the_bound_reaches_its_client_whole(served, framing):
    srv, address = served
    request = _head(framing) + _body(framing)
    failures = []
    for _ in range(TRIES):
        with socket.create_connection(address, timeout=10) as sock:
            answer, cut = _send_then_read(sock, request)
        whole = _is_whole_413(answer)  # read until b"": the server half-closed after its answer
        if cut is not None or not whole:
            failures.append(f"{cut}, 413 {'whole' if whole else 'lost'}")
    assert not failures, f"{len(failures)} of {TRIES} answers lost: {failures}"
    _wait_until_closed(srv, within=5)  # each client closed after its answer: so did the server


def test_a_request_h11_cannot_parse_gets_its_400_whole(served):
    srv, address = served
    with socket.create_connection(address, timeout=10) as sock:
        answer, cut = _send_then_read(sock, b"POST /v1/choose HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x\r\n\r\n" + _body("content-length"))
    assert cut is None and answer.startswith(b"HTTP/1.1 400 ") and answer.endswith(b"Invalid HTTP request received.")
    _wait_until_closed(srv, within=5)


def test_a_client_that_stays_is_closed_at_the_time_bound(served, monkeypatch):
    srv, address = served
    monkeypatch.setattr(server, "LINGER_S", 0.3)
    with socket.create_connection(address, timeout=10) as sock:
        answer, cut = _send_then_read(sock, _head("content-length") + b" " * (2 * guard.MAX_BODY_BYTES))
        assert cut is None and _is_whole_413(answer)
        _wait_until_closed(srv, within=3)  # the socket stays open on this side: the server closes its own


def test_a_client_that_keeps_sending_is_closed_at_the_byte_bound(served, monkeypatch):
    srv, address = served
    monkeypatch.setattr(server, "LINGER_S", 60.0)
    monkeypatch.setattr(server, "LINGER_BYTES", 1 << 20)
    with socket.create_connection(address, timeout=10) as sock:
        _send_then_read(sock, _head("content-length") + _body("content-length"))  # cut short once the server has dropped 1 MiB
        _wait_until_closed(srv, within=5)


def test_a_request_read_whole_is_closed_at_once(served, monkeypatch):
    srv, address = served
    monkeypatch.setattr(server, "LINGER_S", 60.0)
    body = json.dumps({"question": "Which city?", "options": ["Paris", "Rome"]}).encode()
    head = f"POST /v1/choose HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    with socket.create_connection(address, timeout=10) as sock:
        answer, cut = _send_then_read(sock, head.encode() + body + head.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n").encode() + body)
        assert cut is None and answer.count(b"HTTP/1.1 200 ") == 2  # keep-alive, then the close the client asked for
        _wait_until_closed(srv, within=2)  # with the socket still open on this side: no lingering


def test_a_client_that_reset_before_the_half_close_is_closed(served, monkeypatch):
    """Its reset can reach the server between the answer and the FIN (a client that leaves
    once it has read the status line): that shutdown() fails, and the server just closes."""
    srv, address = served

    def reset(sock, how):
        raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")

    monkeypatch.setattr(socket.socket, "shutdown", reset)
    monkeypatch.setattr(server, "LINGER_S", 60.0)
    with socket.create_connection(address, timeout=10) as sock:
        answer, cut = _send_then_read(sock, _head("content-length"))
        assert _is_whole_413(answer)
        _wait_until_closed(srv, within=2)  # with the socket still open on this side


def test_a_stop_does_not_wait_for_a_lingering_connection(lm, monkeypatch):
    monkeypatch.setattr(server, "LINGER_S", 60.0)
    with running(lm, batch_check=False) as (srv, thread, url):
        address = urllib.parse.urlsplit(url)
        with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
            answer, cut = _send_then_read(sock, _head("content-length") + b" " * (2 * guard.MAX_BODY_BYTES))
            assert cut is None and _is_whole_413(answer) and srv.server_state.connections  # lingering
            srv.should_exit = True
            thread.join(timeout=5)
            assert not thread.is_alive() and not srv.server_state.connections
