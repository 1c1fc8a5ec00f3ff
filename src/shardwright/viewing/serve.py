"""A local HTTP server for Neuroglancer and other readers of our datasets, made to hold
under many parallel readers and hostile requests.

Neuroglancer reads sharded data with many small Range requests (suffix ranges among them, for
a zarr3 index at the end) from another origin, so the server speaks HTTP/1.1 with keep-alive
(one connection carries many chunk reads), answers Range and HEAD with exact lengths, adds
CORS headers, listens on loopback unless told otherwise, and stops cleanly (`shutdown` from
any thread, Ctrl-C or SIGTERM in `serve`).

What it refuses to be (each a test in tests/viewing/test_serve_abuse.py):
- a queue of 5: the listen backlog holds `BACKLOG` connections, so 200 readers at once are
  accepted at once rather than retried after a second;
- a thread per connection without limit: connections are served by a pool of at most
  `MAX_THREADS` threads (an open connection holds its thread; one idle for `IDLE_TIMEOUT_S`
  is closed and frees it; more connections wait in the queue);
- a source of tracebacks: a malformed request (a NUL byte, an undecodable path, a Range of
  5,000 digits) gets 400 or 416 and one log line;
- a file browser: no directory listings (a folder with `index.html` serves that file), nothing
  under `.shardwright/` (a job's records), and no file whose real path (symlinks resolved)
  leaves the folder served;
- a refetch: `ETag` and `Last-Modified` on every file; `If-None-Match` / `If-Modified-Since`
  answer 304.
Range follows RFC 9110: one `bytes` range is answered 206; a range unit other than bytes is
ignored (200, the whole object); several ranges are answered with the whole object (200; a
multipart answer would cost readers more than it saves on chunk-sized objects); an invalid or
unsatisfiable bytes range gets 416.

It serves several folders under URL prefixes (`routes`: "/" → a folder, "/data/0" → another),
which is how `view` puts the Neuroglancer client and the datasets behind one origin.
"""

from __future__ import annotations

import contextlib
import email.utils
import mimetypes
import os
import posixpath
import queue
import re
import signal
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, BinaryIO

from shardwright.errors import OptionError

BACKLOG = 256  # connections the kernel queues before they are accepted
MAX_THREADS = 256  # connections served at once (a browser opens 6 per origin); more wait
IDLE_TIMEOUT_S = 10.0  # a keep-alive connection silent this long is closed, its thread freed
CONTROL_FOLDER = ".shardwright"  # a job's own records: never served
_BYTES_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
_MAX_DIGITS = 18  # a byte position longer than this lies beyond any file
_BLOCK = 1 << 20


class DatasetServer(HTTPServer):
    """Folders served under URL prefixes; `log` (a text stream or None) gets one line per
    request. Requests run on a bounded pool; `server_close` also closes open connections, so
    that idle keep-alive connections never hold a shutdown up."""

    request_queue_size = BACKLOG
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], routes: Mapping[str, str], log: Any | None = None
    ) -> None:
        self.routes = sorted(
            ((_prefix(p), os.path.realpath(d)) for p, d in routes.items()),
            key=lambda route: -len(route[0]),
        )
        self.log = log
        self._waiting: queue.SimpleQueue[tuple[Any, Any] | None] = queue.SimpleQueue()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._threads = self._busy = self._queued = 0
        super().__init__(address, DatasetRequestHandler)

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), int(self.server_address[1])
        shown = "127.0.0.1" if host in ("", "0.0.0.0") else host
        return f"http://{shown}:{port}"

    def process_request(self, request: Any, client_address: Any) -> None:
        """Queue the connection for the pool; a thread is added unless one is free for it
        (busy and queued counted: a connection is held by its thread while it stays open), up
        to MAX_THREADS (daemon threads: an unclosed server never holds its process up)."""
        with self._lock:
            self._open.add(request)
            if self._busy + self._queued >= self._threads and self._threads < MAX_THREADS:
                self._threads += 1
                threading.Thread(target=self._work, name="shardwright-serve", daemon=True).start()
            self._queued += 1
        self._waiting.put((request, client_address))

    def _work(self) -> None:
        while (item := self._waiting.get()) is not None:
            request, client_address = item
            with self._lock:
                self._queued -= 1
                self._busy += 1
            try:
                self.finish_request(request, client_address)
            except Exception as exc:  # noqa: BLE001 - one line, never a traceback on stderr
                self.say(f"{client_address[0]} connection ended: {type(exc).__name__}: {exc}")
            finally:
                with self._lock:
                    self._busy -= 1
                    self._open.discard(request)
                self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.say(f"{client_address[0]} connection ended with an error")

    def server_close(self) -> None:
        super().server_close()
        with self._lock:
            for connection in list(self._open):
                with contextlib.suppress(OSError):  # wakes a thread waiting to read
                    connection.shutdown(socket.SHUT_RDWR)
            for _ in range(self._threads):
                self._waiting.put(None)

    def say(self, line: str) -> None:
        if self.log is not None:
            self.log.write(f"{time.strftime('%H:%M:%S')} {line}\n")
            self.log.flush()


class DatasetRequestHandler(BaseHTTPRequestHandler):
    """Files with CORS, single byte ranges (suffix ranges included), validators and
    keep-alive; everything else answered with a status, never a traceback."""

    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_S
    # Headers and body go out in two writes on a kept-alive connection: with Nagle's
    # algorithm the second waited for the reader's delayed ACK, 40 ms a small read.
    disable_nagle_algorithm = True
    server: DatasetServer

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (TimeoutError, ConnectionError):
            self.close_connection = True

    def resolve(self, url_path: str) -> tuple[HTTPStatus, str]:
        """(OK, the file) a URL path names under the longest matching route, or the status
        that refuses it: 400 for a malformed path, 403 for what is never served, 404."""
        try:
            path = urllib.parse.unquote(urllib.parse.urlsplit(url_path).path, errors="strict")
        except (UnicodeDecodeError, ValueError):
            return HTTPStatus.BAD_REQUEST, ""
        if "\x00" in path or "\\" in path:
            return HTTPStatus.BAD_REQUEST, ""
        normal = posixpath.normpath(path)
        for prefix, directory in self.server.routes:
            if normal == prefix.rstrip("/") or normal.startswith(prefix):
                parts = [p for p in normal[len(prefix) :].split("/") if p not in ("", ".", "..")]
                if CONTROL_FOLDER in parts:
                    return HTTPStatus.FORBIDDEN, ""
                target = os.path.realpath(os.path.join(directory, *parts))
                if target != directory and not target.startswith(directory + os.sep):
                    return HTTPStatus.FORBIDDEN, ""  # a symbolic link out of the folder
                if os.path.isdir(target):
                    index = os.path.join(target, "index.html")
                    return (HTTPStatus.OK, index) if os.path.isfile(index) else _NOT_FOUND
                return (HTTPStatus.OK, target) if os.path.isfile(target) else _NOT_FOUND
        return _NOT_FOUND

    def end_headers(self) -> None:
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Allow-Headers", "Range, If-None-Match")
        self.send_header(
            "Access-Control-Expose-Headers",
            "Content-Range, Content-Length, Accept-Ranges, ETag, Last-Modified",
        )
        self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def do_OPTIONS(self) -> None:  # noqa: N802 - http.server naming
        self.send_response(HTTPStatus.NO_CONTENT)
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        self._get(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._get(body=False)

    def _get(self, body: bool) -> None:
        status, path = self.resolve(self.path)
        if status != HTTPStatus.OK:
            self._empty(status, close=status == HTTPStatus.BAD_REQUEST)
            return
        try:
            source = open(path, "rb")  # noqa: SIM115 - closed below
        except OSError:
            self._empty(HTTPStatus.NOT_FOUND)
            return
        with source:
            stat = os.fstat(source.fileno())
            size, tag = stat.st_size, f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"'
            if self._not_modified(tag, stat.st_mtime):
                self.send_response(HTTPStatus.NOT_MODIFIED)
                self.send_header("ETag", tag)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            span = _byte_range(self.headers.get("Range"), size)
            if isinstance(span, str):  # "unsatisfiable"
                self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start, end = (0, size - 1) if span is None else span
            self.send_response(HTTPStatus.OK if span is None else HTTPStatus.PARTIAL_CONTENT)
            self.send_header("Content-Type", _content_type(path))
            if span is not None:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.send_header("Content-Length", str(end - start + 1))
            self.send_header("ETag", tag)
            self.send_header("Last-Modified", email.utils.formatdate(stat.st_mtime, usegmt=True))
            self.end_headers()
            if body:
                _copy_range(source, self.wfile, start, end - start + 1)

    def _not_modified(self, tag: str, mtime: float) -> bool:
        """RFC 9110 13.1.2-3: If-None-Match decides where given, else If-Modified-Since."""
        match = self.headers.get("If-None-Match")
        if match is not None:
            tags = [t.strip().removeprefix("W/") for t in match.split(",")]
            return "*" in tags or tag in tags
        since = self.headers.get("If-Modified-Since")
        if since is None:
            return False
        try:
            when = email.utils.parsedate_to_datetime(since).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return False  # an unreadable date is ignored
        return int(mtime) <= when

    def _empty(self, status: int, *, close: bool = False, message: str | None = None) -> None:
        """A status with no body; `close`: the connection ends after it."""
        self.send_response(status, message)
        self.send_header("Content-Length", "0")
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The request line or headers could not be parsed: a status and one log line (also
        where no HTTP version was read, which http.server would answer with nothing)."""
        self.close_connection = True
        self.request_version = self.protocol_version
        with contextlib.suppress(OSError):
            self._empty(code, close=True, message=message)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        self.server.say(f"{self.address_string()} {format % args}")


_NOT_FOUND = (HTTPStatus.NOT_FOUND, "")


def _prefix(route: str) -> str:
    """'/', '/data/0/' — a route as the handler compares it: leading and trailing slash."""
    inner = route.strip("/")
    return f"/{inner}/" if inner else "/"


def _content_type(path: str) -> str:
    kind, _ = mimetypes.guess_type(path)
    return kind or "application/octet-stream"


def _byte_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """(first, last) byte of a single `bytes=` range within `size`; None where the whole
    object is the answer (no Range, another unit, several ranges); "unsatisfiable" (416)."""
    if header is None:
        return None
    spec = header.strip()
    unit, _, ranges = spec.partition("=")
    if unit.strip().lower() != "bytes" or "," in ranges:
        return None  # RFC 9110 14.2: an unknown unit is ignored; several ranges: the whole
    match = _BYTES_RANGE.match(spec.replace(" ", "").lower())
    if match is None or match.groups() == ("", "") or size == 0:
        return "unsatisfiable"
    first, last = match.groups()
    if first == "":  # suffix range: the last N bytes (all of them where N is larger)
        if len(last.lstrip("0")) == 0:
            return "unsatisfiable"
        count = size if len(last) > _MAX_DIGITS else min(int(last), size)
        return size - count, size - 1
    if len(first) > _MAX_DIGITS or int(first) >= size:
        return "unsatisfiable"
    start = int(first)
    end = size - 1 if last == "" or len(last) > _MAX_DIGITS else min(int(last), size - 1)
    return (start, end) if start <= end else "unsatisfiable"


def _copy_range(source: BinaryIO, out: Any, start: int, length: int) -> None:
    source.seek(start)
    while length > 0:
        block = source.read(min(_BLOCK, length))
        if not block:
            break
        out.write(block)
        length -= len(block)


def make_server(
    directory: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    routes: Mapping[str, str] | None = None,
    log: Any | None = None,
) -> DatasetServer:
    """A server of `directory` at "/" (or of `routes`), not yet serving."""
    if routes is None:
        if directory is None:
            raise OptionError("give a directory or routes to serve")
        routes = {"/": directory}
    for directory_served in routes.values():
        if not os.path.isdir(directory_served):
            raise FileNotFoundError(f"{directory_served}: no such folder to serve")
    return DatasetServer((host, port), routes, log)


def run_until_stopped(server: DatasetServer) -> None:
    """Serve until Ctrl-C or SIGTERM, then close every connection and the socket."""

    def stop(*_: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def serve(directory: str, host: str = "127.0.0.1", port: int = 8000, log: bool = False) -> None:
    server = make_server(directory, host, port, log=sys.stderr if log else None)
    print(f"serving {os.path.abspath(directory)} at {server.url} (Ctrl-C to stop)", file=sys.stderr)
    print(f"neuroglancer source: precomputed://{server.url}/<dataset>", file=sys.stderr)
    run_until_stopped(server)
