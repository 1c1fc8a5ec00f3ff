"""Chunk codecs checked against the reference libraries and TensorStore."""

from __future__ import annotations

import gzip
import json
import os
import pathlib

import compressed_segmentation as cseg
import numcodecs
import numpy as np
import pytest
import tensorstore as ts
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from shardwright.codecs import EncodingError, byte_codec, chunk_encoding


def _em_like(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    grids = np.meshgrid(*(np.arange(n) for n in shape), indexing="ij")
    smooth = 120 + 40 * np.sin(grids[0] / 5.0) + 30 * np.cos(grids[1] / 7.0)
    return np.clip(smooth + rng.normal(0, 8, shape), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("level", [0, 1, 6, 9])
def test_gzip_is_standard_and_deterministic(level: int) -> None:
    data = _em_like((32, 32, 16)).tobytes()
    codec = byte_codec("gzip", level=level)
    assert codec is not None
    out = codec.compress(data)
    assert out[:2] == b"\x1f\x8b" and gzip.decompress(out) == data
    assert codec.compress(data) == out
    assert codec.decompress(gzip.compress(data)) == data


def test_zstd_and_blosc_interoperate_with_their_reference_libraries() -> None:
    data = _em_like((16, 16, 16)).tobytes()
    zstd = byte_codec("zstd", level=5)
    assert zstd is not None
    assert zstandard.ZstdDecompressor().decompress(zstd.compress(data)) == data
    blosc = byte_codec("blosc", cname="lz4", clevel=4, shuffle="bitshuffle", typesize=2)
    assert blosc is not None
    assert bytes(numcodecs.Blosc().decode(blosc.compress(data))) == data
    assert blosc.decompress(numcodecs.Blosc(cname="zstd").encode(data)) == data


@pytest.mark.parametrize("name", ["gzip", "zstd", "blosc"])
def test_zarr_json_entries_are_what_tensorstore_reads(tmp_path: pathlib.Path, name: str) -> None:
    """An unsharded zarr3 array whose single chunk we compressed: TensorStore decodes it."""
    vol = _em_like((8, 8, 8)).astype(np.uint16)
    options = {"typesize": 2} if name == "blosc" else {}
    codec = byte_codec(name, **options)
    assert codec is not None
    meta = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [8, 8, 8],
        "data_type": "uint16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8, 8]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, codec.zarr_json()],
    }
    (tmp_path / "zarr.json").write_text(json.dumps(meta))
    os.makedirs(tmp_path / "c" / "0" / "0")
    (tmp_path / "c" / "0" / "0" / "0").write_bytes(codec.compress(vol.astype("<u2").tobytes()))
    got = ts.open({"driver": "zarr3", "kvstore": f"file://{tmp_path}/"}).result().read().result()
    np.testing.assert_array_equal(np.asarray(got), vol)


shapes = st.tuples(st.integers(1, 20), st.integers(1, 20), st.integers(1, 12), st.integers(1, 3))


@given(shapes, st.sampled_from(["uint8", "int16", "uint32", "uint64", "float32"]))
def test_raw_is_fortran_order_little_endian(shape: tuple[int, ...], dtype: str) -> None:
    rng = np.random.default_rng(sum(shape))
    chunk = (rng.random(shape) * 100).astype(dtype)
    encoding = chunk_encoding("raw")
    data = encoding.encode(chunk)
    assert data == chunk.astype(np.dtype(dtype).newbyteorder("<")).tobytes(order="F")
    np.testing.assert_array_equal(encoding.decode(data, shape, np.dtype(dtype)), chunk)


def test_raw_accepts_strided_views_of_c_order_sources() -> None:
    zyx = np.arange(10 * 12 * 14, dtype=np.uint16).reshape(10, 12, 14)
    view = zyx.T[2:9, 3:11, 1:6, np.newaxis]  # [x, y, z, c] slice of a transposed array
    data = chunk_encoding("raw").encode(view)
    assert data == np.asfortranarray(view).tobytes(order="F")


@given(
    shapes.map(lambda s: s[:3]),
    st.sampled_from(["uint32", "uint64"]),
    st.sampled_from([(8, 8, 8), (4, 8, 2), (1, 1, 1), (16, 4, 4)]),
    st.integers(1, 2),
)
def test_compressed_segmentation_matches_the_reference_library(
    shape: tuple[int, int, int], dtype: str, block: tuple[int, int, int], channels: int
) -> None:
    rng = np.random.default_rng(sum(shape))
    labels = rng.integers(0, 5, (*shape, channels)).astype(dtype)
    labels[labels == 4] = np.iinfo(dtype).max
    encoding = chunk_encoding("compressed_segmentation", block_size=block)
    data = encoding.encode(labels)
    if channels == 1:
        reference = cseg.decompress(data, shape, np.dtype(dtype), block_size=block, order="F")
        np.testing.assert_array_equal(np.asarray(reference), labels[..., 0])
    np.testing.assert_array_equal(encoding.decode(data, labels.shape, np.dtype(dtype)), labels)


@pytest.mark.parametrize("encoding", ["compressed_segmentation", "png", "jpeg", "raw"])
def test_we_decode_chunks_tensorstore_writes(tmp_path: pathlib.Path, encoding: str) -> None:
    dtype = "uint64" if encoding == "compressed_segmentation" else "uint8"
    size = (20, 12, 6)
    vol = (_em_like(size) // 40).astype(dtype) if dtype == "uint64" else _em_like(size)
    scale = {
        "size": list(size),
        "resolution": [1, 1, 1],
        "chunk_size": list(size),
        "encoding": encoding,
    }
    if encoding == "compressed_segmentation":
        scale["compressed_segmentation_block_size"] = [4, 4, 2]
    store = ts.open(
        {
            "driver": "neuroglancer_precomputed",
            "kvstore": f"file://{tmp_path}/",
            "multiscale_metadata": {"type": "image", "data_type": dtype, "num_channels": 1},
            "scale_metadata": scale,
            "create": True,
        }
    ).result()
    store.write(vol[..., None]).result()
    key = json.loads((tmp_path / "info").read_text())["scales"][0]["key"]
    (chunk_file,) = list((tmp_path / key).iterdir())
    options = {"block_size": (4, 4, 2)} if encoding == "compressed_segmentation" else {}
    got = chunk_encoding(encoding, **options).decode(
        chunk_file.read_bytes(), (*size, 1), np.dtype(dtype)
    )
    if encoding == "jpeg":  # lossy: our decode must agree with TensorStore's own decode
        theirs = np.asarray(store.read().result())[..., 0]
        assert np.abs(got[..., 0].astype(int) - theirs.astype(int)).max() <= 1
    else:
        np.testing.assert_array_equal(got[..., 0], vol)


def test_png_round_trips_uint16_and_four_channels() -> None:
    rng = np.random.default_rng(0)
    for chunk in (
        rng.integers(0, 65535, (9, 7, 5, 1), dtype=np.uint16),
        rng.integers(0, 255, (9, 7, 5, 4), dtype=np.uint8),
    ):
        encoding = chunk_encoding("png")
        np.testing.assert_array_equal(
            encoding.decode(encoding.encode(chunk), chunk.shape, chunk.dtype), chunk
        )


@pytest.mark.parametrize(
    ("name", "options", "dtype", "channels", "layer", "message"),
    [
        ("jpeg", {}, "uint64", 1, "image", "jpeg encoding cannot store uint64"),
        ("jpeg", {}, "uint8", 2, "image", "1 or 3 channels"),
        ("jpeg", {}, "uint8", 1, "segmentation", "lossy"),
        (
            "compressed_segmentation",
            {},
            "float32",
            1,
            "segmentation",
            "compressed_segmentation encoding cannot store float32",
        ),
        ("png", {}, "float32", 1, "image", "png encoding cannot store float32"),
        ("png", {}, "uint16", 3, "image", "1 to 2 channels"),
        ("raw", {}, "float64", 1, "image", "raw encoding cannot store float64"),
    ],
)
def test_mismatched_dtype_and_encoding_raise_one_clear_error(
    name: str, options: dict, dtype: str, channels: int, layer: str, message: str
) -> None:
    with pytest.raises(EncodingError, match=message):
        chunk_encoding(name, **options).check(np.dtype(dtype), channels, layer)


def test_unknown_names_are_refused() -> None:
    with pytest.raises(EncodingError, match="unknown precomputed encoding 'webp'"):
        chunk_encoding("webp")
    with pytest.raises(EncodingError, match="unknown compression 'lzma'"):
        byte_codec("lzma")
    assert byte_codec("none") is None
