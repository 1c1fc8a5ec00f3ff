"""Precomputed volumes as the field writes them: CloudVolume's own writes (chunks under `.gz`,
`.br`, `.zstd` suffixes, plain, sharded), objects stored with a Content-Encoding on S3, and
chunks that are not there. Each converts exactly — TensorStore reads the output back equal to
what CloudVolume reads from the source — or is refused with a reason, never read as zeros."""

from __future__ import annotations

import functools
import gzip
import http.server
import json
import pathlib
import threading
from typing import Any

import brotli
import numpy as np
import pytest
import tensorstore as ts
from cloudvolume import CloudVolume

from shardwright import api, cli
from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.planning.sharding import sample_cells
from shardwright.sources import open_source
from shardwright.sources.missing import MissingChunksError
from tests.support import volumes

SIZE = (40, 36, 20)  # x, y, z: edge chunks are truncated
CHUNK = (16, 16, 8)
OFFSET = (3, 5, 7)


def _cloudvolume(
    path: pathlib.Path,
    layer: str,
    encoding: str,
    dtype: str,
    compress: Any,
    sharding: dict[str, Any] | None = None,
) -> np.ndarray:
    """Write a volume with CloudVolume itself; returns what CloudVolume reads back, [x,y,z,c]."""
    info = CloudVolume.create_new_info(
        num_channels=1,
        layer_type=layer,
        data_type=dtype,
        encoding=encoding,
        resolution=[4, 4, 40],
        voxel_offset=list(OFFSET),
        chunk_size=list(CHUNK),
        volume_size=list(SIZE),
    )
    if sharding:
        info["scales"][0]["sharding"] = sharding
    cv = CloudVolume(f"file://{path}", info=info, compress=compress, progress=False)
    cv.commit_info()
    if layer == "segmentation":
        data = volumes.layer_xyzc(dtype, 1, "segmentation", SIZE)
    else:
        data = volumes.em_like_uint8((*SIZE, 1)).astype(dtype)
    cv[:, :, :] = data
    return np.asarray(CloudVolume(f"file://{path}", progress=False)[:, :, :])


def _read_output(dest: pathlib.Path, fmt: str) -> np.ndarray:
    """The converted volume as TensorStore reads it, [x, y, z, c]."""
    if fmt == "precomputed":
        spec = {"driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/"}
        return np.asarray(ts.open(spec).result().translate_to[0, 0, 0, 0].read().result())
    store = ts.open({"driver": "zarr3", "kvstore": f"file://{dest}/0/"}).result()
    names = "".join(store.domain.labels)  # the source's own axis order, kept
    array = np.asarray(store.read().result())
    array = array if "c" in names else array[..., np.newaxis]
    names = names if "c" in names else names + "c"
    return np.transpose(array, [names.index(a) for a in "xyzc"])


SHARDING = {  # CloudVolume writes one whole shard at a time: here the volume is one shard
    "@type": "neuroglancer_uint64_sharded_v1",
    "preshift_bits": 3,
    "hash": "identity",
    "minishard_bits": 3,
    "shard_bits": 0,
    "minishard_index_encoding": "gzip",
    "data_encoding": "gzip",
}
CASES = [
    # layer, encoding, dtype, CloudVolume's compress, how chunks are stored, output format
    ("image", "raw", "uint8", None, ".gz", "precomputed"),  # its default for raw: gzip
    ("image", "jpeg", "uint8", None, "", "zarr3"),  # and for jpeg: none
    ("image", "png", "uint8", "zstd", ".zstd", "precomputed"),
    ("segmentation", "compressed_segmentation", "uint64", "br", ".br", "precomputed"),
    ("segmentation", "raw", "uint32", False, "", "zarr3"),
    ("segmentation", "compressed_segmentation", "uint64", None, ".shard", "precomputed"),
]


@pytest.mark.parametrize(
    "layer, encoding, dtype, compress, stored, fmt",
    CASES,
    ids=[f"{c[1]}-{c[2]}-{c[4] or 'plain'}-to-{c[5]}" for c in CASES],
)
def test_cloudvolume_volumes_convert_exactly(
    tmp_path: pathlib.Path,
    layer: str,
    encoding: str,
    dtype: str,
    compress: Any,
    stored: str,
    fmt: str,
) -> None:
    sharding = SHARDING if stored == ".shard" else None
    expected = _cloudvolume(tmp_path / "src", layer, encoding, dtype, compress, sharding)
    assert expected.any()
    assert {p.suffix for p in (tmp_path / "src" / "4_4_40").iterdir()} == {stored}
    manifest = api.convert(
        str(tmp_path / "src"), str(tmp_path / "out"), format=fmt, scheduler="sync",
        progress=False,
    )  # fmt: skip
    assert isinstance(manifest, api.Manifest)
    assert manifest.totals.source_chunks_missing == 0
    np.testing.assert_array_equal(_read_output(tmp_path / "out", fmt), expected)
    report = api.verify(str(tmp_path / "out"), str(tmp_path / "src"), full=True)
    assert report.ok, report.summary()


def test_a_shard_stored_compressed_is_refused_with_the_reason(tmp_path: pathlib.Path) -> None:
    _cloudvolume(tmp_path / "src", "segmentation", "compressed_segmentation", "uint64", None,
                 SHARDING)  # fmt: skip
    shard = next((tmp_path / "src" / "4_4_40").iterdir())
    shard.with_name(shard.name + ".gz").write_bytes(gzip.compress(shard.read_bytes()))
    shard.unlink()
    with pytest.raises(ValueError, match=r"is stored compressed, as 4_4_40/.*\.shard\.gz"):
        api.plan(str(tmp_path / "src"), str(tmp_path / "out"))


def _unsampled_chunk(grid: tuple[int, int, int]) -> tuple[int, int, int]:
    """A chunk the plan's sample does not read, so that the shard task meets its absence."""
    sampled = set(sample_cells(list(grid)))
    return next(
        (x, y, z)
        for z in range(grid[2])
        for y in range(grid[1])
        for x in range(grid[0])
        if (x, y, z) not in sampled
    )


def test_missing_chunk_is_refused_then_filled_when_asked(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    expected = _cloudvolume(src, "segmentation", "compressed_segmentation", "uint64", None)
    grid = (3, 3, 3)
    x, y, z = _unsampled_chunk(grid)
    lo = [o + g * c for o, g, c in zip(OFFSET, (x, y, z), CHUNK, strict=True)]
    hi = [min(a + c, o + s) for a, c, o, s in zip(lo, CHUNK, OFFSET, SIZE, strict=True)]
    name = "_".join(f"{a}-{b}" for a, b in zip(lo, hi, strict=True))
    (src / "4_4_40" / f"{name}.gz").unlink()
    common = ["--chunk-size", ",".join(map(str, CHUNK)), "--scheduler", "sync", "--quiet"]

    # By default the shard task that meets the hole stops the job, before any manifest.
    code = cli.main(["convert", str(src), str(out), *common])
    error = capsys.readouterr().err
    assert code == 2
    assert f"1 chunk of scale 4_4_40 missing (4_4_40/{name})" in error
    assert "--fill-missing" in error
    assert not (out / MANIFEST_KEY).exists()

    # Asked to fill, the same job finishes: exactly that chunk is 0, the rest the source.
    code = cli.main(["convert", str(src), str(out), *common, "--resume", "--fill-missing"])
    said = capsys.readouterr().out
    assert code == 0
    assert f"1 source chunk(s) were not stored and were written as the source's fill value " \
           f"(0) (first: 4_4_40/{name})" in said  # fmt: skip
    totals = json.loads((out / MANIFEST_KEY).read_text())["totals"]
    assert totals["source_chunks_missing"] == 1
    assert totals["source_chunks_missing_examples"] == [f"4_4_40/{name}"]
    want = expected.copy()
    box = tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, OFFSET, strict=True))
    assert want[box].any()
    want[box] = 0
    np.testing.assert_array_equal(_read_output(out, "precomputed"), want)

    # verify --against names the absent chunk, and knows the job filled it on purpose.
    report = api.verify(str(out), str(src), full=True)
    assert report.ok, report.summary()
    assert any(f"4_4_40/{name}" in note and "fill value" in note for note in report.notes)


def test_a_volume_read_as_nothing_is_not_blessed(tmp_path: pathlib.Path) -> None:
    """A conversion whose source later reads as zeros (here: its chunks removed) fails
    verify, naming the absent chunks, instead of comparing zeros with zeros."""
    src, out = tmp_path / "src", tmp_path / "out"
    _cloudvolume(src, "image", "raw", "uint8", None)
    api.convert(str(src), str(out), scheduler="sync", progress=False)
    for chunk in (src / "4_4_40").iterdir():
        chunk.unlink()
    report = api.verify(str(out), str(src), full=True)
    assert not report.ok
    assert any("source chunks read are not stored" in p for p in report.problems)
    assert any("voxels differ from the source" in p for p in report.problems)


def test_every_sampled_chunk_absent_is_no_data(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    _cloudvolume(src, "image", "raw", "uint8", None)
    for chunk in (src / "4_4_40").iterdir():
        chunk.unlink()
    with pytest.raises(MissingChunksError, match="chunks of scale 4_4_40 missing"):
        api.plan(str(src), str(tmp_path / "out"))
    plan = api.plan(str(src), str(tmp_path / "out"), fill_missing=True)
    assert "absent       100 % of sampled source chunks" in plan.report()


@pytest.mark.s3
def test_objects_with_a_content_encoding_on_s3(tmp_path: pathlib.Path, s3: Any) -> None:
    """CloudFiles stores chunks on S3 under their plain key with `Content-Encoding: gzip` (or
    br); S3 hands back the stored bytes. They convert exactly."""
    import boto3

    expected = {}
    client = boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1")
    s3.make_bucket("field")
    for name, layer, encoding, dtype, content in (
        ("img", "image", "raw", "uint8", "gzip"),
        ("seg", "segmentation", "compressed_segmentation", "uint64", "br"),
    ):
        local = tmp_path / name
        expected[name] = _cloudvolume(local, layer, encoding, dtype, False)
        for path in sorted(local.rglob("*")):
            if path.is_dir():
                continue
            key = f"{name}/{path.relative_to(local)}"
            body = path.read_bytes()
            if path.name == "info":
                client.put_object(Bucket="field", Key=key, Body=body)
                continue
            packed = gzip.compress(body) if content == "gzip" else brotli.compress(body)
            client.put_object(Bucket="field", Key=key, Body=packed, ContentEncoding=content)
        head = client.head_object(Bucket="field", Key=f"{name}/4_4_40/19-35_21-37_15-23")
        assert head["ContentEncoding"] == content
    for name, want in expected.items():
        out = tmp_path / f"{name}-out"
        api.convert(
            f"s3://field/{name}", str(out), source_storage_options=s3.options(),
            scheduler="sync", progress=False,
        )  # fmt: skip
        np.testing.assert_array_equal(_read_output(out, "precomputed"), want)
        source = open_source(f"s3://field/{name}", storage_options=s3.options())
        np.testing.assert_array_equal(source.read((0, 0, 0), SIZE), want)


class _EncodingHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder as a CDN in front of CloudFiles' uploads does: each chunk gzipped on
    the wire with `Content-Encoding: gzip`, the info as it is."""

    def do_GET(self) -> None:
        path = pathlib.Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        body = path.read_bytes()
        encoded = path.name != "info"
        if encoded:
            body = gzip.compress(body)
        self.send_response(200)
        if encoded:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_objects_with_a_content_encoding_over_https(tmp_path: pathlib.Path) -> None:
    expected = _cloudvolume(tmp_path / "vol", "segmentation", "compressed_segmentation",
                            "uint64", False)  # fmt: skip
    handler = functools.partial(_EncodingHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/vol"
        api.convert(url, str(tmp_path / "out"), scheduler="sync", progress=False)
    finally:
        server.shutdown()
        server.server_close()
    np.testing.assert_array_equal(_read_output(tmp_path / "out", "precomputed"), expected)
