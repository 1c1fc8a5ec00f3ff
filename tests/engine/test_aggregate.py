"""Aggregate-by-shard (the GPU engine's step) run on numpy: byte-identical to the builders,
whatever the memory budget: epochs beyond it are copied out to the host spool (and to disk
beyond the host's), and the device never holds more than the budget plus one epoch."""

from __future__ import annotations

import sys
import threading
import types
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardwright.common import arrays
from shardwright.common.arrays import exclusive_scan, gather_segments
from shardwright.engine.aggregate import EncodedChunks, arrange_precomputed, arrange_zarr3
from shardwright.formats.precomputed.sharding import ShardingSpec
from shardwright.formats.zarr3 import sharding as zarr3_sharding


def _packed(blobs: list[bytes], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Blobs laid out in one buffer in a shuffled order with gaps, as a batched encode leaves
    them; returns (buffer, offsets) in the blobs' own order."""
    slots = rng.permutation(len(blobs))
    buffer = bytearray()
    offsets = np.zeros(len(blobs), dtype=np.int64)
    for i in slots.tolist():
        buffer += b"\xee" * int(rng.integers(0, 5))  # slack between encoded chunks
        offsets[i] = len(buffer)
        buffer += blobs[i]
    return np.frombuffer(bytes(buffer), dtype=np.uint8), offsets


def _held(
    blobs: list[bytes], data: st.DataObject, rng: np.random.Generator
) -> tuple[EncodedChunks, int]:
    """The blobs added in epochs of random lengths, each packed with slack, under a random
    device budget (from nothing to all) and host budget (0: the spool spills to disk at once);
    returns the holder and the largest epoch's buffer size."""
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(blobs) - 1)), max_size=4)))
    epochs = [blobs[a:b] for a, b in zip([0, *cuts], [*cuts, len(blobs)], strict=True) if a < b]
    packed = [_packed(epoch, rng) for epoch in epochs]
    total = sum(buffer.nbytes for buffer, _ in packed)
    held = EncodedChunks(
        np,
        device_budget=data.draw(st.integers(0, total)),
        host_budget=data.draw(st.sampled_from([0, 50, 1 << 20])),
    )
    for epoch, (buffer, offsets) in zip(epochs, packed, strict=True):
        held.add(buffer, offsets, np.array([len(b) for b in epoch]))
    return held, max(buffer.nbytes for buffer, _ in packed)


def test_exclusive_scan() -> None:
    assert exclusive_scan(np, np.array([3, 0, 5, 1])).tolist() == [0, 3, 3, 8]


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=30), st.integers(0, 2**32))
def test_gather_segments_packs_in_order(blobs: list[bytes], seed: int) -> None:
    rng = np.random.default_rng(seed)
    buffer, offsets = _packed(blobs, rng)
    order = rng.permutation(len(blobs))
    sizes = np.array([len(b) for b in blobs])
    dense = gather_segments(np, buffer, offsets, sizes, order)
    assert dense.tobytes() == b"".join(blobs[i] for i in order.tolist())


@given(
    st.integers(0, 40),
    st.integers(1, 30),
    st.integers(0, 2**32),
    st.sampled_from([np.uint8, np.uint64]),
)
def test_gather_segments_of_one_size_are_gathered_as_rows(
    size: int, count: int, seed: int, dtype: type
) -> None:
    """Equal-sized segments packed from the start (raw chunks) take the row gather; the same
    sizes laid out otherwise take the per-byte one: both give the segments in order."""
    rng = np.random.default_rng(seed)
    blobs = [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for _ in range(count)]
    order = rng.permutation(count)
    want = b"".join(blobs[i] for i in order.tolist())
    packed = (
        np.frombuffer(b"".join(blobs), dtype=np.uint8).view(dtype)
        if size % 8 == 0
        else (np.frombuffer(b"".join(blobs), dtype=np.uint8))
    )
    sizes = np.full(count, size)
    assert gather_segments(np, packed, np.arange(count) * size, sizes, order).tobytes() == want
    shuffled, offsets = _packed(blobs, rng)
    assert gather_segments(np, shuffled, offsets, sizes, order).tobytes() == want


specs = st.builds(
    ShardingSpec,
    preshift_bits=st.integers(0, 3),
    hash=st.sampled_from(["identity", "murmurhash3_x86_128"]),
    minishard_bits=st.integers(0, 4),
    shard_bits=st.just(0),
    minishard_index_encoding=st.sampled_from(["raw", "gzip"]),
)


@given(
    specs,
    st.dictionaries(st.integers(0, 2**64 - 1), st.binary(max_size=60), min_size=1, max_size=40),
    st.data(),
    st.integers(0, 2**32),
)
def test_precomputed_aggregate_equals_the_streaming_builder(
    spec: ShardingSpec, items: dict[int, bytes], data: st.DataObject, seed: int
) -> None:
    ids = list(items)
    held, largest_epoch = _held([items[i] for i in ids], data, np.random.default_rng(seed))
    shard = arrange_precomputed(spec, np.array(ids, dtype=np.uint64), held, shard_number=0)
    builder = spec.builder(0)
    for chunk_id, blob in items.items():
        builder.add_encoded(chunk_id, blob)
    expected = builder.finish().to_bytes()
    assert shard.to_bytes() == expected
    assert shard.to_bytes() == expected  # again, as a retried upload asks
    assert shard.chunk_count == len(items)
    assert held.device_peak <= held.device_budget + largest_epoch
    shard.close()


@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=3),
    st.data(),
    st.sampled_from(["start", "end"]),
    st.integers(0, 2**32),
)
def test_zarr3_aggregate_equals_encode_shard(
    grid: list[int], data: st.DataObject, location: str, seed: int
) -> None:
    total = int(np.prod(grid))
    present = data.draw(st.sets(st.integers(0, total - 1), min_size=1))
    positions = np.array(sorted(present))
    rng = np.random.default_rng(seed)
    rng.shuffle(positions)
    blobs = [
        bytes(rng.integers(0, 255, int(rng.integers(1, 30)), dtype=np.uint8)) for _ in positions
    ]
    held, _ = _held(blobs, data, rng)
    arranged = arrange_zarr3(grid, positions, held, location)
    shard = arranged.to_bytes()  # checks the size it announces, too
    arranged.close()
    coords = [tuple(int(v) for v in np.unravel_index(p, grid)) for p in positions.tolist()]
    assert shard == zarr3_sharding.encode_shard(
        dict(zip(coords, blobs, strict=True)), grid, location
    )


def test_a_shard_many_times_the_budget_holds_the_budget_plus_one_epoch() -> None:
    """Ten epochs of 1,000 bytes under a 2,500-byte device budget: the oldest epochs go to the
    host as the budget fills, the last ones are arranged on the device; the bytes are the
    streaming builder's."""
    rng = np.random.default_rng(5)
    spec = ShardingSpec(preshift_bits=0, minishard_bits=2, shard_bits=0)
    held = EncodedChunks(np, device_budget=2_500, host_budget=1_500)  # the host spills too
    builder = spec.builder(0)
    ids = []
    for epoch in range(10):
        blobs = [bytes(rng.integers(0, 255, 100, dtype=np.uint8)) for _ in range(10)]
        buffer = np.frombuffer(b"".join(blobs), dtype=np.uint8)
        held.add(buffer, np.arange(10) * 100, np.full(10, 100))
        for k, blob in enumerate(blobs):
            ids.append(epoch * 10 + k)
            builder.add_encoded(epoch * 10 + k, blob)
    assert held.copied_out == 8_000  # eight epochs left the device; two stayed
    shard = arrange_precomputed(spec, np.array(ids, dtype=np.uint64), held, shard_number=0)
    assert held.device_peak <= 2_500 + 1_000
    assert shard.to_bytes() == builder.finish().to_bytes()
    shard.close()


@pytest.mark.parametrize("shape", [(3, 5, 7), (257, 300, 260), (1, 64 << 20), (0, 9)])
def test_the_staging_copy_splits_large_arrays_and_keeps_every_byte(shape: tuple[int, ...]) -> None:
    """`upload`'s host copy into the pinned staging buffer: large arrays are copied by slabs in
    several threads; a strided source comes out whole and in place."""
    source = np.random.default_rng(1).integers(0, 255, shape, dtype=np.uint8)
    view = source[:, ::-1] if source.ndim == 2 else source.transpose(1, 0, 2)
    out = np.full(view.shape, 7, dtype=np.uint8)
    arrays._parallel_copy(out, view)
    np.testing.assert_array_equal(out, view)


def test_pinned_buffers_are_reused_by_their_thread_and_kept_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The buffer pool behind `upload` and the host landing of `EncodedChunks` (pinned under
    CuPy; plain host arrays stand in for `cupyx.empty_pinned` here)."""
    made: list[int] = []

    def empty_pinned(size: int, dtype: Any) -> np.ndarray:
        made.append(size)
        return np.empty(size, dtype=dtype)

    monkeypatch.setitem(sys.modules, "cupyx", types.SimpleNamespace(empty_pinned=empty_pinned))
    monkeypatch.setattr(arrays, "_PINNED", threading.local())
    first = arrays.take_pinned(10)
    second = arrays.take_pinned(100 << 20)
    assert first.nbytes == 64 << 20 and second.nbytes == 128 << 20  # rounded to 64 MiB
    arrays.release_pinned(second)
    assert arrays.take_pinned(70 << 20) is second  # one that fits
    arrays.release_pinned(second)
    assert arrays.take_pinned(200 << 20) is not second  # too small: a new one
    arrays.release_pinned(first)
    arrays.release_pinned(second)
    assert arrays._PINNED.free == [second]  # the largest kept
    assert arrays.take_pinned(1) is second
    assert made == [64 << 20, 128 << 20, 256 << 20]
    for _ in range(6):
        arrays.release_pinned(np.empty(64 << 20, dtype=np.uint8))
    assert len(arrays._PINNED.free) == arrays._PINNED_KEPT


class _Copy:
    """A stand-in CUDA event: records whether anyone waited for it."""

    def __init__(self) -> None:
        self.waited = False

    def synchronize(self) -> None:
        self.waited = True


def test_the_staging_ring_refills_a_buffer_only_after_its_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Boxes are staged in two buffers in turn; a buffer is handed out again only once the
    copy reading it is waited for, and grows (the smaller let go) when a box needs more."""
    made: list[int] = []

    def empty_pinned(size: int, dtype: Any) -> np.ndarray:
        made.append(size)
        return np.empty(size, dtype=dtype)

    monkeypatch.setitem(sys.modules, "cupyx", types.SimpleNamespace(empty_pinned=empty_pinned))
    ring = arrays.StagingRing()
    first = ring.fill(10)
    copies = [_Copy()]
    ring.filled(copies[0])
    second = ring.fill(10)
    assert second is not first and not copies[0].waited  # staged while the first is copied
    copies.append(_Copy())
    ring.filled(copies[1])
    assert ring.fill(10) is first and copies[0].waited and not copies[1].waited
    copies.append(_Copy())
    ring.filled(copies[2])
    bigger = ring.fill(100 << 20)  # the second buffer's turn, too small: replaced
    assert copies[1].waited and bigger is not second and bigger.nbytes == 128 << 20
    assert made == [64 << 20, 64 << 20, 128 << 20]
    assert arrays.staging_ring() is arrays.staging_ring()  # one per thread
    other: list[arrays.StagingRing] = []
    thread = threading.Thread(target=lambda: other.append(arrays.staging_ring()))
    thread.start()
    thread.join()
    assert other[0] is not arrays.staging_ring()
