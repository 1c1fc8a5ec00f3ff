"""Structural checks of stored shard objects, through byte-range reads only.

verify checks that every shard's indexes parse, point inside the object and list the chunks
they should, and compares the object's size and crc32c with the manifest (resume trusts only
the receipts of lifecycle/journal.py). Nothing loads a whole shard into memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwright.formats.precomputed.sharding import (
    ShardFormatError,
    ShardingSpec,
    decode_minishard_index,
    read_shard_index,
)
from shardwright.formats.zarr3 import metadata as zarr3_metadata
from shardwright.formats.zarr3 import sharding as zarr3_sharding
from shardwright.stores import Store


@dataclass(frozen=True)
class ShardSummary:
    key: str
    size: int
    chunks: int


def check_precomputed_shard(
    store: Store, key: str, spec: ShardingSpec, shard_number: int | None = None
) -> ShardSummary:
    """Parse the shard index and every minishard index; raise ShardFormatError if broken."""
    size = store.size(key)
    if size is None:
        raise FileNotFoundError(key)
    header = store.read_range(key, 0, spec.shard_index_nbytes)
    ranges = read_shard_index(spec, header)
    if (ranges[:, 1] > np.uint64(size)).any():
        raise ShardFormatError(f"{key}: shard index points past the end of the object")
    chunks = 0
    for minishard, (start, end) in enumerate(ranges.tolist()):
        if start == end:
            continue
        ids, _, _ = decode_minishard_index(spec, store.read_range(key, start, end), size)
        shards, minishards = spec.locate(ids)
        if (minishards != np.uint64(minishard)).any() or (
            shard_number is not None and (shards != np.uint64(shard_number)).any()
        ):
            raise ShardFormatError(f"{key}: minishard {minishard} lists chunks of another shard")
        chunks += int(ids.size)
    return ShardSummary(key, size, chunks)


def check_zarr3_shard(
    store: Store, key: str, meta: zarr3_metadata.ZarrArrayMetadata
) -> ShardSummary:
    """Read and crc-check the shard index; raise ShardFormatError if broken."""
    size = store.size(key)
    if size is None:
        raise FileNotFoundError(key)
    index_bytes = zarr3_sharding.index_nbytes(meta.chunks_per_shard)
    if size < index_bytes:
        raise ShardFormatError(f"{key}: {size} bytes, shorter than its {index_bytes}-byte index")
    start = 0 if meta.index_location == "start" else size - index_bytes
    index = zarr3_sharding.read_index(
        store.read_range(key, start, start + index_bytes), meta.chunks_per_shard
    ).reshape(-1, 2)
    present = index[:, 0] != np.uint64(2**64 - 1)
    ends = index[present, 0] + index[present, 1]
    if (ends > np.uint64(size)).any():
        raise ShardFormatError(f"{key}: shard index points past the end of the object")
    return ShardSummary(key, size, int(present.sum()))
