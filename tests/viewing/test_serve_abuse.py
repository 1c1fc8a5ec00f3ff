"""The data server (`serve`, and `view`'s) against a hostile client: every malformed request
answered with a status and one log line, nothing outside the folder served, no listings, RFC
9110 ranges, validators, and 200 readers at once beside idle connections within a bound."""

from __future__ import annotations

import io
import os
import pathlib
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from shardwright.viewing import serve
from shardwright.viewing.serve import make_server

DATA = bytes(range(256)) * 40  # 10240 bytes


@pytest.fixture()
def server(tmp_path: pathlib.Path) -> Iterator[tuple[serve.DatasetServer, io.StringIO]]:
    """A dataset folder served at /data/0 (with the client's index at /), its log kept."""
    client, dataset = tmp_path / "client", tmp_path / "dataset"
    (client / "sub").mkdir(parents=True)
    (client / "index.html").write_text("<html>viewer</html>")
    (dataset / "0").mkdir(parents=True)
    (dataset / "info").write_text('{"type": "image"}')
    (dataset / "0" / "0.shard").write_bytes(DATA)
    (dataset / ".shardwright").mkdir()
    (dataset / ".shardwright" / "job.json").write_text('{"secret": 1}')
    (tmp_path / "outside.txt").write_text("private")
    os.symlink("/etc/passwd", dataset / "passwd")
    os.symlink(tmp_path / "outside.txt", dataset / "0" / "outside")
    os.symlink(dataset / "info", dataset / "info-link")  # inside: served
    log = io.StringIO()
    routes = {"/": str(client), "/data/0": str(dataset)}
    running = make_server(routes=routes, port=0, log=log)
    thread = threading.Thread(target=running.serve_forever, daemon=True)
    thread.start()
    yield running, log
    running.shutdown()
    running.server_close()


def _raw(server: serve.DatasetServer, request: bytes, timeout: float = 5) -> bytes:
    """Send bytes as they are (no client library to clean them up); the whole answer."""
    host, port = server.server_address[:2]
    with socket.create_connection((str(host), int(port)), timeout=timeout) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def _get(server: serve.DatasetServer, path: str, **headers: str) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(server.url + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /data/0/info%00.txt HTTP/1.1\r\nHost: x\r\n\r\n", 400),  # NUL, encoded
        (b"GET /data/0/info\x00 HTTP/1.1\r\nHost: x\r\n\r\n", 400),  # NUL, raw
        (b"GET /data/0/%ff%fe HTTP/1.1\r\nHost: x\r\n\r\n", 400),  # not UTF-8
        (b"GET /data/0/..\\..\\outside.txt HTTP/1.1\r\nHost: x\r\n\r\n", 400),  # backslashes
        (b"GARBAGE\r\n\r\n", 400),  # no request line
        (b"GET / HTTP/9.9\r\n\r\n", 505),
        (b"BREW /data/0/info HTTP/1.1\r\nHost: x\r\n\r\n", 501),
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"GET /data/0/info HTTP/1.1\r\nRange: bytes=" + b"9" * 5000 + b"-\r\n\r\n", 416),
    ],
    ids=[
        "nul-encoded",
        "nul-raw",
        "not-utf8",
        "backslash",
        "garbage",
        "version",
        "method",
        "long-line",
        "huge-range",
    ],  # fmt: skip
)
def test_malformed_requests_get_a_status_and_one_log_line(
    server: tuple[serve.DatasetServer, io.StringIO],
    request_bytes: bytes,
    status: int,
    capfd: pytest.CaptureFixture[str],
) -> None:
    running, log = server
    answer = _raw(running, request_bytes)
    assert _status(answer) == status, answer[:200]
    assert b"Content-Length: 0" in answer or status in (414,)
    time.sleep(0.05)
    lines = [line for line in log.getvalue().splitlines() if f'" {status} ' in line]
    assert len(lines) == 1, log.getvalue()
    assert "Traceback" not in log.getvalue() and "Traceback" not in capfd.readouterr().err
    assert _get(running, "/data/0/info")[0] == 200  # and the server goes on


def test_ranges_follow_rfc_9110(server: tuple[serve.DatasetServer, io.StringIO]) -> None:
    running, _ = server
    key = "/data/0/0/0.shard"
    huge = "9" * 5000
    cases = {
        "bytes=0-9": (206, DATA[:10]),
        "bytes=-16": (206, DATA[-16:]),
        f"bytes=-{huge}": (206, DATA),  # a suffix longer than the object: all of it
        f"bytes=100-{huge}": (206, DATA[100:]),
        "bytes = 5-6": (206, DATA[5:7]),
        "items=0-5": (200, DATA),  # an unknown unit is ignored
        "bytes=0-1,5-6": (200, DATA),  # several ranges: the whole object (documented)
        "bytes=20000-": (416, b""),
        f"bytes={huge}-": (416, b""),
        "bytes=abc": (416, b""),
        "bytes=-0": (416, b""),
    }
    for header, (status, body) in cases.items():
        got = _get(running, key, Range=header)
        assert (got[0], got[2]) == (status, body), header[:40]
        if status == 416:
            assert got[1]["Content-Range"] == f"bytes */{len(DATA)}"


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/data/0/../../outside.txt", 404),
        ("/data/0/%2e%2e/%2e%2e/outside.txt", 404),
        ("/data/0/%2E%2E%2F%2E%2E%2Foutside.txt", 404),
        ("/data/0/%252e%252e/outside.txt", 404),  # decoded once: a name, not a step up
        ("/data/0/passwd", 403),  # a symbolic link inside, to a file outside
        ("/data/0/0/outside", 403),
        ("/data/0/.shardwright/job.json", 403),
        ("/data/0/%2eshardwright/job.json", 403),
        ("/data/0/", 404),  # a folder: no listing
        ("/data/0/0/", 404),
        ("/sub/", 404),
        ("/data/1/info", 404),
        ("/", 200),  # a folder with index.html: that file
        ("/data/0/info-link", 200),  # a link that stays inside
    ],
)
def test_nothing_outside_the_folder_no_listings_no_records(
    server: tuple[serve.DatasetServer, io.StringIO], path: str, status: int
) -> None:
    got_status, _, body = _get(server[0], path)
    assert got_status == status
    assert b"private" not in body and b"root:" not in body and b"secret" not in body
    if status == 200:
        assert body in (b"<html>viewer</html>", b'{"type": "image"}')


def test_validators_spare_a_refetch(server: tuple[serve.DatasetServer, io.StringIO]) -> None:
    running, _ = server
    status, headers, _ = _get(running, "/data/0/info")
    tag, modified = headers["ETag"], headers["Last-Modified"]
    assert status == 200 and tag.startswith('"')
    assert _get(running, "/data/0/info", **{"If-None-Match": tag})[0] == 304
    assert _get(running, "/data/0/info", **{"If-None-Match": f'"x", W/{tag}'})[0] == 304
    assert _get(running, "/data/0/info", **{"If-None-Match": '"other"'})[0] == 200
    assert _get(running, "/data/0/info", **{"If-Modified-Since": modified})[0] == 304
    assert _get(running, "/data/0/info", **{"If-Modified-Since": "not a date"})[0] == 200
    # If-None-Match decides where both are given (RFC 9110 13.1.3).
    both = {"If-None-Match": '"other"', "If-Modified-Since": modified}
    assert _get(running, "/data/0/info", **both)[0] == 200


def test_many_readers_beside_idle_connections_are_served_promptly(
    server: tuple[serve.DatasetServer, io.StringIO],
) -> None:
    """50 idle keep-alive connections, then 200 readers at once (each its own connection):
    every read answered, the slowest within 3 s (with Python's backlog of 5 some took 1-60 s
    or timed out)."""
    running, _ = server
    host, port = str(running.server_address[0]), int(running.server_address[1])
    idle = []
    for _ in range(50):
        sock = socket.create_connection((host, port), timeout=10)
        sock.sendall(b"GET /data/0/info HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        idle.append(sock)  # left open, saying nothing more

    def read(i: int) -> float:
        started = time.monotonic()
        path = "/data/0/info" if i % 2 else "/data/0/0/0.shard"
        status, _, body = _get(running, path, Range="bytes=0-99")
        assert status == 206 and len(body) == min(100, 17 if i % 2 else 100)
        return time.monotonic() - started

    try:
        with ThreadPoolExecutor(200) as pool:
            latencies = list(pool.map(read, range(200)))
    finally:
        for sock in idle:
            sock.close()
    assert len(latencies) == 200 and max(latencies) < 3.0, sorted(latencies)[-5:]


def test_the_listen_queue_and_the_pool_are_sized_for_readers() -> None:
    assert serve.DatasetServer.request_queue_size >= 128
    assert serve.MAX_THREADS >= 128 and serve.IDLE_TIMEOUT_S <= 30


def test_a_silent_connection_does_not_hold_up_the_one_after_it(
    server: tuple[serve.DatasetServer, io.StringIO],
) -> None:
    """Connections that arrive together each get a thread: the first saying nothing (held by
    its thread until the idle timeout) must not keep the second waiting."""
    running, _ = server
    host, port = str(running.server_address[0]), int(running.server_address[1])
    for _ in range(5):
        silent = socket.create_connection((host, port), timeout=10)
        talking = socket.create_connection((host, port), timeout=10)
        try:
            started = time.monotonic()
            talking.sendall(b"GET /data/0/info HTTP/1.1\r\nHost: x\r\n\r\n")
            assert talking.recv(4096).startswith(b"HTTP/1.1 200")
            assert time.monotonic() - started < 2.0
        finally:
            silent.close()
            talking.close()
