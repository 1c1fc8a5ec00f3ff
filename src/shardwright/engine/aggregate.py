"""Aggregate-by-shard over an array namespace (numpy here, CuPy on GPU workers).

After a batched encode, the encoded chunks of a shard sit in one buffer at arbitrary offsets.
Aggregation permutes them into the shard's order (precomputed: minishard, then id; zarr3: C
order of the inner grid), exclusive-scans their sizes and gathers them into one dense buffer,
so one device-to-host copy moves exactly the used bytes. The order and the indexes come from
the same host-side bookkeeping the streaming builders use, so both engines write the same
bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shardwright.formats import zarr3
from shardwright.formats.sharding import ShardingSpec, precomputed_layout

Array = Any  # numpy.ndarray or cupy.ndarray


def exclusive_scan(xp: Any, sizes: Array) -> Array:
    """Start offset of each segment when segments of `sizes` are packed back to back."""
    sizes = xp.asarray(sizes, dtype=xp.int64)
    return xp.cumsum(sizes) - sizes


def gather_segments(xp: Any, buffer: Array, offsets: Array, sizes: Array, order: Array) -> Array:
    """Segments [offsets[i], offsets[i] + sizes[i]) of `buffer`, in `order`, packed densely.

    One vectorized gather, no loop over chunks: each output byte's source index is its
    segment's source offset plus its position within the segment.
    """
    order = xp.asarray(order, dtype=xp.int64)
    sizes = xp.asarray(sizes, dtype=xp.int64)[order]
    offsets = xp.asarray(offsets, dtype=xp.int64)[order]
    total = int(sizes.sum())
    if total == 0:
        return xp.zeros(0, dtype=xp.uint8)
    starts = exclusive_scan(xp, sizes)
    shift = xp.repeat(offsets - starts, sizes)
    return xp.asarray(buffer, dtype=xp.uint8)[shift + xp.arange(total, dtype=xp.int64)]


def aggregate_precomputed(
    xp: Any,
    spec: ShardingSpec,
    chunk_ids: np.ndarray,
    buffer: Array,
    offsets: Array,
    sizes: Array,
    shard_number: int | None = None,
) -> tuple[bytes, Array, list[bytes]]:
    """(shard index, dense chunk data on the array's device, minishard indexes) of one shard.

    Chunk bytes must already carry the spec's `data_encoding`. Written in this order they
    are the shard file, byte for byte what `ShardBuilder.add_encoded` + `finish` produce.
    """
    host_sizes = np.asarray(_to_host(sizes), dtype=np.uint64)
    layout = precomputed_layout(
        spec, np.asarray(chunk_ids, dtype=np.uint64), host_sizes, shard_number
    )
    dense = gather_segments(xp, buffer, offsets, sizes, xp.asarray(layout.order))
    return layout.header, dense, layout.index_blobs


def aggregate_zarr3(
    xp: Any,
    chunks_per_shard: Sequence[int],
    positions: np.ndarray,
    buffer: Array,
    offsets: Array,
    sizes: Array,
    index_location: str = "end",
) -> tuple[bytes, Array]:
    """(encoded index, dense chunk data) of one zarr3 shard; `positions` are C-order linear
    positions of the present inner chunks. Index first or last as `index_location` says."""
    host_sizes = np.asarray(_to_host(sizes), dtype=np.uint64)
    order, index = zarr3.shard_layout(chunks_per_shard, positions, host_sizes, index_location)
    return index, gather_segments(xp, buffer, offsets, sizes, xp.asarray(order))


def _to_host(array: Array) -> np.ndarray:
    get = getattr(array, "get", None)  # cupy arrays copy to host with .get()
    return get() if callable(get) else np.asarray(array)
