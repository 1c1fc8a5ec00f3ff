"""A local HTTP server for Neuroglancer and other readers of our datasets.

Neuroglancer reads sharded data with many small Range requests (suffix ranges among them, for
a zarr3 index at the end) from another origin, so the server speaks HTTP/1.1 with keep-alive
(one connection carries many chunk reads), answers Range and HEAD with exact lengths, adds
CORS headers, serves each request on its own thread, listens on loopback unless told
otherwise, and stops cleanly (`shutdown` from any thread, Ctrl-C or SIGTERM in `serve`).

It serves several folders under URL prefixes (`routes`: "/" → a folder, "/data/0" → another),
which is how `view` puts the Neuroglancer client and the datasets behind one origin.
"""

from __future__ import annotations

import os
import posixpath
import re
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Mapping
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, BinaryIO

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
_BLOCK = 1 << 20


class DatasetServer(ThreadingHTTPServer):
    """Folders served under URL prefixes; `log` (a text stream or None) gets one line per
    request."""

    daemon_threads = True
    block_on_close = False

    def __init__(
        self, address: tuple[str, int], routes: Mapping[str, str], log: Any | None = None
    ) -> None:
        self.routes = sorted(
            ((_prefix(p), os.path.abspath(d)) for p, d in routes.items()),
            key=lambda route: -len(route[0]),
        )
        self.log = log
        super().__init__(address, DatasetRequestHandler)

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), int(self.server_address[1])
        shown = "127.0.0.1" if host in ("", "0.0.0.0") else host
        return f"http://{shown}:{port}"


class DatasetRequestHandler(SimpleHTTPRequestHandler):
    """Static files with CORS, single byte ranges (suffix ranges included) and keep-alive."""

    protocol_version = "HTTP/1.1"
    server: DatasetServer

    def translate_path(self, path: str) -> str:
        """The file a URL path names under the longest matching route; never outside it."""
        path = urllib.parse.unquote(urllib.parse.urlsplit(path).path)
        normal = posixpath.normpath(path)
        for prefix, directory in self.server.routes:
            if normal == prefix.rstrip("/") or normal.startswith(prefix):
                rest = normal[len(prefix) :].lstrip("/")
                parts = [p for p in rest.split("/") if p not in ("", ".", "..")]
                target = os.path.join(directory, *parts)
                return target + ("/" if path.endswith("/") and parts else "")
        return os.path.join(os.sep, "nonexistent-route")

    def end_headers(self) -> None:
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Allow-Headers", "Range")
        self.send_header(
            "Access-Control-Expose-Headers", "Content-Range, Content-Length, Accept-Ranges"
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
        header = self.headers.get("Range")
        path = self.translate_path(self.path)
        if header is None or not os.path.isfile(path):
            (super().do_GET if body else super().do_HEAD)()
            return
        size = os.path.getsize(path)
        span = _byte_range(header, size)
        if span is None:
            self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        start, end = span
        self.send_response(HTTPStatus.PARTIAL_CONTENT)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        if body:
            with open(path, "rb") as f:
                _copy_range(f, self.wfile, start, end - start + 1)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        log = self.server.log
        if log is not None:
            stamp = time.strftime("%H:%M:%S")
            log.write(f"{stamp} {self.address_string()} {format % args}\n")
            log.flush()


def _prefix(route: str) -> str:
    """'/', '/data/0/' — a route as the handler compares it: leading and trailing slash."""
    inner = route.strip("/")
    return f"/{inner}/" if inner else "/"


def _byte_range(header: str, size: int) -> tuple[int, int] | None:
    """(first, last) byte of one `bytes=` range within `size`, or None if unsatisfiable or not
    a single range this server serves."""
    match = _RANGE.match(header.strip())
    if match is None or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if first == "":  # suffix range: the last N bytes
        if int(last) == 0 or size == 0:
            return None
        return max(0, size - int(last)), size - 1
    start = int(first)
    end = min(int(last), size - 1) if last else size - 1
    return (start, end) if start < size and start <= end else None


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
            raise ValueError("give a directory or routes to serve")
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
