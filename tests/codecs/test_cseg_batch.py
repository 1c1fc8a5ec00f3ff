"""The batched compressed_segmentation encode (the GPU engine's step) run on numpy: every
chunk byte for byte what the reference library writes, table sharing included."""

from __future__ import annotations

import compressed_segmentation as cseg
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardwright.codecs import chunk_encoding, compressed_segmentation_batch
from shardwright.codecs.compressed_segmentation_batch import encode_batch
from shardwright.errors import EncodingError


def _reference(chunk_xyzc: np.ndarray, block: tuple[int, int, int]) -> bytes:
    """The reference library's stream: one call per channel under one channel-offset table."""
    encoding = chunk_encoding("compressed_segmentation", block_size=block)
    return encoding.encode_with_reference_library(np.ascontiguousarray(chunk_xyzc))


def _split(buffer: np.ndarray, sizes: np.ndarray) -> list[bytes]:
    ends = np.cumsum(sizes)
    return [bytes(buffer[end - size : end]) for end, size in zip(ends, sizes, strict=True)]


@st.composite
def batches(draw: st.DrawFn) -> tuple[np.ndarray, tuple[int, int, int]]:
    count = draw(st.integers(1, 3))
    shape = draw(st.tuples(st.integers(1, 13), st.integers(1, 13), st.integers(1, 9)))
    channels = draw(st.integers(1, 2))
    block = draw(st.tuples(st.integers(1, 8), st.integers(1, 8), st.integers(1, 5)))
    dtype = draw(st.sampled_from([np.uint32, np.uint64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    full = (count, *shape, channels)
    kind = draw(st.sampled_from(["few", "many", "tiled", "constant", "high"]))
    if kind == "few":
        labels = rng.integers(0, 3, full)
    elif kind == "many":
        labels = rng.integers(0, 10**6, full)
    elif kind == "tiled":  # repeated blocks: tables shared between blocks
        tile = rng.integers(0, 4, (count, 2, 3, 2, channels))
        labels = np.tile(tile, (1, 7, 5, 5, 1))[:, : shape[0], : shape[1], : shape[2]]
    elif kind == "constant":
        labels = np.full(full, draw(st.sampled_from([0, 5])))
    else:
        top = np.iinfo(dtype).max
        labels = top - rng.integers(0, 40, full).astype(np.uint64)
    return np.ascontiguousarray(labels.astype(dtype)), block


@given(batches())
def test_batched_encode_is_the_reference_librarys_bytes(
    case: tuple[np.ndarray, tuple[int, int, int]],
) -> None:
    chunks, block = case
    buffer, sizes = encode_batch(np, chunks, block)
    assert buffer.dtype == np.uint8 and int(sizes.sum()) == buffer.size
    assert _split(buffer, sizes) == [_reference(chunk, block) for chunk in chunks]


def test_one_channel_equals_the_library_called_directly() -> None:
    rng = np.random.default_rng(5)
    chunks = rng.integers(0, 9, (2, 16, 12, 10, 1)).astype(np.uint64)
    buffer, sizes = encode_batch(np, chunks, (8, 8, 8))
    for got, chunk in zip(_split(buffer, sizes), chunks, strict=True):
        native = np.asfortranarray(chunk[..., 0])
        assert got == bytes(cseg.compress(native, block_size=(8, 8, 8), order="F"))


def test_table_sharing_with_colliding_hashes_falls_back_to_exact_comparison(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With every table hashing alike, grouping by hash alone would share wrong tables."""
    monkeypatch.setattr(
        compressed_segmentation_batch, "_hash_weights", lambda xp, n: xp.zeros(n, dtype=xp.uint64)
    )
    rng = np.random.default_rng(8)
    chunks = rng.integers(0, 5, (2, 12, 12, 8, 1)).astype(np.uint32)
    buffer, sizes = encode_batch(np, chunks, (4, 4, 4))
    assert _split(buffer, sizes) == [_reference(chunk, (4, 4, 4)) for chunk in chunks]


def test_tables_past_the_24_bit_offsets_are_a_clear_error() -> None:
    labels = np.arange(192**3, dtype=np.uint64).reshape(1, 192, 192, 192, 1)
    with pytest.raises(EncodingError, match="24-bit offset limit"):
        encode_batch(np, labels, (8, 8, 8))


def test_other_dtypes_are_refused() -> None:
    with pytest.raises(EncodingError, match="uint32 or uint64"):
        encode_batch(np, np.zeros((1, 4, 4, 4, 1), np.int64), (8, 8, 8))
