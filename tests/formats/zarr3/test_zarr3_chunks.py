"""The zarr3 inner-chunk codec chain, through the engines' own epoch step: fill chunks
skipped, edge chunks padded, compressor and crc32c applied in that order; what it stores reads
back through zarr-python's own codecs."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import zarr

from shardwright import zarr3
from shardwright.engine.scatter import zarr3_epoch_chunks
from shardwright.formats.zarr3.chunks import InnerChunkChain, pad


def _stored(chain: InnerChunkChain, block: np.ndarray) -> bytes | None:
    """One chunk (an edge chunk may be smaller) as the engines store it; None when it is all
    fill value and is not stored."""
    chunks, stored, positions = zarr3_epoch_chunks(np, chain, block, (0,) * block.ndim)
    assert len(chunks) == 1 and positions.tolist() == [[0] * block.ndim]
    return chain.encode_bytes(chunks[stored[0]].data) if stored.size else None


def _meta(compressor: zarr3.Compressor | None, checksum: bool) -> zarr3.ZarrArrayMetadata:
    return zarr3.ZarrArrayMetadata(
        shape=(20, 20),
        data_type="uint16",
        shard_shape=(16, 16),
        chunk_shape=(8, 8),
        fill_value=3,
        compressor=compressor,
        checksum_inner=checksum,
    )


@pytest.mark.parametrize("compressor", [None, zarr3.Compressor.gzip(), zarr3.Compressor.zstd()])
@pytest.mark.parametrize("checksum", [False, True])
def test_edge_chunks_are_padded_and_read_back(
    compressor: zarr3.Compressor | None, checksum: bool
) -> None:
    chain = InnerChunkChain.of(_meta(compressor, checksum))
    edge = np.arange(4 * 6, dtype=np.uint16).reshape(4, 6)
    stored = _stored(chain, edge)
    assert stored is not None
    full = chain.decode(stored)
    assert full.shape == (8, 8) and full.dtype == np.dtype("<u2")
    np.testing.assert_array_equal(full[:4, :6], edge)
    assert (full[4:, :] == 3).all() and (full[:, 6:] == 3).all()
    if checksum:
        assert zarr3.strip_crc32c(stored) == stored[:-4]
        with pytest.raises(zarr3.ShardFormatError):
            chain.decode(stored[:-1] + bytes([stored[-1] ^ 1]))


def test_all_fill_chunks_are_not_stored_and_read_as_fill() -> None:
    chain = InnerChunkChain.of(_meta(None, False))
    assert _stored(chain, np.full((8, 3), 3, dtype=np.uint16)) is None
    assert chain.present(np, np.stack([np.full((8, 8), 3), np.eye(8) + 3])).tolist() == [
        False,
        True,
    ]
    np.testing.assert_array_equal(chain.decode(None), np.full((8, 8), 3, dtype=np.uint16))


@pytest.mark.parametrize(
    "dtype", ["bool", "uint8", "int16", "float16", "float32", "float64", "complex64", "complex128"]
)
@pytest.mark.parametrize("fill", [0, 1, -0.0, float("nan")])
def test_present_is_any_element_unlike_the_fill_value(dtype: str, fill: float) -> None:
    """A chunk is stored when any element's bits differ from the fill value's, whatever the
    type, so that a reader gets back exactly what was written: -0.0 is not the fill 0.0, a
    NaN is not the fill 0.0, and a chunk of the very NaN that is the fill value reads back as
    it; here against the element-wise definition on the elements' bytes."""
    if np.dtype(dtype).kind not in "fc" and (fill != fill or str(fill).startswith("-")):
        return
    value = np.asarray(fill).astype(dtype)
    rng = np.random.default_rng(7)
    chunks = np.full((6, 4, 4), value, dtype=dtype)
    chunks[1, 2, 3] = rng.integers(2, 9)  # one element off
    chunks[2] = rng.integers(0, 2, (4, 4))
    floating = np.dtype(dtype).kind in "fc"
    chunks[3, 0, 0] = -0.0 if floating else value  # equal to 0.0, but not the same bits
    if floating:
        chunks[4, 1, 1] = np.nan
        chunks[5] = np.nan
    chain = InnerChunkChain((4, 4), np.dtype(dtype), value.item())
    as_bytes = chunks.view(np.uint8).reshape(6, -1)
    expected = ~np.all(as_bytes == np.tile(value.reshape(1).view(np.uint8), 16), axis=1)
    assert chain.present(np, chunks).tolist() == expected.tolist()
    if floating and fill == 0 and not str(fill).startswith("-"):
        assert chain.present(np, chunks).tolist()[3]  # -0.0 is kept: a reader gets it back


def test_pad_leaves_a_full_block_alone() -> None:
    block = np.ones((2, 2), dtype=np.uint8)
    assert pad(np, block, (2, 2), 0) is block
    assert pad(np, block, (3, 2), 9).tolist() == [[1, 1], [1, 1], [9, 9]]


def test_stored_chunks_decode_with_zarr_python(tmp_path: pathlib.Path) -> None:
    """An independent reader: zarr-python opens an array whose one inner chunk we encoded."""
    meta = _meta(zarr3.Compressor.zstd(), True)
    chain = InnerChunkChain.of(meta)
    values = np.arange(64, dtype=np.uint16).reshape(8, 8)
    stored = _stored(chain, values)
    assert stored is not None
    (tmp_path / "zarr.json").write_text(json.dumps(meta.to_json()))
    (tmp_path / "c" / "0").mkdir(parents=True)
    (tmp_path / "c" / "0" / "0").write_bytes(
        zarr3.encode_shard({(0, 0): stored}, meta.chunks_per_shard)
    )
    array = zarr.open_array(str(tmp_path), mode="r")[...]
    np.testing.assert_array_equal(array[:8, :8], values)
    assert (array[8:, :] == 3).all() and (array[:, 8:] == 3).all()
