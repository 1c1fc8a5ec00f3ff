"""Real object-store endpoints on 127.0.0.1 for tests: moto's S3 server, the GCS emulator, and
a seeded fault-injecting HTTP proxy to put between a client and either of them."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import re
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"  # before gcsfs is imported
for _name, _value in (
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_DEFAULT_REGION", "us-east-1"),
):
    os.environ.setdefault(_name, _value)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"

    def options(self, endpoint: str | None = None) -> dict[str, Any]:
        return {"client_kwargs": {"endpoint_url": endpoint or self.endpoint}}

    def make_bucket(self, name: str) -> None:
        import s3fs

        fs = s3fs.S3FileSystem(**self.options(), skip_instance_cache=True)
        if not fs.exists(name):
            fs.mkdir(name)

    def stop(self) -> None:
        self._server.stop()


class GcsServer:
    def __init__(self) -> None:
        from gcp_storage_emulator.server import create_server

        port = free_port()
        self._server = create_server("127.0.0.1", port, in_memory=True)
        self._server.start()
        self.endpoint = f"http://127.0.0.1:{port}"
        # What TensorStore's gcs driver (and gs:// sources, which read through it) talk to.
        self._shim = FaultyProxy(self.endpoint, fault_rate=0.0, gcs_conformance=True)
        self.conformant_endpoint = self._shim.endpoint

    def options(self, endpoint: str | None = None) -> dict[str, Any]:
        return {"endpoint_url": endpoint or self.endpoint, "token": "anon", "project": "test"}

    def make_bucket(self, name: str) -> None:
        import gcsfs

        fs = gcsfs.GCSFileSystem(**self.options(), skip_instance_cache=True)
        if not fs.exists(name):
            fs.mkdir(name)

    def stop(self) -> None:
        self._shim.stop()
        self._server.stop()


def _public_object(path: str) -> tuple[str, str] | None:
    """The bucket and object of a read at a public object URL (`/<bucket>/<object>`), or None
    for the JSON API's paths."""
    plain = path.split("?", 1)[0]
    if plain.startswith(("/storage/", "/upload/", "/download/", "/b/", "/batch/")):
        return None
    parts = plain.lstrip("/").split("/", 1)
    if len(parts) < 2 or not parts[1]:
        return None
    return parts[0], urllib.parse.unquote(parts[1])


class FaultyProxy:
    """Forwards HTTP requests to `upstream`, failing a seeded share of them on purpose:
    a 503, a connection reset before any response, or a stall before forwarding.

    `gcs_conformance` adds four things real GCS does and the emulator does not: the
    `x-goog-generation` header on media reads (TensorStore's sharded readers make conditional
    reads with it), suffix ranges (`bytes=-N`, how TensorStore reads a shard index stored at
    the end), uploads with `ifGenerationMatch=N` that fail with 412 unless the object is at
    generation N (N = 0: absent; how a job creates its lease exclusively and replaces an
    object only if unchanged; the emulator ignores the parameter), and CORS as the bucket's
    `cors` configuration allows it (preflights answered, `Access-Control-Allow-Origin` on
    reads: what a browser reading a public bucket, as Neuroglancer does, needs)."""

    def __init__(
        self,
        upstream: str,
        fault_rate: float = 0.15,
        seed: int = 1,
        stall_seconds: float = 0.3,
        deny: tuple[str, ...] = (),
        spare: tuple[str, ...] = (),
        gcs_conformance: bool = False,
    ):
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream_url = upstream
        self.upstream = (host, int(port))
        self.random = random.Random(seed)
        self.fault_rate = fault_rate
        self.stall_seconds = stall_seconds
        self.counts = {"requests": 0, "503": 0, "reset": 0, "stall": 0}
        self.deny = deny  # HTTP methods answered 403 AccessDenied (bad keys, read-only bucket)
        self.log: list[str] = []  # "METHOD path?query" of every request
        self.spare = spare  # requests whose path holds one of these are never faulted
        self.gcs_conformance = gcs_conformance
        self._lock = threading.Lock()
        self._create_lock = threading.Lock()  # existence check + upload, as one step
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                proxy.log.append(f"{self.command} {self.path}")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.command in proxy.deny:
                    gcs_api = self.path.startswith(("/storage/", "/upload/", "/download/"))
                    if gcs_api:  # the JSON API's error body
                        payload = json.dumps(
                            {"error": {"code": 403, "message": "Access denied.",
                                       "errors": [{"reason": "forbidden"}]}}
                        ).encode()  # fmt: skip
                    else:
                        payload = (
                            b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message>"
                            b"</Error>"
                        )
                    self.send_response(403)
                    self.send_header(
                        "Content-Type", "application/json" if gcs_api else "application/xml"
                    )
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    return
                spared = any(part in self.path.split("?")[0] for part in proxy.spare)
                fault = None if spared else proxy._draw()
                if fault == "reset":
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                    )
                    self.connection.close()
                    self.close_connection = True
                    return
                if fault == "503":
                    payload = b"<Error><Code>SlowDown</Code><Message>injected</Message></Error>"
                    self.send_response(503)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if fault == "stall":
                    time.sleep(proxy.stall_seconds)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = f"{proxy.upstream[0]}:{proxy.upstream[1]}"
                extra: dict[str, str] = {}
                suffix = None
                media = "alt=media" in self.path or _public_object(self.path) is not None
                if proxy.gcs_conformance and self.command == "GET" and media:
                    extra, suffix = proxy._gcs_media_fixes(self.path, headers)
                # An upload's precondition (checked at each request of a resumable upload, whose
                # session URL keeps the query it began with), checked and the upload forwarded
                # as one step.
                wanted = (
                    re.search(r"[?&]ifGenerationMatch=(\d+)", self.path)
                    if proxy.gcs_conformance and self.command == "POST"
                    else None
                )
                with proxy._create_lock if wanted else contextlib.nullcontext():
                    current = proxy._gcs_generation(self.path, body, headers) if wanted else None
                    if wanted and (current or "0") != wanted.group(1):
                        payload = json.dumps(
                            {"error": {"code": 412, "message": "conditionNotMet",
                                       "errors": [{"reason": "conditionNotMet"}]}}
                        ).encode()  # fmt: skip
                        self.send_response(412)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(payload)))
                        self.end_headers()
                        self.wfile.write(payload)
                        return
                    status, response_headers, data = proxy._forward(
                        self.command, self.path, body, headers
                    )
                if proxy.gcs_conformance and "Origin" in self.headers:
                    extra |= proxy._gcs_cors(self.path, self.headers["Origin"], self.command)
                if suffix is not None and status == 200:
                    start = max(len(data) - suffix, 0)
                    extra["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                    data, status = data[start:], 206
                self.send_response(status)
                for key, value in response_headers:
                    if key.lower() == "location":  # resumable upload sessions: keep them here
                        value = value.replace(proxy.upstream_url, proxy.endpoint)
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                for key, value in extra.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _handle  # noqa: N815

            def do_OPTIONS(self) -> None:  # noqa: N802 - a CORS preflight, as GCS answers it
                method = self.headers.get("Access-Control-Request-Method", "GET")
                allowed = proxy._gcs_cors(self.path, self.headers.get("Origin", ""), method)
                if allowed:
                    requested = self.headers.get("Access-Control-Request-Headers")
                    allowed["Access-Control-Allow-Methods"] = method
                    if requested:
                        allowed["Access-Control-Allow-Headers"] = requested
                self.send_response(200 if allowed and proxy.gcs_conformance else 403)
                for key, value in allowed.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _forward(
        self, method: str, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            conn.close()

    def _gcs_media_fixes(
        self, path: str, headers: dict[str, str]
    ) -> tuple[dict[str, str], int | None]:
        """The object's generation headers, and a suffix range taken over (the emulator would
        ignore it): returns (headers to add, suffix length or None)."""
        # gcsfs reads media from /download/storage/v1/...; metadata lives at /storage/v1/...;
        # a browser reads a public object at /<bucket>/<object>.
        public = _public_object(path)
        if public is not None:
            bucket, key = public
            metadata_path = f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(key, safe='')}"
        else:
            metadata_path = path.removeprefix("/download").replace("alt=media", "alt=json")
        plain = {k: v for k, v in headers.items() if k.lower() != "range"}
        status, _, data = self._forward("GET", metadata_path, b"", plain)
        extra = {}
        if status == 200:
            metadata = json.loads(data)
            extra = {
                "x-goog-generation": str(metadata["generation"]),
                "x-goog-metageneration": str(metadata.get("metageneration", 1)),
            }
        suffix = None
        match = re.fullmatch(r"bytes=-(\d+)", headers.get("Range", headers.get("range", "")))
        if match:
            suffix = int(match.group(1))
            for key in ("Range", "range"):
                headers.pop(key, None)
        return extra, suffix

    def _gcs_cors(self, path: str, origin: str, method: str) -> dict[str, str]:
        """The CORS headers the bucket's `cors` configuration gives a request from `origin`
        (none where no rule allows it)."""
        public = _public_object(path)
        named = re.match(r"/(?:download/)?storage/v1/b/([^/?]+)", path)
        bucket = public[0] if public is not None else named.group(1) if named else None
        if bucket is None or not origin:
            return {}
        status, _, data = self._forward("GET", f"/storage/v1/b/{bucket}", b"", {})
        rules = (json.loads(data).get("cors") or []) if status == 200 else []
        for rule in rules:
            origins, methods = rule.get("origin") or [], rule.get("method") or []
            if ("*" in origins or origin in origins) and method in methods:
                exposed = ", ".join(rule.get("responseHeader") or [])
                return {
                    "Access-Control-Allow-Origin": "*" if "*" in origins else origin,
                    "Access-Control-Expose-Headers": exposed,
                    "Access-Control-Max-Age": str(rule.get("maxAgeSeconds", 3600)),
                }
        return {}

    def _gcs_generation(self, path: str, body: bytes, headers: dict[str, str]) -> str | None:
        """The generation of the object an upload names, None where it does not exist (its
        name is in the query of a media or resumable upload, or in the JSON part of a
        multipart one)."""
        bucket = re.search(r"/upload/storage/v1/b/([^/]+)/o", path)
        name = re.search(r"[?&]name=([^&]+)", path) or re.search(rb'"name": ?"([^"]+)"', body)
        if bucket is None or name is None:
            return None
        value = name.group(1)
        key = urllib.parse.unquote(value.decode() if isinstance(value, bytes) else value)
        plain = {
            k: v for k, v in headers.items() if k.lower() not in ("content-length", "content-type")
        }
        status, _, data = self._forward(
            "GET",
            f"/storage/v1/b/{bucket.group(1)}/o/{urllib.parse.quote(key, safe='')}",
            b"",
            plain,
        )
        return str(json.loads(data)["generation"]) if status == 200 else None

    def _draw(self) -> str | None:
        with self._lock:
            self.counts["requests"] += 1
            if self.random.random() >= self.fault_rate:
                return None
            fault = self.random.choice(["503", "reset", "stall"])
            self.counts[fault] += 1
            return fault

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
