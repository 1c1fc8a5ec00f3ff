"""`shardwright serve` (CORS + Range, read by TensorStore over HTTP) and the README's demo."""

from __future__ import annotations

import http.client
import importlib.util
import io
import json
import os
import pathlib
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
import tensorstore as ts

from shardwright import api
from shardwright.cli import main as cli_main
from shardwright.viewing.serve import make_server


@pytest.fixture()
def served(tmp_path: pathlib.Path) -> Iterator[tuple[str, pathlib.Path]]:
    server = make_server(str(tmp_path), port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.url, tmp_path
    started = time.monotonic()
    server.shutdown()
    server.server_close()
    assert time.monotonic() - started < 5  # open keep-alive connections do not hold it up


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), b""


def test_range_requests_and_cors(served: tuple[str, pathlib.Path]) -> None:
    url, root = served
    (root / "blob").write_bytes(bytes(range(100)))
    status, headers, body = _get(f"{url}/blob")
    assert status == 200 and body == bytes(range(100))
    assert headers["Access-Control-Allow-Origin"] == "*"
    status, headers, body = _get(f"{url}/blob", {"Range": "bytes=10-19"})
    assert status == 206 and body == bytes(range(10, 20))
    assert headers["Content-Range"] == "bytes 10-19/100"
    assert _get(f"{url}/blob", {"Range": "bytes=-5"})[2] == bytes(range(95, 100))
    assert _get(f"{url}/blob", {"Range": "bytes=90-"})[2] == bytes(range(90, 100))
    assert _get(f"{url}/blob", {"Range": "bytes=200-300"})[0] == 416


def test_one_keep_alive_connection_serves_ranges_heads_and_gets(
    served: tuple[str, pathlib.Path],
) -> None:
    """HTTP/1.1: many reads on one connection (as Neuroglancer's chunk reads do), each with an
    exact Content-Length; HEAD gives the length without a body; suffix ranges."""
    url, root = served
    (root / "shard").write_bytes(bytes(range(256)) * 4)
    connection = http.client.HTTPConnection(url.removeprefix("http://"), timeout=10)
    connection.connect()
    sock = connection.sock
    answers = []
    for method, headers in [
        ("GET", {"Range": "bytes=-16"}),
        ("HEAD", {}),
        ("GET", {"Range": "bytes=1000-2000"}),
        ("GET", {}),
        ("HEAD", {"Range": "bytes=0-9"}),
    ]:
        connection.request(method, "/shard", headers=headers)
        response = connection.getresponse()
        body = response.read()
        answers.append((response.status, response.getheader("Content-Length"), body))
        assert response.version == 11 and not response.will_close
    assert connection.sock is sock  # never reconnected
    connection.close()
    data = bytes(range(256)) * 4
    assert answers == [
        (206, "16", data[-16:]),
        (200, "1024", b""),
        (206, "24", data[1000:]),
        (200, "1024", data),
        (206, "10", b""),
    ]


def test_unsatisfiable_ranges_and_preflight(served: tuple[str, pathlib.Path]) -> None:
    url, root = served
    (root / "blob").write_bytes(b"x" * 10)
    for header in ("bytes=10-", "bytes=-0", "bytes=5-2", "bytes=x-1"):
        status, headers, _ = _get(f"{url}/blob", {"Range": header})
        assert status == 416 and headers["Content-Range"] == "bytes */10", header
        assert headers["Content-Length"] == "0"
    # RFC 9110 14.2: another unit is ignored; several ranges are answered with the whole.
    for header in ("items=0-1", "bytes=0-1,4-5"):
        assert _get(f"{url}/blob", {"Range": header})[:3:2] == (200, b"x" * 10), header
    request = urllib.request.Request(f"{url}/blob", method="OPTIONS")
    with urllib.request.urlopen(request) as response:
        assert response.status == 204
        assert "GET" in response.headers["Access-Control-Allow-Methods"]
        assert response.headers["Access-Control-Allow-Headers"] == "Range, If-None-Match"


def test_routes_serve_their_folders_and_nothing_outside_them(tmp_path: pathlib.Path) -> None:
    (tmp_path / "client").mkdir()
    (tmp_path / "client" / "index.html").write_text("<html>viewer</html>")
    (tmp_path / "dataset").mkdir()
    (tmp_path / "dataset" / "info").write_text("{}")
    (tmp_path / "secret.txt").write_text("private")
    log = io.StringIO()
    server = make_server(
        routes={"/": str(tmp_path / "client"), "/data/0": str(tmp_path / "dataset")},
        port=0,
        log=log,
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert _get(f"{server.url}/index.html")[2] == b"<html>viewer</html>"
        assert _get(f"{server.url}/data/0/info")[2] == b"{}"
        for escape in ("/data/0/../../secret.txt", "/data/0/%2e%2e/%2e%2e/secret.txt",
                       "/../secret.txt", "/data/1/info"):  # fmt: skip
            status, _, body = _get(server.url + escape)
            assert status in (403, 404) and b"private" not in body, escape
    finally:
        server.shutdown()
        server.server_close()
    assert '"GET /data/0/info HTTP/1.1" 200' in log.getvalue()
    with pytest.raises(FileNotFoundError, match="no such folder to serve"):
        make_server(str(tmp_path / "missing"), port=0)


def test_shutdown_is_prompt_with_a_connection_left_open(served: tuple[str, pathlib.Path]) -> None:
    url, root = served
    (root / "f").write_bytes(b"1")
    idle = http.client.HTTPConnection(url.removeprefix("http://"), timeout=10)
    idle.request("GET", "/f")
    assert idle.getresponse().read() == b"1"  # the connection stays open, its thread waiting


def test_serve_stops_on_sigterm_and_frees_its_port(tmp_path: pathlib.Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "shardwright.cli", "serve", str(tmp_path), "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        assert f"at http://127.0.0.1:{port}" in process.stderr.readline()
        assert _get(f"http://127.0.0.1:{port}/")[0] == 404  # a folder: no listing
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
        pass  # nobody listens there any more


def test_tensorstore_reads_a_sharded_volume_over_http(served: tuple[str, pathlib.Path]) -> None:
    url, root = served
    vol = np.random.default_rng(0).integers(0, 255, (20, 30, 40), dtype=np.uint8)
    np.save(root / "vol.npy", vol)
    api.convert(
        str(root / "vol.npy"),
        str(root / "data"),
        scheduler="sync",
        progress=False,
        chunk_size=(16, 16, 8),
        target_shard_bytes=4096,
    )
    store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"{url}/data/"}).result()
    np.testing.assert_array_equal(np.asarray(store.read().result())[..., 0], vol.T)


def test_demo_prints_a_view_command_that_runs_as_shown(tmp_path: pathlib.Path) -> None:
    """From a virtualenv not activated (its bin/ not on PATH) the demo's `view:` line names
    the script as it was run, and that command runs as typed; where the script is on PATH,
    the line says `shardwright`."""
    script = pathlib.Path(sys.executable).with_name("shardwright")
    bare = {**os.environ, "PATH": "/usr/bin:/bin"}
    demo = [str(script), "demo", "--out", "out", "--size", "32,32,16", "--scheduler", "sync"]
    run = subprocess.run(demo, cwd=tmp_path, env=bare, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    (line,) = [x for x in run.stdout.splitlines() if x.startswith("view:")]
    command = shlex.split(line.removeprefix("view:"))
    assert command[0] == str(script) and command[1] == "view"
    again = subprocess.run([command[0], "--version"], cwd=tmp_path, env=bare, timeout=60)
    assert again.returncode == 0
    activated = {**os.environ, "PATH": f"{script.parent}:/usr/bin:/bin"}
    run = subprocess.run(demo, cwd=tmp_path, env=activated, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "view:   shardwright view out/" in run.stdout


def test_demo_converts_both_volumes_to_both_formats_and_verifies(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    assert cli_main(["demo", "--out", str(out), "--size", "96,80,40", "--workers", "2"]) == 0
    captured = capsys.readouterr()
    printed = captured.out
    # A picture of each dataset beside it where a headless browser is at hand, else why not.
    names = ("image", "segmentation", "image.zarr", "segmentation.zarr")
    if shutil.which("chromedriver") and importlib.util.find_spec("selenium"):
        from PIL import Image

        assert "screenshots: " in printed
        for name in names:
            with Image.open(out / f"{name}.png") as shot:
                pixels = np.asarray(shot.convert("RGB"))
            assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 16  # data, not a blank view
    else:
        assert "screenshots: none (" in captured.err
    assert printed.count(": OK") == 4
    views = [line for line in printed.splitlines() if line.startswith("view:")]
    assert views == [
        f"view:   shardwright view {out / 'image'} {out / 'segmentation'} "
        f"{out / 'image.zarr'} {out / 'segmentation.zarr'}"
    ]
    for name in ("image", "segmentation"):
        store = ts.open(
            {"driver": "neuroglancer_precomputed", "kvstore": f"file://{out / name}/"}
        ).result()
        assert store.shape[:3] == (96, 80, 40)
    labels = np.load(out / "source" / "labels.npy")
    # zarr3 output is an OME-Zarr group over its one level array, 0/.
    for name in ("image.zarr", "segmentation.zarr"):
        group = json.loads((out / name / "zarr.json").read_text())
        assert group["node_type"] == "group"
        datasets = group["attributes"]["ome"]["multiscales"][0]["datasets"]
        assert [d["path"] for d in datasets] == ["0"]
    seg = ts.open(
        {"driver": "zarr3", "kvstore": f"file://{out / 'segmentation.zarr' / '0'}/"}
    ).result()
    np.testing.assert_array_equal(np.asarray(seg.read().result()), labels)
