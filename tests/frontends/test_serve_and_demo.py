"""`shardwright serve` (CORS + Range, read by TensorStore over HTTP) and the README's demo."""

from __future__ import annotations

import pathlib
import threading
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
import tensorstore as ts

from shardwright import api
from shardwright.cli import main as cli_main
from shardwright.serve import make_server


@pytest.fixture()
def served(tmp_path: pathlib.Path) -> Iterator[tuple[str, pathlib.Path]]:
    server = make_server(str(tmp_path), port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", tmp_path
    server.shutdown()
    server.server_close()


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


def test_demo_converts_both_volumes_to_both_formats_and_verifies(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    assert cli_main(["demo", "--out", str(out), "--size", "96,80,40", "--workers", "2"]) == 0
    printed = capsys.readouterr().out
    assert printed.count(": OK") == 4
    assert "precomputed://http://127.0.0.1:8000/image" in printed
    for name in ("image", "segmentation"):
        store = ts.open(
            {"driver": "neuroglancer_precomputed", "kvstore": f"file://{out / name}/"}
        ).result()
        assert store.shape[:3] == (96, 80, 40)
    labels = np.load(out / "source" / "labels.npy")
    seg = ts.open({"driver": "zarr3", "kvstore": f"file://{out / 'segmentation.zarr'}/"}).result()
    np.testing.assert_array_equal(np.asarray(seg.read().result()), labels)
