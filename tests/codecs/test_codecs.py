"""Chunk codecs checked against independent readers: TensorStore, CloudVolume, zarr-python and the
reference libraries (gzip/zlib, zstandard, numcodecs, compressed-segmentation)."""

from __future__ import annotations

import gzip
import json
import pathlib
import pickle
import zlib
from collections.abc import Iterator

import compressed_segmentation as cseg
import numcodecs
import numpy as np
import pytest
import tensorstore as ts
import zarr
import zstandard
from cloudvolume import CloudVolume
from cloudvolume import chunks as cv_chunks
from hypothesis import given
from hypothesis import strategies as st

from shardwright.codecs import (
    ByteCodec,
    ChunkEncoding,
    EncodingError,
    byte_codec,
    chunk_encoding,
)
from shardwright.codecs import compressed_segmentation as cseg_codec
from shardwright.codecs.gzip import isal_level
from tests.support import volumes

Shape4 = tuple[int, int, int, int]
_volume = volumes.codec_chunk_xyzc
_smooth = volumes.em_like_uint8


def _boxes(size: tuple[int, ...], chunk: tuple[int, ...]) -> Iterator[tuple[slice, ...]]:
    """Every chunk of the grid, edge chunks truncated at the volume's end."""
    for gx in range(0, size[0], chunk[0]):
        for gy in range(0, size[1], chunk[1]):
            for gz in range(0, size[2], chunk[2]):
                yield tuple(
                    slice(lo, min(lo + c, n))
                    for lo, c, n in zip((gx, gy, gz), chunk, size, strict=True)
                )


def _chunk_name(box: tuple[slice, ...]) -> str:
    return "_".join(f"{s.start}-{s.stop}" for s in box)


def _write_precomputed(
    root: pathlib.Path,
    vol: np.ndarray,
    chunk: tuple[int, int, int],
    encoding: ChunkEncoding,
    layer_type: str = "image",
) -> None:
    """An unsharded precomputed volume whose every chunk our encoder produced."""
    scale: dict[str, object] = {
        "key": "s0",
        "size": list(vol.shape[:3]),
        "resolution": [4, 4, 40],
        "voxel_offset": [0, 0, 0],
        "chunk_sizes": [list(chunk)],
        "encoding": encoding.name,
    }
    if encoding.name == "compressed_segmentation":
        scale["compressed_segmentation_block_size"] = list(encoding.block_size)  # type: ignore[attr-defined]
    info = {
        "@type": "neuroglancer_multiscale_volume",
        "type": layer_type,
        "data_type": vol.dtype.name,
        "num_channels": vol.shape[3],
        "scales": [scale],
    }
    (root / "s0").mkdir(parents=True)
    (root / "info").write_text(json.dumps(info))
    for box in _boxes(vol.shape[:3], chunk):
        (root / "s0" / _chunk_name(box)).write_bytes(encoding.encode(vol[box]))


def _read_tensorstore(root: pathlib.Path) -> np.ndarray:
    store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{root}/"}).result()
    return np.asarray(store.read().result())


def _read_cloudvolume(root: pathlib.Path) -> np.ndarray:
    return np.asarray(CloudVolume(f"file://{root}", progress=False)[:, :, :])


# --- byte codecs -------------------------------------------------------------------------------


@pytest.mark.parametrize("level", [0, 1, 4, 6, 9])
def test_gzip_is_a_standard_deterministic_member(level: int) -> None:
    data = _smooth((32, 32, 16)).tobytes()
    codec = byte_codec("gzip", level=level)
    assert codec is not None
    out = codec.compress(memoryview(data))
    assert out[:3] == b"\x1f\x8b\x08" and out[4:8] == b"\0\0\0\0"  # deflate, mtime 0
    assert gzip.decompress(out) == data
    assert zlib.decompress(out, wbits=31) == data
    assert codec.compress(data) == out
    assert codec.decompress(gzip.compress(data, mtime=0)) == data


def test_isal_levels_follow_the_documented_zlib_mapping() -> None:
    assert [isal_level(n) for n in range(10)] == [1, 1, 1, 1, 2, 2, 2, 2, 3, 3]
    for bad in (-1, 10, 2.5, True):
        with pytest.raises(ValueError, match="gzip level"):
            byte_codec("gzip", level=bad)


def test_zstd_and_blosc_interoperate_with_their_reference_libraries() -> None:
    data = _smooth((16, 16, 16)).tobytes()
    zstd = byte_codec("zstd", level=5)
    assert zstd is not None
    assert zstandard.ZstdDecompressor().decompress(zstd.compress(data)) == data
    streamed = zstandard.ZstdCompressor().compressobj()  # no content size in this frame
    assert zstd.decompress(streamed.compress(data) + streamed.flush()) == data

    blosc = byte_codec("blosc", cname="lz4", clevel=4, shuffle="bitshuffle", typesize=2)
    assert blosc is not None
    assert bytes(numcodecs.Blosc().decode(blosc.compress(data))) == data
    assert blosc.decompress(numcodecs.Blosc(cname="zstd").encode(data)) == data


@pytest.mark.parametrize("name", ["gzip", "zstd", "blosc"])
def test_byte_codecs_pickle_and_satisfy_the_protocol(name: str) -> None:
    """Dask ships codecs to workers by pickle."""
    codec = byte_codec(name)
    assert isinstance(codec, ByteCodec)
    again = pickle.loads(pickle.dumps(codec))
    assert again == codec and again.name == name
    assert again.decompress(codec.compress(b"shardwright" * 100)) == b"shardwright" * 100


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("gzip", {"level": 6}),
        ("zstd", {"level": 3}),
        ("blosc", {"cname": "zstd", "shuffle": "shuffle", "typesize": 2}),
        ("blosc", {"cname": "lz4", "shuffle": "bitshuffle", "typesize": 2}),
        ("blosc", {"cname": "blosclz", "shuffle": "noshuffle", "typesize": 2, "clevel": 9}),
    ],
)
def test_zarr_json_entries_are_what_zarr_python_and_tensorstore_read(
    tmp_path: pathlib.Path, name: str, options: dict[str, object]
) -> None:
    """An unsharded zarr3 array whose chunks we compressed ourselves, read by both readers."""
    vol = _smooth((16, 8, 8)).astype(np.uint16) * 257
    codec = byte_codec(name, **options)
    assert codec is not None
    meta = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [16, 8, 8],
        "data_type": "uint16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8, 8]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, codec.zarr_json()],
        "attributes": {},
    }
    (tmp_path / "zarr.json").write_text(json.dumps(meta))
    for i in range(2):
        (tmp_path / "c" / str(i) / "0").mkdir(parents=True)
        block = vol[8 * i : 8 * i + 8].astype("<u2").tobytes()
        (tmp_path / "c" / str(i) / "0" / "0").write_bytes(codec.compress(block))
    by_zarr = zarr.open_array(str(tmp_path), mode="r")[...]
    np.testing.assert_array_equal(by_zarr, vol)
    by_ts = ts.open({"driver": "zarr3", "kvstore": f"file://{tmp_path}/"}).result().read().result()
    np.testing.assert_array_equal(np.asarray(by_ts), vol)


# --- precomputed chunk encodings: our codec against itself and the reference library ----------

shapes = st.tuples(st.integers(1, 20), st.integers(1, 20), st.integers(1, 12), st.integers(1, 3))


@given(shapes, st.sampled_from(["uint8", "int8", "int16", "uint32", "uint64", "float32"]))
def test_raw_is_fortran_order_little_endian(shape: Shape4, dtype: str) -> None:
    chunk = _volume(shape, dtype, seed=sum(shape))
    encoding = chunk_encoding("raw")
    data = encoding.encode(chunk)
    assert data == chunk.astype(np.dtype(dtype).newbyteorder("<")).tobytes(order="F")
    np.testing.assert_array_equal(encoding.decode(data, shape, np.dtype(dtype)), chunk)
    big_endian = chunk.astype(np.dtype(dtype).newbyteorder(">"))
    assert encoding.encode(big_endian) == data


def test_raw_accepts_strided_views_of_c_order_sources() -> None:
    czyx = np.arange(2 * 10 * 12 * 14, dtype=np.uint16).reshape(2, 10, 12, 14)
    view = czyx.T[2:9, 3:11, 1:6]  # an [x, y, z, c] slice of a transposed (c, z, y, x) block
    data = chunk_encoding("raw").encode(view)
    assert data == np.asfortranarray(view).tobytes(order="F")
    assert data[:4] == np.array([czyx[0, 1, 3, 2], czyx[0, 1, 3, 3]], "<u2").tobytes()


@given(
    shapes,
    st.sampled_from(["uint32", "uint64"]),
    st.sampled_from([(8, 8, 8), (4, 8, 2), (1, 1, 1), (16, 4, 4), (3, 5, 7)]),
)
def test_compressed_segmentation_matches_the_reference_library(
    shape: Shape4, dtype: str, block: tuple[int, int, int]
) -> None:
    labels = _volume(shape, dtype, seed=sum(shape))
    encoding = chunk_encoding("compressed_segmentation", block_size=block)
    data = encoding.encode(labels)
    if shape[3] == 1:  # one channel: byte for byte what the reference library writes
        native = np.asfortranarray(labels[..., 0])
        assert data == bytes(cseg.compress(native, block_size=block, order="F"))
        reference = cseg.decompress(data, shape[:3], np.dtype(dtype), block_size=block, order="F")
        np.testing.assert_array_equal(np.asarray(reference), labels[..., 0])
    np.testing.assert_array_equal(encoding.decode(data, shape, np.dtype(dtype)), labels)


def test_the_gil_free_compressed_segmentation_encoder_is_built() -> None:
    """CI has a C compiler: a missing extension would silently cost the parallel encoder."""
    assert cseg_codec._cseg is not None, "shardwright.codecs._cseg was not built at install"


def _labels(draw: st.DrawFn, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Label fields that reach every branch: one label, a few, all distinct, near 2**64, and
    repeated blocks (so tables are shared)."""
    kind = draw(st.sampled_from(["constant", "few", "distinct", "high", "tiled"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    top = np.iinfo(dtype).max
    if kind == "constant":
        return np.full(shape, draw(st.sampled_from([0, 1, top])), dtype=dtype)
    if kind == "distinct":
        return rng.permutation(int(np.prod(shape))).reshape(shape).astype(dtype)
    if kind == "high":
        return (top - rng.integers(0, 40, shape).astype(np.uint64)).astype(dtype)
    if kind == "tiled":
        tile = rng.integers(0, 5, (2, 3, 2, 1)).astype(dtype)
        reps = [-(-n // t) for n, t in zip(shape, tile.shape, strict=True)]
        return np.tile(tile, reps)[: shape[0], : shape[1], : shape[2], : shape[3]].copy()
    return rng.integers(0, draw(st.integers(2, 300)), shape).astype(dtype)


@given(st.data(), shapes, st.sampled_from(["uint32", "uint64", ">u8"]))
def test_c_encoder_writes_the_reference_librarys_bytes(
    data: st.DataObject, shape: Shape4, dtype: str
) -> None:
    """Byte for byte the reference library's stream, for strided views and several channels."""
    block = data.draw(st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9)))
    labels = _labels(data.draw, shape, np.dtype(dtype).newbyteorder("=").str)
    labels = labels.astype(dtype)
    encoding = chunk_encoding("compressed_segmentation", block_size=block)
    # A C-order (c, z, y, x) block seen as [x, y, z, c], the way sources hand chunks over.
    view = np.ascontiguousarray(labels.transpose(3, 2, 1, 0)).transpose(3, 2, 1, 0)
    if data.draw(st.booleans()):
        view = view[::-1, :, ::-1]  # negative strides too
        labels = labels[::-1, :, ::-1]
    ours = encoding.encode(view)
    assert ours == encoding.encode_with_reference_library(np.ascontiguousarray(labels))
    native = np.dtype(dtype).newbyteorder("=")
    np.testing.assert_array_equal(encoding.decode(ours, shape, native), labels)


def test_without_the_c_encoder_the_reference_library_encodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    labels = _volume((19, 11, 6, 2), "uint64", seed=3)
    encoding = chunk_encoding("compressed_segmentation", block_size=(4, 8, 2))
    with_c = encoding.encode(labels)
    monkeypatch.setattr(cseg_codec, "_cseg", None)
    assert encoding.encode(labels) == with_c


def test_compressed_segmentation_past_the_24_bit_offsets_is_a_clear_error() -> None:
    """All-distinct uint64 labels in a 192^3 chunk need tables beyond 2^24 words."""
    labels = np.arange(192**3, dtype=np.uint64).reshape(192, 192, 192, 1)
    with pytest.raises(EncodingError, match="24-bit offset limit; use smaller chunks"):
        chunk_encoding("compressed_segmentation").encode(labels)


def test_png_round_trips_every_accepted_dtype_and_channel_count() -> None:
    encoding = chunk_encoding("png")
    for dtype in ("uint8", "uint16"):
        for channels in (1, 2, 3, 4):
            chunk = _volume((9, 7, 5, channels), "int16", channels).astype(dtype)
            decoded = encoding.decode(encoding.encode(chunk), chunk.shape, chunk.dtype)
            np.testing.assert_array_equal(decoded, chunk)


# --- our chunks read by TensorStore and CloudVolume ---------------------------------------------

VOLUME = (21, 13, 7)  # not a multiple of the chunk size: edge chunks of 5 x 5 x 3
CHUNK = (8, 8, 4)

READ_CASES = [
    # (encoding, options, dtype, channels, layer type, CloudVolume reads it right)
    ("raw", {}, "uint8", 1, "image", True),
    ("raw", {}, "int16", 2, "image", True),
    ("raw", {}, "uint64", 1, "segmentation", True),
    ("raw", {}, "float32", 3, "image", True),
    ("compressed_segmentation", {"block_size": (8, 8, 8)}, "uint32", 1, "segmentation", True),
    ("compressed_segmentation", {"block_size": (4, 8, 2)}, "uint64", 1, "segmentation", True),
    ("compressed_segmentation", {"block_size": (4, 8, 2)}, "uint32", 2, "image", True),
    ("compressed_segmentation", {"block_size": (2, 3, 5)}, "uint64", 2, "image", True),
    ("png", {}, "uint8", 1, "image", True),
    # CloudVolume decodes multi-channel png/jpeg pixels as planar though its own encoder
    # (like TensorStore and Neuroglancer) writes them interleaved, and its png reader (libspng)
    # misreads 16-bit samples: TensorStore only for these.
    ("png", {}, "uint16", 1, "segmentation", False),
    ("png", {}, "uint8", 3, "image", False),
    ("png", {}, "uint16", 4, "image", False),
    ("jpeg", {"quality": 90}, "uint8", 1, "image", True),
    ("jpeg", {"quality": 90}, "uint8", 3, "image", False),
]


@pytest.mark.parametrize(("name", "options", "dtype", "channels", "layer", "cv_reads"), READ_CASES)
def test_tensorstore_and_cloudvolume_read_our_chunks(
    tmp_path: pathlib.Path,
    name: str,
    options: dict[str, object],
    dtype: str,
    channels: int,
    layer: str,
    cv_reads: bool,
) -> None:
    encoding = chunk_encoding(name, **options)
    encoding.check(np.dtype(dtype), channels, layer)
    if name == "jpeg":
        vol = np.stack([_smooth(VOLUME, c, noise=0) for c in range(channels)], axis=-1)
    else:
        vol = _volume((*VOLUME, channels), dtype)
    _write_precomputed(tmp_path, vol, CHUNK, encoding, layer)
    readers = {"tensorstore": _read_tensorstore(tmp_path)}
    if cv_reads:
        readers["cloudvolume"] = _read_cloudvolume(tmp_path)
    for reader, got in readers.items():
        assert got.shape == vol.shape and got.dtype == vol.dtype, reader
        if name == "jpeg":
            error = np.abs(got.astype(np.int16) - vol.astype(np.int16))
            assert error.mean() < 2.0 and error.max() < 40, (reader, error.mean(), error.max())
        else:
            np.testing.assert_array_equal(got, vol, err_msg=reader)
    if name == "jpeg":  # a lossy stream still decodes the same in TensorStore and here
        ours = np.empty_like(vol)
        for box in _boxes(VOLUME, CHUNK):
            data = (tmp_path / "s0" / _chunk_name(box)).read_bytes()
            shape = (*(s.stop - s.start for s in box), channels)
            ours[box] = encoding.decode(data, shape, vol.dtype)
        assert np.abs(ours.astype(int) - readers["tensorstore"].astype(int)).max() <= 1


# --- chunks others wrote, read by our decoders --------------------------------------------------

WRITE_CASES = [
    ("raw", "uint16", 2, None),
    ("compressed_segmentation", "uint64", 2, (4, 4, 2)),
    ("compressed_segmentation", "uint32", 1, (8, 8, 8)),
    ("png", "uint8", 3, None),
    ("png", "uint16", 1, None),
    ("jpeg", "uint8", 1, None),
    ("jpeg", "uint8", 3, None),
]


@pytest.mark.parametrize(("name", "dtype", "channels", "block"), WRITE_CASES)
def test_we_decode_chunks_tensorstore_writes(
    tmp_path: pathlib.Path,
    name: str,
    dtype: str,
    channels: int,
    block: tuple[int, int, int] | None,
) -> None:
    size = (20, 12, 6)
    vol = _volume((*size, channels), dtype)
    scale: dict[str, object] = {
        "size": list(size),
        "resolution": [1, 1, 1],
        "chunk_size": list(CHUNK),
        "encoding": name,
    }
    if block is not None:
        scale["compressed_segmentation_block_size"] = list(block)
    store = ts.open(
        {
            "driver": "neuroglancer_precomputed",
            "kvstore": f"file://{tmp_path}/",
            "multiscale_metadata": {"type": "image", "data_type": dtype, "num_channels": channels},
            "scale_metadata": scale,
            "create": True,
        }
    ).result()
    store.write(vol).result()
    key = json.loads((tmp_path / "info").read_text())["scales"][0]["key"]
    encoding = chunk_encoding(name, **({"block_size": block} if block else {}))
    ours = np.zeros_like(vol)
    boxes = list(_boxes(size, CHUNK))
    assert sorted(p.name for p in (tmp_path / key).iterdir()) == sorted(map(_chunk_name, boxes))
    for box in boxes:
        data = (tmp_path / key / _chunk_name(box)).read_bytes()
        shape = (*(s.stop - s.start for s in box), channels)
        ours[box] = encoding.decode(data, shape, np.dtype(dtype))
    if name == "jpeg":  # lossy: our decode must agree with TensorStore's decode of its own bytes
        theirs = np.asarray(store.read().result())
        assert np.abs(ours.astype(int) - theirs.astype(int)).max() <= 1
    else:
        np.testing.assert_array_equal(ours, vol)


@pytest.mark.parametrize(
    ("name", "dtype", "channels"),
    [("png", "uint8", 3), ("png", "uint8", 1), ("jpeg", "uint8", 3), ("jpeg", "uint8", 1)],
)
def test_we_decode_chunks_cloudvolume_encodes(name: str, dtype: str, channels: int) -> None:
    chunk = _volume((9, 7, 5, channels), dtype, seed=3)
    if name == "png":
        data = cv_chunks.encode_png(chunk)
        np.testing.assert_array_equal(
            chunk_encoding("png").decode(data, chunk.shape, chunk.dtype), chunk
        )
    else:
        data = cv_chunks.encode_jpeg(chunk, quality=95)
        got = chunk_encoding("jpeg").decode(data, chunk.shape, chunk.dtype)
        assert np.abs(got.astype(int) - chunk.astype(int)).mean() < 6


def test_compressed_segmentation_bytes_equal_cloudvolumes() -> None:
    labels = _volume((21, 13, 7, 1), "uint64")
    ours = chunk_encoding("compressed_segmentation", block_size=(4, 8, 2)).encode(labels)
    assert ours == bytes(cv_chunks.encode_compressed_segmentation(labels, (4, 8, 2)))


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "dtype", "channels", "layer", "message"),
    [
        ("jpeg", "uint64", 1, "image", "jpeg encoding cannot store uint64"),
        ("jpeg", "uint8", 2, "image", "jpeg encoding needs 1 or 3 channels, got 2"),
        ("jpeg", "uint8", 1, "segmentation", "lossy and would corrupt segmentation"),
        ("compressed_segmentation", "float32", 1, "image", "cannot store float32"),
        ("compressed_segmentation", "int32", 1, "segmentation", "cannot store int32"),
        ("png", "float32", 1, "image", "png encoding cannot store float32"),
        ("png", "uint16", 5, "image", "png encoding stores 1 to 4 channels, got 5"),
        ("raw", "float64", 1, "image", "raw encoding cannot store float64"),
        ("raw", "int64", 1, "image", "raw encoding cannot store int64"),
        ("raw", "uint8", 0, "image", "at least 1 channels, got 0"),
    ],
)
def test_mismatched_dtype_and_encoding_raise_one_clear_error(
    name: str, dtype: str, channels: int, layer: str, message: str
) -> None:
    with pytest.raises(EncodingError, match=message):
        chunk_encoding(name).check(np.dtype(dtype), channels, layer)


@pytest.mark.parametrize(
    ("name", "dtype"), [("png", "uint16"), ("compressed_segmentation", "uint64")]
)
def test_png_on_a_segmentation_is_fine(name: str, dtype: str) -> None:
    """png is lossless, as compressed_segmentation is: `check` lets a segmentation through
    (it raises what it refuses), and the labels come back exactly."""
    encoding = chunk_encoding(name)
    encoding.check(np.dtype(dtype), 1, "segmentation")
    labels = _volume((9, 7, 5, 1), dtype, seed=4)
    assert len(np.unique(labels)) > 1
    decoded = encoding.decode(encoding.encode(labels), labels.shape, labels.dtype)
    np.testing.assert_array_equal(decoded, labels)


def test_encoders_refuse_what_check_refuses() -> None:
    with pytest.raises(EncodingError, match="jpeg encoding cannot store uint16"):
        chunk_encoding("jpeg").encode(np.zeros((4, 4, 4, 1), np.uint16))
    with pytest.raises(EncodingError, match="1 or 3 channels, got 2"):
        chunk_encoding("jpeg").encode(np.zeros((4, 4, 4, 2), np.uint8))
    with pytest.raises(EncodingError, match="compressed_segmentation encoding cannot store"):
        chunk_encoding("compressed_segmentation").encode(np.zeros((4, 4, 4), np.float32))
    with pytest.raises(EncodingError, match="1 to 4 channels, got 5"):
        chunk_encoding("png").encode(np.zeros((4, 4, 4, 5), np.uint8))


def test_unknown_names_and_options_are_refused() -> None:
    with pytest.raises(EncodingError, match="unknown precomputed encoding 'webp'"):
        chunk_encoding("webp")
    with pytest.raises(EncodingError, match="unknown compression 'lzma'"):
        byte_codec("lzma")
    with pytest.raises(EncodingError, match="'raw' takes no options; got quality"):
        chunk_encoding("raw", quality=90)
    with pytest.raises(EncodingError, match="'zstd' takes level; got clevel"):
        byte_codec("zstd", clevel=3)
    assert byte_codec("none") is None and byte_codec(None) is None


def test_truncated_chunks_raise_instead_of_misreading() -> None:
    labels = _volume((8, 8, 8, 2), "uint32")
    encoding = chunk_encoding("compressed_segmentation")
    data = encoding.encode(labels)
    with pytest.raises(ValueError, match="truncated"):
        encoding.decode(data[:4], labels.shape, labels.dtype)
    with pytest.raises(ValueError, match="raw chunk is 10 bytes"):
        chunk_encoding("raw").decode(b"\0" * 10, (2, 2, 2, 1), np.dtype("uint16"))
    image = chunk_encoding("png").encode(np.zeros((4, 4, 4, 1), np.uint8))
    with pytest.raises(ValueError, match="not a"):
        chunk_encoding("png").decode(image, (4, 4, 5, 1), np.dtype("uint8"))
