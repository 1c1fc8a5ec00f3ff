"""Zarr v3 sharding_indexed shards and zarr.json, checked against TensorStore and zarr-python.

Independent readers are the oracle: our shards are read through TensorStore's
`zarr3_sharding_indexed` kvstore and through whole arrays opened by zarr-python 3 and
TensorStore; shards those libraries write are decoded by ours. Inner chunks are encoded here
with numcodecs / zstandard directly, not with shardwright's codecs.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import struct
import uuid
from pathlib import Path
from typing import Any

import google_crc32c
import numcodecs
import numpy as np
import pytest
import tensorstore as ts
import zarr
import zstandard
from hypothesis import given
from hypothesis import strategies as st
from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

from shardwright.errors import ShardFormatError, ZarrMetadataError
from shardwright.formats.zarr3.codecs import Compressor
from shardwright.formats.zarr3.metadata import ZarrArrayMetadata
from shardwright.formats.zarr3.sharding import (
    MISSING,
    ShardBuilder,
    ShardReader,
    decode_shard,
    encode_index,
    encode_shard,
    index_nbytes,
    read_index,
)
from tests.support import volumes

Chunks = dict[tuple[int, ...], bytes]


# -- helpers ---------------------------------------------------------------------------------
def ts_key(coords: tuple[int, ...]) -> bytes:
    """TensorStore's key for an entry of a shard: the grid indices as uint32 big endian."""
    return struct.pack(f">{len(coords)}I", *coords)


def ts_shard_kvstore(path: Path, grid: tuple[int, ...], location: str) -> ts.KvStore:
    return ts.KvStore.open(
        {
            "driver": "zarr3_sharding_indexed",
            "base": {"driver": "file", "path": str(path)},
            "grid_shape": list(grid),
            "index_codecs": [
                {"name": "bytes", "configuration": {"endian": "little"}},
                {"name": "crc32c"},
            ],
            "index_location": location,
        }
    ).result()


@st.composite
def shard_cases(draw: st.DrawFn) -> tuple[tuple[int, ...], Chunks, str]:
    """A grid of rank 1..4, a non-empty random subset of chunks (any insertion order, blobs
    0..40 bytes, zero-length included) and an index location."""
    rank = draw(st.integers(1, 4))
    grid = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    n = math.prod(grid)
    present = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=24, unique=True))
    chunks: Chunks = {}
    for linear in present:
        coords = tuple(int(c) for c in np.unravel_index(linear, grid))
        chunks[coords] = draw(st.binary(min_size=0, max_size=40))
    return grid, chunks, draw(st.sampled_from(["start", "end"]))


def c_order(chunks: Chunks) -> Chunks:
    return dict(sorted(chunks.items()))


def encode_inner(block: np.ndarray, meta: ZarrArrayMetadata) -> bytes:
    """One inner chunk through the zarr.json's codec chain, using third-party codecs."""
    raw = np.ascontiguousarray(block, dtype=meta.dtype)
    comp = meta.compressor
    if comp is None:
        data = raw.tobytes()
    elif comp.name == "gzip":
        data = gzip.compress(raw.tobytes(), compresslevel=comp.level)
    elif comp.name == "zstd":
        data = zstandard.ZstdCompressor(level=comp.level).compress(raw.tobytes())
    else:
        shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[str(comp.shuffle)]
        codec = numcodecs.Blosc(cname=str(comp.cname), clevel=comp.level, shuffle=shuffle)
        data = codec.encode(raw)
    if meta.checksum_inner:
        data += struct.pack("<I", google_crc32c.value(data))
    return bytes(data)


def decode_inner(blob: bytes, meta: ZarrArrayMetadata) -> np.ndarray:
    if meta.checksum_inner:
        blob, crc = blob[:-4], blob[-4:]
        assert struct.unpack("<I", crc)[0] == google_crc32c.value(blob)
    nbytes = math.prod(meta.chunk_shape) * meta.dtype.itemsize
    comp = meta.compressor
    if comp is None:
        raw = blob
    elif comp.name == "gzip":
        raw = gzip.decompress(blob)
    elif comp.name == "zstd":
        raw = zstandard.ZstdDecompressor().decompress(blob, max_output_size=nbytes)
    else:
        raw = bytes(numcodecs.blosc.decompress(blob))
    return np.frombuffer(raw, dtype=meta.dtype).reshape(meta.chunk_shape)


def is_fill(block: np.ndarray, fill: Any) -> bool:
    return bool(np.array_equal(block, np.full_like(block, fill), equal_nan=block.dtype.kind == "f"))


def write_array(root: Path, src: np.ndarray, meta: ZarrArrayMetadata) -> set[tuple[int, ...]]:
    """Write `src` as a sharded zarr v3 array with our metadata and shards; returns the shards
    written. Inner chunks are padded with the fill value; all-fill chunks and shards are
    omitted, as zarr writers do."""
    root.mkdir(parents=True)
    (root / "zarr.json").write_text(json.dumps(meta.to_json()))
    cps, chunk = np.array(meta.chunks_per_shard), np.array(meta.chunk_shape)
    written = set()
    for shard in np.ndindex(*meta.shard_grid_shape):
        builder = ShardBuilder(cps.tolist(), meta.index_location, name=meta.chunk_key(shard))
        for local in np.ndindex(*cps):
            start = (np.array(shard) * cps + local) * chunk
            if (start >= src.shape).any():
                continue  # inner chunk wholly outside the array
            block = src[tuple(slice(s, s + c) for s, c in zip(start, chunk, strict=True))]
            if is_fill(block, meta.fill_value):
                continue
            padded = np.full(meta.chunk_shape, meta.fill_value, dtype=meta.dtype)
            padded[tuple(slice(0, n) for n in block.shape)] = block
            builder.add(local, encode_inner(padded, meta))
        if not len(builder):
            continue
        shard_file = builder.finish()
        path = root / shard_file.name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as out:
            crc = shard_file.write_to(out)
        assert crc == google_crc32c.value(path.read_bytes())
        assert path.stat().st_size == shard_file.nbytes
        shard_file.close()
        written.add(shard)
    return written


def read_array_ourselves(root: Path) -> np.ndarray:
    """Decode a sharded zarr v3 array (whoever wrote it) with decode_shard and our metadata."""
    meta = ZarrArrayMetadata.from_json(json.loads((root / "zarr.json").read_text()))
    cps, chunk = np.array(meta.chunks_per_shard), np.array(meta.chunk_shape)
    padded_shape = np.array(meta.shard_grid_shape) * np.array(meta.shard_shape)
    out = np.full(padded_shape, meta.fill_value, dtype=meta.dtype)
    for shard in np.ndindex(*meta.shard_grid_shape):
        path = root / meta.chunk_key(shard)
        if not path.exists():
            continue
        chunks = decode_shard(path.read_bytes(), meta.chunks_per_shard, meta.index_location)
        for local, blob in chunks.items():
            start = (np.array(shard) * cps + local) * chunk
            out[tuple(slice(s, s + c) for s, c in zip(start, chunk, strict=True))] = decode_inner(
                blob, meta
            )
    return out[tuple(slice(0, n) for n in meta.shape)]


source_volume = volumes.with_fill_regions


def ts_open(root: Path) -> ts.TensorStore:
    return ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(root)}}).result()


# -- shard bytes against TensorStore's kvstore driver ----------------------------------------
@given(shard_cases())
def test_our_shards_read_by_tensorstore_kvstore(tmp_path: Path, case: Any) -> None:
    grid, chunks, location = case
    path = tmp_path / uuid.uuid4().hex
    path.write_bytes(encode_shard(chunks, grid, location))
    kv = ts_shard_kvstore(path, grid, location)
    assert kv.list().result() == sorted(ts_key(c) for c in chunks)
    for coords, blob in chunks.items():
        result = kv.read(ts_key(coords)).result()
        assert result.state == "value"
        assert result.value == blob  # zero-length entries read back as present, b""
    absent = next((c for c in itertools.product(*map(range, grid)) if c not in chunks), None)
    if absent is not None:
        assert kv.read(ts_key(absent)).result().state == "missing"


@given(shard_cases())
def test_tensorstore_written_shards_decode_byte_exact(tmp_path: Path, case: Any) -> None:
    grid, chunks, location = case
    path = tmp_path / uuid.uuid4().hex
    kv = ts_shard_kvstore(path, grid, location)
    with ts.Transaction() as txn:
        for coords, blob in chunks.items():
            kv.with_transaction(txn).write(ts_key(coords), blob).result()
    written = path.read_bytes()
    decoded = decode_shard(written, grid, location)
    assert list(decoded) == sorted(chunks)
    assert decoded == chunks
    # TensorStore lays blobs out in C order too (zero-length ones at the running offset), so
    # the two writers agree byte for byte.
    assert encode_shard(chunks, grid, location) == written


@given(shard_cases(), st.booleans())
def test_builder_any_order_and_add_many_match_encode_shard(case: Any, many: bool) -> None:
    grid, chunks, location = case
    builder = ShardBuilder(grid, location, name="c/0")
    if many:
        builder.add_many(np.array(list(chunks), dtype=np.int64), list(chunks.values()))
    else:
        for coords, blob in chunks.items():
            builder.add(coords, blob)
    shard = builder.finish()
    data = shard.to_bytes()
    assert shard.name == "c/0"
    assert shard.chunk_count == len(chunks)
    assert data == encode_shard(c_order(chunks), grid, location)
    assert shard.crc32c() == google_crc32c.value(data)
    pieces = [bytes(p) for p in shard.pieces()]
    index_piece, body = (
        (pieces[0], pieces[1:]) if location == "start" else (pieces[-1], pieces[:-1])
    )
    assert len(index_piece) == index_nbytes(grid)
    assert body == list(c_order(chunks).values())  # blobs stream one by one, in C order
    shard.close()


def test_zero_length_chunk_layout_matches_tensorstore() -> None:
    """TensorStore stores b"" as (running offset, 0); we do the same, and accept any offset."""
    data = encode_shard({(0, 1): b"hello", (1, 0): b"abc", (1, 2): b""}, (2, 3))
    table = read_index(data[-index_nbytes((2, 3)) :], (2, 3))
    assert table[1, 2].tolist() == [8, 0]
    assert table[0, 0].tolist() == [MISSING, MISSING]
    far = np.full((2, 2), MISSING, dtype=np.uint64)
    far[0] = (2**40, 0)
    assert decode_shard(b"xy" + encode_index(far), (2,)) == {(0,): b""}


def test_builder_spills_and_produces_identical_bytes(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    chunks = {c: rng.bytes(64 + 7 * i) for i, c in enumerate(np.ndindex(2, 3, 2))}
    for location in ("start", "end"):
        spool_dir = tmp_path / location
        spool_dir.mkdir()
        builder = ShardBuilder((2, 3, 2), location, memory_budget=200, spool_dir=str(spool_dir))
        for coords in reversed(list(chunks)):
            builder.add(coords, chunks[coords])
        assert builder.spilled
        assert len(list(spool_dir.iterdir())) == 1  # the spool file
        shard = builder.finish()
        assert shard.to_bytes() == encode_shard(chunks, (2, 3, 2), location)
        out = tmp_path / f"{location}.shard"
        with out.open("wb") as f:
            crc = shard.write_to(f)
        assert out.read_bytes() == encode_shard(chunks, (2, 3, 2), location)
        assert crc == google_crc32c.value(out.read_bytes())
        shard.close()
        assert list(spool_dir.iterdir()) == []

    small = ShardBuilder((2, 3, 2), memory_budget=10_000, spool_dir=str(tmp_path))
    small.add((0, 0, 0), b"x" * 100)
    assert not small.spilled


def test_read_index_and_index_nbytes() -> None:
    assert index_nbytes((2, 3)) == 16 * 6 + 4
    assert index_nbytes((32, 32, 32)) == 16 * 32768 + 4
    data = encode_shard({(1, 0): b"abc"}, (2, 3), "start")
    table = read_index(data[: index_nbytes((2, 3))], (2, 3))
    assert table.shape == (2, 3, 2) and table.dtype == np.uint64
    assert table[1, 0].tolist() == [index_nbytes((2, 3)), 3]
    assert (table[0] == MISSING).all()


# -- ranged reads ----------------------------------------------------------------------------
@pytest.mark.parametrize("location", ["start", "end"])
def test_shard_reader_fetches_index_once_then_one_range_per_chunk(location: str) -> None:
    grid = (3, 2, 2)
    chunks = {(0, 0, 1): b"first", (2, 1, 0): b"second chunk", (1, 1, 1): b"", (1, 0, 0): b"z"}
    data = encode_shard(chunks, grid, location)
    calls: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        calls.append((start, end))
        return data[start:end]

    reader = ShardReader(fetch, grid, location, object_size=len(data))
    assert reader.read_chunk((2, 1, 0)) == b"second chunk"
    n = index_nbytes(grid)
    assert calls[0] == ((0, n) if location == "start" else (len(data) - n, len(data)))
    assert len(calls) == 2
    assert reader.read_chunk((0, 0, 1)) == b"first"
    assert reader.read_chunk((1, 0, 0)) == b"z"
    assert len(calls) == 4  # index cached: one data range per chunk
    assert reader.read_chunk((0, 1, 1)) is None  # absent: index only, no fetch
    assert reader.read_chunk((1, 1, 1)) == b""  # zero-length: nothing to fetch
    assert len(calls) == 4
    assert all(data[s:e] in chunks.values() for s, e in calls[1:])  # exactly the chunk ranges


def test_shard_reader_without_object_size_for_start_index() -> None:
    data = encode_shard({(1,): b"abc"}, (4,), "start")
    reader = ShardReader(lambda s, e: data[s:e], (4,), "start")
    assert reader.read_chunk((1,)) == b"abc"
    assert reader.read_chunk((0,)) is None


def test_shard_reader_missing_shard_reads_as_absent() -> None:
    def fetch(start: int, end: int) -> bytes:
        raise FileNotFoundError("c/0/0")

    reader = ShardReader(fetch, (2, 2), "start")
    assert reader.read_chunk((0, 0)) is None
    assert reader.index() is None


def test_shard_reader_errors() -> None:
    with pytest.raises(ValueError, match="needs object_size"):
        ShardReader(lambda s, e: b"", (2,), "end")
    data = encode_shard({(1,): b"abc"}, (2,), "end")
    reader = ShardReader(lambda s, e: data[s:e][:-1], (2,), "end", object_size=len(data))
    with pytest.raises(ShardFormatError, match="truncated"):
        reader.read_chunk((1,))
    with pytest.raises(ValueError, match="out of range"):
        ShardReader(lambda s, e: data[s:e], (2,), "end", len(data)).read_chunk((2,))


# -- whole arrays read by zarr-python 3 and TensorStore --------------------------------------
CONFIGS: dict[str, dict[str, Any]] = {
    "raw-end": dict(compressor=None, checksum_inner=False, index_location="end", names=None),
    "gzip-crc-start": dict(
        compressor=Compressor.gzip(5),
        checksum_inner=True,
        index_location="start",
        names=("z", "y", "x"),
        special_fill=True,
    ),
    "zstd-start": dict(
        compressor=Compressor.zstd(3),
        checksum_inner=False,
        index_location="start",
        names=("z", None, "x"),
    ),
    "blosc-crc-end": dict(
        compressor=Compressor.blosc("lz4", 5, "bitshuffle"),
        checksum_inner=True,
        index_location="end",
        names=("z", "y", "x"),
        special_fill=True,
    ),
}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint64", "float32"])
def test_full_array_opened_by_zarr_python_and_tensorstore(
    tmp_path: Path, dtype: str, config: str
) -> None:
    cfg = CONFIGS[config]
    fill: Any = 0
    if cfg.get("special_fill"):
        fill = math.nan if dtype == "float32" else 7
    meta = ZarrArrayMetadata(
        shape=(13, 10, 7),  # not a multiple of the shard shape: edge shards on every axis
        data_type=dtype,
        shard_shape=(8, 4, 4),
        chunk_shape=(4, 2, 2),
        fill_value=fill,
        dimension_names=cfg["names"],
        compressor=cfg["compressor"],
        checksum_inner=cfg["checksum_inner"],
        index_location=cfg["index_location"],
        attributes={"source": "test"},
    )
    src = source_volume(meta.shape, dtype, fill)
    root = tmp_path / "array.zarr"
    written = write_array(root, src, meta)
    assert (1, 0, 0) not in written and len(written) == math.prod(meta.shard_grid_shape) - 1

    za = zarr.open_array(str(root), mode="r")
    assert (
        za.shape == meta.shape and za.chunks == meta.chunk_shape and za.shards == meta.shard_shape
    )
    assert za.dtype == np.dtype(dtype)
    assert getattr(za.metadata, "dimension_names", None) == meta.dimension_names
    np.testing.assert_array_equal(za[...], src)
    assert za.attrs["source"] == "test"

    t = ts_open(root)
    expected_labels = [n or "" for n in meta.dimension_names or ("", "", "")]
    assert list(t.domain.labels) == expected_labels
    np.testing.assert_array_equal(t.read().result(), src)

    np.testing.assert_array_equal(read_array_ourselves(root), src)
    parsed = ZarrArrayMetadata.from_json(json.loads((root / "zarr.json").read_text()))
    assert parsed.to_json() == meta.to_json()


# -- shards written by TensorStore and zarr-python, decoded by us ----------------------------
@pytest.mark.parametrize("config", ["raw-end", "zstd-start", "blosc-crc-end"])
def test_tensorstore_written_array_decodes_voxel_and_byte_exact(
    tmp_path: Path, config: str
) -> None:
    cfg = CONFIGS[config]
    meta = ZarrArrayMetadata(
        shape=(13, 10, 7),
        data_type="uint16",
        shard_shape=(8, 4, 4),
        chunk_shape=(4, 2, 2),
        fill_value=0,
        dimension_names=cfg["names"],
        compressor=cfg["compressor"],
        checksum_inner=cfg["checksum_inner"],
        index_location=cfg["index_location"],
    )
    src = source_volume(meta.shape, "uint16", 0, seed=3)
    root = tmp_path / "ts.zarr"
    t = ts.open(
        {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": str(root)},
            "metadata": meta.to_json(),
            "create": True,
        }
    ).result()
    t[...] = src
    np.testing.assert_array_equal(read_array_ourselves(root), src)
    assert not (root / meta.chunk_key((1, 0, 0))).exists()
    for shard in np.ndindex(*meta.shard_grid_shape):
        path = root / meta.chunk_key(shard)
        if path.exists():
            data = path.read_bytes()
            chunks = decode_shard(data, meta.chunks_per_shard, meta.index_location)
            assert encode_shard(chunks, meta.chunks_per_shard, meta.index_location) == data


@pytest.mark.parametrize(
    "compressors",
    [None, GzipCodec(level=4), ZstdCodec(level=2)],
    ids=["none", "gzip", "zstd"],
)
def test_zarr_python_written_array_decodes_voxel_exact(tmp_path: Path, compressors: Any) -> None:
    """zarr-python lays inner chunks out in Morton order; the index makes that irrelevant."""
    src = source_volume((13, 10, 7), "int32", 0, seed=4)
    root = tmp_path / "zp.zarr"
    za = zarr.create_array(
        str(root),
        shape=src.shape,
        shards=(8, 4, 4),
        chunks=(4, 2, 2),
        dtype="int32",
        compressors=compressors,
        fill_value=0,
        dimension_names=["z", "y", "x"],
    )
    za[...] = src
    np.testing.assert_array_equal(read_array_ourselves(root), src)


# -- zarr.json model -------------------------------------------------------------------------
def test_from_json_accepts_what_zarr_python_and_tensorstore_write(tmp_path: Path) -> None:
    zarr.create_array(
        str(tmp_path / "zp"),
        shape=(10, 20),
        shards=(8, 8),
        chunks=(4, 4),
        dtype="float64",
        compressors=[BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle")],
        fill_value=float("nan"),
        dimension_names=["y", "x"],
    )
    zp = ZarrArrayMetadata.from_json(json.loads((tmp_path / "zp" / "zarr.json").read_text()))
    assert zp.compressor == Compressor.blosc("zstd", 3, "bitshuffle")
    assert math.isnan(zp.fill_value) and zp.dimension_names == ("y", "x")
    assert (zp.shard_shape, zp.chunk_shape, zp.chunks_per_shard) == ((8, 8), (4, 4), (2, 2))

    zarr.create_array(
        str(tmp_path / "zp8"), shape=(5,), shards=(4,), chunks=(2,), dtype="uint8", fill_value=3
    )  # 1-byte type: zarr-python omits the bytes codec's endian
    zp8 = ZarrArrayMetadata.from_json(json.loads((tmp_path / "zp8" / "zarr.json").read_text()))
    assert (zp8.data_type, zp8.fill_value, zp8.compressor) == ("uint8", 3, Compressor.zstd(0))

    ts.open(
        {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": str(tmp_path / "ts")},
            "metadata": {
                "shape": [10, 20],
                "data_type": "int16",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8]}},
                "codecs": [
                    {
                        "name": "sharding_indexed",
                        "configuration": {
                            "chunk_shape": [4, 4],
                            "codecs": [
                                {"name": "bytes", "configuration": {"endian": "little"}},
                                {"name": "gzip", "configuration": {"level": 2}},
                                {"name": "crc32c"},
                            ],
                            "index_codecs": [
                                {"name": "bytes", "configuration": {"endian": "little"}},
                                {"name": "crc32c"},
                            ],
                            "index_location": "start",
                        },
                    }
                ],
                "fill_value": -5,
            },
            "create": True,
        }
    ).result()
    raw = json.loads((tmp_path / "ts" / "zarr.json").read_text())
    assert raw["chunk_key_encoding"] == {"name": "default"}  # TensorStore: no configuration
    tsm = ZarrArrayMetadata.from_json(raw)
    assert tsm == ZarrArrayMetadata(
        (10, 20), "int16", (8, 8), (4, 4), -5, None, Compressor.gzip(2), True, "start"
    )


@st.composite
def metadata_cases(draw: st.DrawFn) -> ZarrArrayMetadata:
    rank = draw(st.integers(1, 4))
    chunk = draw(st.lists(st.integers(1, 64), min_size=rank, max_size=rank))
    mult = draw(st.lists(st.integers(1, 8), min_size=rank, max_size=rank))
    shape = draw(st.lists(st.integers(1, 10_000), min_size=rank, max_size=rank))
    dtype = draw(st.sampled_from(["bool", "int8", "int64", "uint16", "uint64", "float64"]))
    dt = np.dtype(dtype)
    if dt.kind == "b":
        fill: Any = draw(st.booleans())
    elif dt.kind == "f":
        fill = draw(st.floats(allow_nan=False))
    else:
        fill = draw(st.integers(int(np.iinfo(dt).min), int(np.iinfo(dt).max)))
    compressor = draw(
        st.sampled_from(
            [
                None,
                Compressor.gzip(9),
                Compressor.zstd(-5),
                Compressor.blosc("lz4hc", 9, "noshuffle"),
            ]
        )
    )
    names = draw(
        st.none() | st.lists(st.none() | st.text(max_size=3), min_size=rank, max_size=rank)
    )
    return ZarrArrayMetadata(
        shape=tuple(shape),
        data_type=dtype,
        shard_shape=tuple(c * m for c, m in zip(chunk, mult, strict=True)),
        chunk_shape=tuple(chunk),
        fill_value=fill,
        dimension_names=None if names is None else tuple(names),
        compressor=compressor,
        checksum_inner=draw(st.booleans()),
        index_location=draw(st.sampled_from(["start", "end"])),
        attributes={"k": draw(st.integers())},
    )


@given(metadata_cases())
def test_metadata_json_round_trip(meta: ZarrArrayMetadata) -> None:
    encoded = json.loads(json.dumps(meta.to_json()))
    assert ZarrArrayMetadata.from_json(encoded) == meta
    assert encoded["codecs"][0]["configuration"]["codecs"][0] == {
        "name": "bytes",
        "configuration": {"endian": "little"},
    }


def test_metadata_geometry_and_keys() -> None:
    meta = ZarrArrayMetadata((100, 64, 33), "uint8", (32, 64, 16), (16, 16, 16))
    assert meta.chunks_per_shard == (2, 4, 1)
    assert meta.shard_grid_shape == (4, 1, 3)
    assert meta.chunk_grid_shape == (7, 4, 3)
    assert meta.chunk_key((3, 0, 2)) == "c/3/0/2"
    assert meta.index_nbytes == 16 * 8 + 4
    with pytest.raises(ValueError, match="out of range"):
        meta.chunk_key((4, 0, 0))
    assert (
        ZarrArrayMetadata((5,), "float32", (4,), (2,), fill_value=math.inf).to_json()["fill_value"]
        == "Infinity"
    )


def test_from_json_float_fill_spellings() -> None:
    base = ZarrArrayMetadata((5,), "float32", (4,), (2,)).to_json()
    for spelling, value in [("-Infinity", -math.inf), ("0x3fc00000", 1.5), (2, 2.0)]:
        parsed = ZarrArrayMetadata.from_json({**base, "fill_value": spelling})
        assert parsed.fill_value == value


# -- errors: one per bad case, each naming the problem ---------------------------------------
def _meta(**kw: Any) -> ZarrArrayMetadata:
    args: dict[str, Any] = dict(
        shape=(10, 10, 10), data_type="uint8", shard_shape=(8, 8, 8), chunk_shape=(4, 4, 4)
    )
    args.update(kw)
    return ZarrArrayMetadata(**args)


def test_error_bad_rank() -> None:
    with pytest.raises(ZarrMetadataError, match=r"shard_shape \(8, 8\) has rank 2"):
        _meta(shard_shape=(8, 8))
    with pytest.raises(ZarrMetadataError, match="dimension_names .* 2 entries"):
        _meta(dimension_names=("y", "x"))
    with pytest.raises(ValueError, match="rank 2, the shard grid .* rank 3"):
        encode_shard({(0, 0): b"x"}, (2, 2, 2))


def test_error_shard_not_multiple_of_chunk() -> None:
    with pytest.raises(ZarrMetadataError, match="not a multiple of chunk_shape .* dimension 1"):
        _meta(shard_shape=(8, 6, 8))


def test_error_non_positive_sizes() -> None:
    with pytest.raises(ZarrMetadataError, match="chunk_shape must be positive"):
        _meta(chunk_shape=(4, 0, 4))


def test_error_unknown_dtype() -> None:
    with pytest.raises(ZarrMetadataError, match="data_type 'S4' is not supported"):
        _meta(data_type="S4")
    with pytest.raises(ZarrMetadataError, match="data_type 'uint4' is not supported"):
        ZarrArrayMetadata.from_json({**_meta().to_json(), "data_type": "uint4"})


@pytest.mark.parametrize(
    ("dtype", "fill"),
    [
        ("uint8", 300),
        ("uint8", -1),
        ("int16", 1.5),
        ("bool", 1),
        ("float32", 1e300),
        ("uint8", "a"),
    ],
)
def test_error_bad_fill_value(dtype: str, fill: Any) -> None:
    with pytest.raises(ZarrMetadataError, match=f"fill_value .* not representable as {dtype}"):
        _meta(data_type=dtype, fill_value=fill)


def test_error_crc_mismatch() -> None:
    data = bytearray(encode_shard({(0,): b"abc", (1,): b"de"}, (2,)))
    data[-10] ^= 0xFF
    with pytest.raises(ShardFormatError, match="crc32c mismatch"):
        decode_shard(bytes(data), (2,))


def test_error_truncated_shard() -> None:
    start = encode_shard({(0,): b"abc", (1,): b"defgh"}, (2,), "start")
    with pytest.raises(ShardFormatError, match=r"outside the \d+-byte shard \(truncated"):
        decode_shard(start[:-2], (2,), "start")
    with pytest.raises(ShardFormatError, match="shorter than its 36-byte index"):
        decode_shard(start[:20], (2,), "start")
    end = encode_shard({(0,): b"abc"}, (2,), "end")
    with pytest.raises(ShardFormatError, match="crc32c mismatch"):
        decode_shard(end[:-1], (2,), "end")


def test_error_offsets_out_of_range_and_half_sentinel() -> None:
    table = np.array([[0, 100], [MISSING, MISSING]], dtype=np.uint64)
    with pytest.raises(ShardFormatError, match=r"entry \(0,\) = \[0, 100\) lies outside"):
        decode_shard(b"abc" + encode_index(table), (2,))
    table = np.array([[2**63, 2**63 + 5], [MISSING, MISSING]], dtype=np.uint64)
    with pytest.raises(ShardFormatError, match="lies outside"):
        decode_shard(b"abc" + encode_index(table), (2,))
    table = np.array([[MISSING, 3], [MISSING, MISSING]], dtype=np.uint64)
    with pytest.raises(ShardFormatError, match=r"entry \(0,\) has only one of offset/nbytes"):
        decode_shard(b"abc" + encode_index(table), (2,))


def test_error_duplicate_chunk() -> None:
    builder = ShardBuilder((2, 2))
    builder.add((1, 0), b"a")
    with pytest.raises(ValueError, match=r"chunk \(1, 0\) added twice"):
        builder.add((1, 0), b"b")
    with pytest.raises(ValueError, match=r"chunk \(1, 0\) added twice"):
        builder.add_many(np.array([[0, 0], [1, 0]]), [b"x", b"y"])
    with pytest.raises(ValueError, match=r"chunk \(0, 1\) added twice"):
        builder.add_many(np.array([[0, 1], [0, 1]]), [b"x", b"y"])


def test_error_out_of_range_coords() -> None:
    builder = ShardBuilder((2, 3))
    with pytest.raises(ValueError, match=r"\(0, 3\) are out of range for the shard grid \(2, 3\)"):
        builder.add((0, 3), b"a")
    with pytest.raises(ValueError, match=r"\(-1, 0\) are out of range"):
        builder.add_many(np.array([[1, 1], [-1, 0]]), [b"a", b"b"])
    with pytest.raises(ValueError, match="out of range"):
        encode_shard({(2, 0): b"a"}, (2, 3))


def test_error_empty_shard() -> None:
    with pytest.raises(ValueError, match="empty shard is not stored"):
        encode_shard({}, (2, 2))
    with pytest.raises(ValueError, match="empty shard is not stored"):
        ShardBuilder((2, 2), name="c/0/0").finish()


def test_error_builder_reuse_after_finish() -> None:
    builder = ShardBuilder((2,))
    builder.add((0,), b"a")
    builder.finish().close()
    with pytest.raises(RuntimeError, match="finished"):
        builder.add((1,), b"b")


def _with_inner(codecs: list[Any]) -> dict[str, Any]:
    obj = _meta().to_json()
    obj["codecs"][0]["configuration"]["codecs"] = codecs
    return obj


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda o: _with_inner([{"name": "bytes"}, {"name": "lz4"}]), "unsupported codec 'lz4'"),
        (
            lambda o: _with_inner([{"name": "transpose", "configuration": {"order": [2, 1, 0]}}]),
            r"codecs\[0\] must be the 'bytes' codec, got 'transpose'",
        ),
        (
            lambda o: _with_inner([{"name": "bytes"}, {"name": "crc32c"}, {"name": "gzip"}]),
            "'crc32c' is out of place",
        ),
        (
            lambda o: {**_with_inner([{"name": "bytes"}]), "data_type": "uint16"},
            "needs 'endian' for a multi-byte data type",
        ),
        (
            lambda o: {**o, "chunk_key_encoding": {"name": "v2"}},
            "chunk_key_encoding must be 'default', got 'v2'",
        ),
        (
            lambda o: {
                **o,
                "chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}},
            },
            "separator must be '/'",
        ),
        (lambda o: {**o, "storage_transformers": [{"name": "x"}]}, "storage_transformers"),
        (lambda o: {**o, "zarr_format": 2}, "zarr_format must be 3"),
        (lambda o: {**o, "extra": 1}, "unsupported member 'extra'"),
        (
            lambda o: {**o, "chunk_grid": {"name": "rectilinear", "configuration": {}}},
            "chunk_grid must be 'regular'",
        ),
        (lambda o: {**o, "fill_value": "NaN"}, "fill_value 'NaN' is not representable as uint8"),
    ],
)
def test_error_from_json_names_the_field(mutate: Any, message: str) -> None:
    obj = mutate(_meta().to_json())
    with pytest.raises(ZarrMetadataError, match=message):
        ZarrArrayMetadata.from_json(obj)


def test_error_from_json_codec_configurations() -> None:
    big = _with_inner([{"name": "bytes", "configuration": {"endian": "big"}}])
    with pytest.raises(ZarrMetadataError, match="endian must be 'little', got 'big'"):
        ZarrArrayMetadata.from_json(big)
    zstd = _with_inner([{"name": "bytes"}, {"name": "zstd", "configuration": {"checksum": True}}])
    with pytest.raises(ZarrMetadataError, match=r"codecs\[1\]: zstd checksum=true"):
        ZarrArrayMetadata.from_json(zstd)
    blosc = _with_inner(
        [
            {"name": "bytes"},
            {"name": "blosc", "configuration": {"cname": "snappy", "shuffle": "shuffle"}},
        ]
    )
    with pytest.raises(ZarrMetadataError, match=r"codecs\[1\]: blosc cname .* 'snappy'"):
        ZarrArrayMetadata.from_json(blosc)
    obj = _meta().to_json()
    obj["codecs"][0]["configuration"]["index_codecs"] = [{"name": "bytes"}]
    with pytest.raises(ZarrMetadataError, match=r"index_codecs must be \[bytes .*, crc32c\]"):
        ZarrArrayMetadata.from_json(obj)
    obj = _meta().to_json()
    obj["codecs"].insert(0, {"name": "transpose", "configuration": {"order": [0, 1, 2]}})
    with pytest.raises(ZarrMetadataError, match="exactly one 'sharding_indexed' codec"):
        ZarrArrayMetadata.from_json(obj)


def test_error_bad_compressor_settings() -> None:
    with pytest.raises(ZarrMetadataError, match=r"gzip level must be an integer in 0..9, got 12"):
        Compressor.gzip(12)
    with pytest.raises(ZarrMetadataError, match="blosc shuffle must be one of"):
        Compressor.blosc(shuffle="byte")
    with pytest.raises(ZarrMetadataError, match="compressor must be one of"):
        Compressor("lzma", 1)
    with pytest.raises(ZarrMetadataError, match="compressor must be a Compressor"):
        _meta(compressor="gzip")
    with pytest.raises(ZarrMetadataError, match="index_location must be 'start' or 'end'"):
        _meta(index_location="middle")
