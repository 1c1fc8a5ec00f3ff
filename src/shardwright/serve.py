"""A local static file server for Neuroglancer: CORS headers and HTTP Range requests.

Neuroglancer reads sharded data with Range requests and from another origin; Python's
`http.server` does neither, so this handler adds both.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class RangeCORSHandler(SimpleHTTPRequestHandler):
    """Static files with `Access-Control-Allow-Origin: *` and single byte ranges."""

    def end_headers(self) -> None:
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Allow-Headers", "Range")
        self.send_header("Access-Control-Expose-Headers", "Content-Range, Content-Length")
        self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def do_OPTIONS(self) -> None:  # noqa: N802 - http.server naming
        self.send_response(HTTPStatus.NO_CONTENT)
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        header = self.headers.get("Range")
        path = self.translate_path(self.path)
        if header is None or not os.path.isfile(path):
            super().do_GET()
            return
        match = _RANGE.match(header.strip())
        size = os.path.getsize(path)
        if match is None or match.groups() == ("", ""):
            self.send_error(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, "unsupported Range")
            return
        first, last = match.groups()
        if first == "":  # suffix range: the last N bytes
            start, end = max(0, size - int(last)), size - 1
        else:
            start, end = int(first), min(int(last), size - 1) if last else size - 1
        if start >= size or start > end:
            self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            self.send_header("Content-Range", f"bytes */{size}")
            self.end_headers()
            return
        with open(path, "rb") as f:
            f.seek(start)
            body = f.read(end - start + 1)
        self.send_response(HTTPStatus.PARTIAL_CONTENT)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def make_server(directory: str, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    handler = functools.partial(RangeCORSHandler, directory=os.path.abspath(directory))
    return ThreadingHTTPServer((host, port), handler)


def serve(directory: str, host: str = "127.0.0.1", port: int = 8000) -> None:
    server = make_server(directory, host, port)
    url = f"http://{host}:{server.server_address[1]}"
    print(f"serving {os.path.abspath(directory)} at {url} (Ctrl-C to stop)", file=sys.stderr)
    print(f"neuroglancer source: precomputed://{url}/<dataset>", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
