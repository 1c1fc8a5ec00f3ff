"""Aggregate-by-shard (the GPU engine's step) run on numpy: byte-identical to the builders."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from shardwright.engine.aggregate import (
    aggregate_precomputed,
    aggregate_zarr3,
    exclusive_scan,
    gather_segments,
)
from shardwright.formats import zarr3
from shardwright.formats.sharding import ShardingSpec


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
    st.integers(0, 2**32),
)
def test_precomputed_aggregate_equals_the_streaming_builder(
    spec: ShardingSpec, items: dict[int, bytes], seed: int
) -> None:
    ids = list(items)
    blobs = [items[i] for i in ids]
    buffer, offsets = _packed(blobs, np.random.default_rng(seed))
    sizes = np.array([len(b) for b in blobs])
    header, dense, indexes = aggregate_precomputed(
        np, spec, np.array(ids, dtype=np.uint64), buffer, offsets, sizes, shard_number=0
    )
    builder = spec.builder(0)
    for chunk_id, blob in items.items():
        builder.add_encoded(chunk_id, blob)
    expected = builder.finish().to_bytes()
    assert header + dense.tobytes() + b"".join(indexes) == expected


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
    buffer, offsets = _packed(blobs, rng)
    sizes = np.array([len(b) for b in blobs])
    index, dense = aggregate_zarr3(np, grid, positions, buffer, offsets, sizes, location)
    shard = index + dense.tobytes() if location == "start" else dense.tobytes() + index
    coords = [tuple(int(v) for v in np.unravel_index(p, grid)) for p in positions.tolist()]
    assert shard == zarr3.encode_shard(dict(zip(coords, blobs, strict=True)), grid, location)
