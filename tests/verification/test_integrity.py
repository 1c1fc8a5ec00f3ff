"""verify's structural checks of one stored shard (`verification/integrity.py`), on shards the
format builders write and on the same shards damaged: a shard that parses is counted, chunk
for chunk; one that is cut short, whose index points past its end or whose minishard lists
another shard's chunks, is refused naming the shard."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from shardwright.errors import ShardFormatError
from shardwright.formats.precomputed.sharding import ShardingSpec
from shardwright.formats.zarr3 import sharding as zarr3_sharding
from shardwright.formats.zarr3.metadata import ZarrArrayMetadata
from shardwright.stores import Store, open_store
from shardwright.verification.integrity import check_precomputed_shard, check_zarr3_shard

U64_MAX = np.iinfo(np.uint64).max


def _precomputed(store: Store, spec: ShardingSpec, count: int) -> tuple[str, int]:
    """One shard of `count` random chunks, stored; (its key, its shard number)."""
    rng = np.random.default_rng(count)
    ids = rng.integers(0, U64_MAX, 50 * count, dtype=np.uint64)
    shards, _ = spec.locate(ids)
    number = int(shards[0])
    mine = np.unique(ids[shards == shards[0]])[:count]
    encoded = spec.encode_shards({int(i): bytes(rng.integers(0, 9, 30, np.uint8)) for i in mine})
    key = spec.shard_filename(number)
    store.write_object(key, encoded[key])
    return key, number


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Store:
    return open_store(str(tmp_path / "dest"))


@pytest.mark.parametrize("data_encoding", ["raw", "gzip"])
def test_a_precomputed_shard_is_counted_chunk_for_chunk(store: Store, data_encoding: str) -> None:
    spec = ShardingSpec(preshift_bits=1, minishard_bits=3, shard_bits=2,
                        data_encoding=data_encoding, minishard_index_encoding="gzip")  # fmt: skip
    key, number = _precomputed(store, spec, 40)
    summary = check_precomputed_shard(store, key, spec, number)
    assert summary.chunks == 40 and summary.size == store.size(key)


def test_a_precomputed_shard_cut_short_or_of_another_shard_is_refused(store: Store) -> None:
    spec = ShardingSpec(minishard_bits=2, shard_bits=2)
    key, number = _precomputed(store, spec, 20)
    whole = store.read_range(key, 0, store.size(key) or 0)
    with pytest.raises(ShardFormatError, match="lists chunks of another shard"):
        check_precomputed_shard(store, key, spec, (number + 1) % 4)
    store.write_object(key, whole[:-5])
    with pytest.raises(ShardFormatError, match=f"{key}"):
        check_precomputed_shard(store, key, spec, number)
    with pytest.raises(FileNotFoundError):
        check_precomputed_shard(store, "absent.shard", spec)


def _zarr3(index_location: str) -> ZarrArrayMetadata:
    return ZarrArrayMetadata(shape=(16, 8, 8), data_type="uint8", shard_shape=(8, 8, 8),
                             chunk_shape=(4, 4, 4), index_location=index_location)  # fmt: skip


@pytest.mark.parametrize("index_location", ["start", "end"])
def test_a_zarr3_shard_counts_the_chunks_its_index_holds(store: Store, index_location: str) -> None:
    meta = _zarr3(index_location)
    builder = zarr3_sharding.ShardBuilder(meta.chunks_per_shard, index_location=index_location)
    for position in [(0, 0, 0), (1, 1, 0), (0, 1, 1)]:
        builder.add(position, bytes(range(64)))
    store.write_object("c/0/0/0", builder.finish().to_bytes())
    summary = check_zarr3_shard(store, "c/0/0/0", meta)
    assert summary.chunks == 3 and summary.size == store.size("c/0/0/0")


def test_a_zarr3_shard_whose_index_is_damaged_is_refused(store: Store) -> None:
    meta = _zarr3("start")
    builder = zarr3_sharding.ShardBuilder(meta.chunks_per_shard, index_location="start")
    builder.add((0, 0, 0), bytes(64))
    whole = builder.finish().to_bytes()
    store.write_object("whole", whole)
    assert check_zarr3_shard(store, "whole", meta).chunks == 1
    store.write_object("short", whole[:10])
    with pytest.raises(ShardFormatError, match="short: 10 bytes, shorter than its"):
        check_zarr3_shard(store, "short", meta)
    store.write_object("cut", whole[:-10])  # the index kept, its chunk's end cut off
    with pytest.raises(ShardFormatError, match="cut: shard index points past the end"):
        check_zarr3_shard(store, "cut", meta)
    flipped = bytearray(whole)
    flipped[0] ^= 0xFF  # the index's crc32c no longer matches
    store.write_object("flipped", bytes(flipped))
    with pytest.raises(ShardFormatError):
        check_zarr3_shard(store, "flipped", meta)
