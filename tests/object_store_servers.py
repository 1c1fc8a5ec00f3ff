"""Real object-store endpoints on 127.0.0.1 for tests: moto's S3 server, the GCS emulator, and
a seeded fault-injecting HTTP proxy to put between a client and either of them."""

from __future__ import annotations

import http.client
import os
import random
import socket
import threading
import time
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

    def options(self, endpoint: str | None = None) -> dict[str, Any]:
        return {"endpoint_url": endpoint or self.endpoint, "token": "anon", "project": "test"}

    def make_bucket(self, name: str) -> None:
        import gcsfs

        gcsfs.GCSFileSystem(**self.options(), skip_instance_cache=True).mkdir(name)

    def stop(self) -> None:
        self._server.stop()


class FaultyProxy:
    """Forwards HTTP requests to `upstream`, failing a seeded share of them on purpose:
    a 503, a connection reset before any response, or a stall before forwarding."""

    def __init__(
        self,
        upstream: str,
        fault_rate: float = 0.15,
        seed: int = 1,
        stall_seconds: float = 0.3,
        deny: tuple[str, ...] = (),
        spare: tuple[str, ...] = (),
    ):
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.random = random.Random(seed)
        self.fault_rate = fault_rate
        self.stall_seconds = stall_seconds
        self.counts = {"requests": 0, "503": 0, "reset": 0, "stall": 0}
        self.deny = deny  # HTTP methods answered 403 AccessDenied (bad keys, read-only bucket)
        self.log: list[str] = []  # "METHOD path?query" of every request
        self.spare = spare  # path suffixes never faulted
        self._lock = threading.Lock()
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
                    payload = (
                        b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
                    )
                    self.send_response(403)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    return
                spared = self.path.split("?")[0].endswith(proxy.spare) if proxy.spare else False
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
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = f"{proxy.upstream[0]}:{proxy.upstream[1]}"
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _handle  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

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
