"""Stores that cannot be reached fail fast, with one clear error: a closed port and a listener
that accepts connections but never answers, for S3, GCS and HTTP sources and for S3 and GCS
destinations, through `plan`, `convert` and `verify` as a user runs them (the command line, in
a process of its own). The error names the URL, the endpoint and where credentials came from,
never a secret, and comes within the timeout: 25 s by default, `--timeout` to wait longer or
less (these tests give 3 s, but for one that keeps the default)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.support.object_store_servers import free_port

SECRET = "not-a-real-secret-1234"


class SilentListener:
    """Accepts every connection and never sends a byte."""

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self.port = self._socket.getsockname()[1]
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            self._held.append(connection)

    def close(self) -> None:
        self._socket.close()
        for connection in self._held:
            connection.close()


@pytest.fixture(scope="module")
def endpoints() -> Iterator[dict[str, str]]:
    silent = SilentListener()
    yield {
        "closed": f"http://127.0.0.1:{free_port()}",
        "silent": f"http://127.0.0.1:{silent.port}",
    }
    silent.close()


def _run(*args: str) -> tuple[int, str, float]:
    """A shardwright command in its own process: exit code, stderr, seconds."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID="AKIAEXAMPLE", AWS_SECRET_ACCESS_KEY=SECRET,
               GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false")  # fmt: skip
    env.pop("TENSORSTORE_GCS_HTTP_URL", None)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "shardwright.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return done.returncode, done.stderr, time.monotonic() - started


def _options(scheme: str, endpoint: str) -> str:
    if scheme == "s3":
        return json.dumps({"client_kwargs": {"endpoint_url": endpoint}})
    return json.dumps({"endpoint_url": endpoint, "token": "anon"})


def _check(code: int, error: str, seconds: float, url: str, endpoint: str, limit: float) -> None:
    assert code == 2, error
    lines = [line for line in error.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in error, error
    assert url in lines[0] and f"endpoint {endpoint}" in lines[0], error
    assert ("no answer within" in lines[0]) or ("cannot be reached" in lines[0]), error
    assert SECRET not in error
    assert seconds <= limit, f"took {seconds:.1f} s: {error}"


@pytest.mark.parametrize("where", ["closed", "silent"])
@pytest.mark.parametrize("scheme", ["s3", "gs", "http"])
def test_unreachable_sources(
    endpoints: dict[str, str], tmp_path: Any, scheme: str, where: str
) -> None:
    endpoint = endpoints[where]
    if scheme == "http":
        url, options = f"{endpoint}/volume", []
    else:
        url = f"{scheme}://bucket/volume"
        options = ["--source-storage-options", _options(scheme, endpoint)]
    for command in ("plan", "convert"):
        code, error, seconds = _run(command, url, str(tmp_path / "out"), *options, "--timeout", "3")
        _check(code, error, seconds, url, endpoint, limit=3 + 8)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["closed", "silent"])
@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_unreachable_destinations(
    endpoints: dict[str, str], tmp_path: Any, scheme: str, where: str
) -> None:
    endpoint = endpoints[where]
    np.save(tmp_path / "v.npy", np.zeros((4, 8, 8), np.uint8))
    url = f"{scheme}://bucket/out"
    code, error, seconds = _run(
        "convert", str(tmp_path / "v.npy"), url, "--storage-options",
        _options(scheme, endpoint), "--timeout", "3", "--resolution", "1,1,1",
    )  # fmt: skip
    _check(code, error, seconds, url, endpoint, limit=3 + 8)
    code, error, seconds = _run("verify", url, "--storage-options", _options(scheme, endpoint),
                                "--timeout", "3")  # fmt: skip
    _check(code, error, seconds, url, endpoint, limit=3 + 8)


def test_a_silent_store_is_reported_within_30_seconds_by_default(
    endpoints: dict[str, str], tmp_path: Any
) -> None:
    url = "s3://bucket/volume"
    options = _options("s3", endpoints["silent"])
    code, error, seconds = _run(
        "convert", url, str(tmp_path / "out"), "--source-storage-options", options
    )
    _check(code, error, seconds, url, endpoints["silent"], limit=30)
    assert "no answer within 25 s" in error and "--timeout SECONDS" in error


@pytest.mark.parametrize("where", ["closed", "silent"])
@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_unreachable_datasets_to_add_to(endpoints: dict[str, str], scheme: str, where: str) -> None:
    """An addition in place (`convert DEST --generate-meshes --mips 1`, `plan DEST ...`) to a
    dataset behind a store that does not answer: one line within the timeout."""
    endpoint = endpoints[where]
    url = f"{scheme}://bucket/seg"
    for command in ("plan", "convert"):
        code, error, seconds = _run(
            command, url, "--generate-meshes", "--mips", "1", "--storage-options",
            _options(scheme, endpoint), "--timeout", "3",
        )  # fmt: skip
        _check(code, error, seconds, url, endpoint, limit=3 + 8)
