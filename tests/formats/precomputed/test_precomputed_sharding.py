"""Sharded precomputed format: hashing, Morton codes, spec validation, shard bytes.

TensorStore's `neuroglancer_uint64_sharded` kvstore driver is the independent reader: every
shard we encode must read back byte-exact through it, and shards it writes must decode with ours.
"""

from __future__ import annotations

import itertools
import pathlib
import tempfile
from collections.abc import Mapping

import mmh3
import numpy as np
import pytest
import tensorstore as ts
from hypothesis import given
from hypothesis import strategies as st

from shardwright.formats.precomputed.sharded_reader import (
    COALESCE_GAP,
    COALESCE_WASTE,
    _coalesced,
)
from shardwright.formats.precomputed.sharding import packed_shard
from shardwright.formats.spool import ChunkSpool
from shardwright.precomputed import (
    ShardedReader,
    ShardFormatError,
    ShardingSpec,
    ShardingSpecError,
    compressed_morton_code,
    decode_compressed_morton_code,
    murmurhash3_x86_128_low64,
)

U64_MAX = 2**64 - 1


def _reference_hash(chunk_id: int) -> int:
    low, _ = mmh3.hash64(chunk_id.to_bytes(8, "little"), 0, x64arch=False, signed=False)
    return int(low)


def _reference_morton(coord: tuple[int, ...], grid_shape: tuple[int, ...]) -> int:
    """The spec's loop, written one bit at a time, with Neuroglancer's bit counts."""
    bits = [max(n - 1, 0).bit_length() for n in grid_shape]
    code, j = 0, 0
    for i in range(max(bits)):
        for dim in range(3):
            if i < bits[dim]:
                code |= ((coord[dim] >> i) & 1) << j
                j += 1
    return code


id_strategy = st.one_of(
    st.integers(0, 1000),
    st.integers(0, U64_MAX),
    st.integers(U64_MAX - 1000, U64_MAX),
)


@given(st.lists(id_strategy, min_size=1, max_size=200))
def test_murmurhash_matches_mmh3(ids: list[int]) -> None:
    ours = murmurhash3_x86_128_low64(np.array(ids, dtype=np.uint64))
    assert ours.tolist() == [_reference_hash(i) for i in ids]


def test_murmurhash_keeps_shape() -> None:
    ids = np.arange(12, dtype=np.uint64).reshape(3, 4)
    assert murmurhash3_x86_128_low64(ids).shape == (3, 4)


@given(st.tuples(st.integers(1, 70), st.integers(1, 70), st.integers(1, 70)), st.data())
def test_morton_matches_spec_loop(grid_shape: tuple[int, int, int], data: st.DataObject) -> None:
    coords = data.draw(
        st.lists(st.tuples(*(st.integers(0, n - 1) for n in grid_shape)), min_size=1, max_size=50)
    )
    codes = compressed_morton_code(np.array(coords), grid_shape)
    assert codes.dtype == np.uint64
    assert codes.tolist() == [_reference_morton(c, grid_shape) for c in coords]
    assert decode_compressed_morton_code(codes, grid_shape).tolist() == [list(c) for c in coords]


def test_morton_is_a_bijection_onto_a_dense_range_for_power_of_two_grids() -> None:
    grid = (4, 8, 2)
    coords = np.array(list(itertools.product(*(range(n) for n in grid))))
    codes = compressed_morton_code(coords, grid)
    assert sorted(codes.tolist()) == list(range(4 * 8 * 2))


def test_morton_rejects_out_of_range_and_too_many_bits() -> None:
    with pytest.raises(ValueError, match="out of range"):
        compressed_morton_code(np.array([[4, 0, 0]]), (4, 4, 4))
    with pytest.raises(ValueError, match="Morton bits"):
        compressed_morton_code(np.zeros((1, 3), dtype=int), (2**30, 2**30, 2**30))


# -- spec -------------------------------------------------------------------------------------
GOOD = {
    "@type": "neuroglancer_uint64_sharded_v1",
    "preshift_bits": 3,
    "hash": "murmurhash3_x86_128",
    "minishard_bits": 4,
    "shard_bits": 5,
    "minishard_index_encoding": "gzip",
    "data_encoding": "raw",
}


def test_spec_round_trip_and_defaults() -> None:
    spec = ShardingSpec.from_json(GOOD)
    assert spec.to_json() == GOOD
    minimal = {k: v for k, v in GOOD.items() if not k.endswith("encoding")}
    parsed = ShardingSpec.from_json(minimal)
    assert parsed.minishard_index_encoding == "raw" and parsed.data_encoding == "raw"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"@type": "neuroglancer_uint64_sharded_v2"}, "@type"),
        ({"hash": "md5"}, "hash must be one of"),
        ({"preshift_bits": -1}, "preshift_bits must be >= 0"),
        ({"minishard_bits": 1.5}, "minishard_bits must be an integer"),
        ({"shard_bits": True}, "shard_bits must be an integer"),
        ({"preshift_bits": 30, "minishard_bits": 20, "shard_bits": 15}, "must be <= 64"),
        ({"data_encoding": "zstd"}, "data_encoding must be one of"),
        ({"minishard_index_encoding": "jpeg"}, "minishard_index_encoding must be one of"),
        ({"shard_bit": 3}, "unknown sharding spec member"),
    ],
)
def test_bad_specs_raise_one_clear_error(change: dict, message: str) -> None:
    with pytest.raises(ShardingSpecError, match=message):
        ShardingSpec.from_json({**GOOD, **change})


def test_missing_member_is_named() -> None:
    with pytest.raises(ShardingSpecError, match="missing 'shard_bits'"):
        ShardingSpec.from_json({k: v for k, v in GOOD.items() if k != "shard_bits"})


@pytest.mark.parametrize(
    ("shard_bits", "number", "name"),
    [
        (0, 0, "0.shard"),
        (1, 1, "1.shard"),
        (4, 15, "f.shard"),
        (5, 3, "03.shard"),
        (9, 0x1AB, "1ab.shard"),
        (16, 0xBEEF, "beef.shard"),
    ],
)
def test_shard_filenames(shard_bits: int, number: int, name: str) -> None:
    assert ShardingSpec(shard_bits=shard_bits).shard_filename(number) == name


def test_locate_splits_hashed_bits() -> None:
    spec = ShardingSpec(preshift_bits=2, minishard_bits=3, shard_bits=4)
    ids = np.array([0b1011_101_11, 0b0001_010_00], dtype=np.uint64)
    shard, minishard = spec.locate(ids)
    assert shard.tolist() == [0b1011, 0b0001] and minishard.tolist() == [0b101, 0b010]


# -- shard bytes against TensorStore ----------------------------------------------------------
def _tensorstore_kvstore(root: pathlib.Path, spec: ShardingSpec) -> ts.KvStore:
    return ts.KvStore.open(
        {
            "driver": "neuroglancer_uint64_sharded",
            "base": f"file://{root}/",
            "metadata": spec.to_json(),
            "context": {"cache_pool": {"total_bytes_limit": 0}},
        }
    ).result()


def _write_files(root: pathlib.Path, files: Mapping[str, bytes]) -> None:
    for name, data in files.items():
        (root / name).write_bytes(data)


spec_strategy = st.builds(
    ShardingSpec,
    preshift_bits=st.integers(0, 3),
    hash=st.sampled_from(["identity", "murmurhash3_x86_128"]),
    minishard_bits=st.integers(0, 4),
    shard_bits=st.integers(0, 5),
    minishard_index_encoding=st.sampled_from(["raw", "gzip"]),
    data_encoding=st.sampled_from(["raw", "gzip"]),
)
items_strategy = st.dictionaries(
    id_strategy, st.binary(min_size=0, max_size=300), min_size=1, max_size=60
)


@given(spec_strategy, items_strategy)
def test_tensorstore_reads_every_blob_we_encode(spec: ShardingSpec, items: dict) -> None:
    files = spec.encode_shards(items)
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        _write_files(root, files)
        kv = _tensorstore_kvstore(root, spec)
        listed = {int.from_bytes(k, "big") for k in kv.list().result()}
        assert listed == set(items)
        for chunk_id, blob in items.items():
            result = kv.read(chunk_id.to_bytes(8, "big")).result()
            assert result.state == "value"
            assert result.value == blob
    decoded: dict[int, bytes] = {}
    for data in files.values():
        decoded.update(spec.decode_shard(data))
    assert decoded == items


@given(spec_strategy, items_strategy)
def test_we_decode_shards_tensorstore_writes(spec: ShardingSpec, items: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        kv = _tensorstore_kvstore(root, spec)
        txn = ts.Transaction()
        for chunk_id, blob in items.items():
            kv.with_transaction(txn).write(chunk_id.to_bytes(8, "big"), blob).result()
        txn.commit_async().result()
        decoded: dict[int, bytes] = {}
        names = sorted(p.name for p in root.iterdir())
        for path in root.iterdir():
            decoded.update(spec.decode_shard(path.read_bytes()))
    assert decoded == items
    assert names == sorted(spec.encode_shards(items))


def test_builder_accepts_any_order_and_spills_to_disk_with_identical_bytes() -> None:
    spec = ShardingSpec(
        hash="murmurhash3_x86_128", minishard_bits=3, shard_bits=0, data_encoding="gzip"
    )
    rng = np.random.default_rng(7)
    items = {
        int(i): rng.integers(0, 255, int(rng.integers(100, 4000)), dtype=np.uint8).tobytes()
        for i in rng.integers(0, U64_MAX, 300, dtype=np.uint64)
    }
    in_memory = spec.encode_shards(items)["0.shard"]
    builder = spec.builder(0, memory_budget=10_000)
    keys = list(items)
    rng.shuffle(keys)
    for key in keys:
        builder.add(key, items[key])
    assert builder.spilled
    shard = builder.finish()
    assert shard.chunk_count == len(items)
    assert shard.nbytes == len(in_memory)
    assert shard.to_bytes() == in_memory
    shard.close()


@pytest.mark.parametrize("encoding", ["raw", "gzip"])
@pytest.mark.parametrize("in_file_order", [True, False])
def test_a_packed_shard_is_the_builders_shard_byte_for_byte(
    encoding: str, in_file_order: bool
) -> None:
    """Chunks packed in one buffer (annotations): in the file's order written as given,
    in any other order gathered; either way the bytes the builder writes."""
    spec = ShardingSpec(minishard_bits=3, shard_bits=0, data_encoding=encoding)
    rng = np.random.default_rng(3)
    ids = np.unique(rng.integers(0, U64_MAX, 400, dtype=np.uint64))
    rng.shuffle(ids)
    payloads = [rng.integers(0, 9, int(rng.integers(1, 60)), dtype=np.uint8) for _ in ids]
    if in_file_order:
        _, minishards = spec.locate(ids)
        order = np.lexsort((ids, minishards))
        ids, payloads = ids[order], [payloads[i] for i in order.tolist()]
    expected = spec.encode_shards(dict(zip(ids.tolist(), map(bytes, payloads), strict=True)))
    sizes = np.asarray([p.size for p in payloads], np.int64)
    shard = packed_shard(spec, 0, ids, sizes, np.concatenate(payloads))
    assert shard.chunk_count == ids.size
    assert shard.to_bytes() == expected["0.shard"]


def test_builder_rejects_duplicates_and_strays() -> None:
    spec = ShardingSpec(minishard_bits=1, shard_bits=2)
    builder = spec.builder(0)
    builder.add(1, b"a")
    builder.add(1, b"b")
    with pytest.raises(ValueError, match="chunk id 1 added twice"):
        builder.finish()
    builder = spec.builder(0)
    builder.add(0b110, b"a")
    with pytest.raises(ValueError, match="chunk id 6 does not belong to shard 0"):
        builder.finish()


def test_ranged_reader_fetches_index_entry_minishard_index_then_data() -> None:
    spec = ShardingSpec(
        minishard_bits=2, shard_bits=1, minishard_index_encoding="gzip", data_encoding="gzip"
    )
    items = {i: f"chunk-{i}".encode() * i for i in range(40)}
    files = spec.encode_shards(items)
    calls: list[tuple[str, int, int]] = []

    def fetch(name: str, start: int, end: int) -> bytes:
        calls.append((name, start, end))
        if name not in files:
            raise FileNotFoundError(name)
        return files[name][start:end]

    reader = ShardedReader(spec, fetch)
    assert reader.read(9) == items[9]
    assert len(calls) == 3 and calls[0][1:] == (16 * (9 & 3), 16 * (9 & 3) + 16)
    assert reader.read(17) == items[17]  # same shard and minishard: index cached, one data read
    assert len(calls) == 4
    assert reader.read(1000) is None


@given(
    sizes=st.lists(st.integers(1, 40_000), min_size=2, max_size=30),
    gaps=st.lists(st.integers(0, 200_000), min_size=30, max_size=30),
)
def test_coalesced_reads_bring_each_chunk_and_bounded_gaps(
    sizes: list[int], gaps: list[int]
) -> None:
    """Chunks asked for in one shard come in as few reads as allow each read's gaps at most
    an eighth of the chunks it brings (and no gap over 64 KiB): every chunk exactly once,
    the bytes read at most 9/8 of those asked for."""
    pieces, at = [], 0
    for i, size in enumerate(sizes):
        at += gaps[i]
        pieces.append((at, size, i))
        at += size
    reads = list(_coalesced(pieces))
    got = sorted(chunk for _, _, run in reads for chunk in run)
    assert got == pieces
    for first, last, run in reads:
        wanted = sum(size for _, size, _ in run)
        assert first == run[0][0] and last == run[-1][0] + run[-1][1]
        assert (last - first) - wanted <= COALESCE_WASTE * wanted
        spans = zip(run, run[1:], strict=False)
        assert all(b[0] - (a[0] + a[1]) <= COALESCE_GAP for a, b in spans)
    # a read ends only where its next chunk would break a rule
    for (f1, l1, r1), (f2, _, r2) in zip(reads, reads[1:], strict=False):
        wanted = sum(size for _, size, _ in r1) + r2[0][1]
        gaps = (l1 - f1) - sum(size for _, size, _ in r1) + (f2 - l1)
        assert f2 - l1 > COALESCE_GAP or gaps > COALESCE_WASTE * wanted


def test_ranged_reader_reports_missing_shard_as_absent() -> None:
    spec = ShardingSpec(shard_bits=1)

    def fetch(name: str, start: int, end: int) -> bytes:
        raise FileNotFoundError(name)

    assert ShardedReader(spec, fetch).read(3) is None


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda d: d[:10], "shorter than its"),
        (lambda d: d[:-5], "points past the end"),
        (lambda d: d[:24] + (10**9).to_bytes(8, "little") + d[32:], "past the end"),
        (lambda d: (10**9).to_bytes(8, "little") + d[8:], "start > end"),
    ],
)
def test_corrupt_shards_are_rejected(corrupt, message: str) -> None:  # type: ignore[no-untyped-def]
    spec = ShardingSpec(minishard_bits=1)
    data = spec.encode_shards({0: b"zero", 1: b"one", 2: b"two"})["0.shard"]
    with pytest.raises(ShardFormatError, match=message):
        spec.decode_shard(corrupt(data))


def test_minishard_listing_foreign_ids_is_rejected() -> None:
    spec = ShardingSpec(minishard_bits=1)
    data = spec.encode_shards({2: b"even"})["0.shard"]
    wrong = ShardingSpec(minishard_bits=1, preshift_bits=1)  # 2 >> 1 lands in minishard 1
    with pytest.raises(ShardFormatError, match="another minishard"):
        wrong.decode_shard(data)


def test_spool_keeps_read_only_views_and_copies_what_its_owner_could_change() -> None:
    """A read-only view is held as given (no second copy of a raw chunk); a bytearray or a
    writable view is copied, so changing it afterwards cannot change the shard."""
    frozen = np.arange(64, dtype=np.uint8)
    frozen.flags.writeable = False
    mutable = bytearray(b"abcd")
    writable = np.zeros(8, np.uint8)
    spool = ChunkSpool(memory_budget=1 << 20)
    kept = spool.append(memoryview(frozen.data))
    copied = spool.append(mutable)
    viewed = spool.append(memoryview(writable.data))
    mutable[:] = b"wxyz"
    writable[:] = 7
    assert np.shares_memory(np.frombuffer(spool.get(kept), np.uint8), frozen)
    assert bytes(spool.get(copied)) == b"abcd"
    assert bytes(spool.get(viewed)) == bytes(8)
    assert spool.nbytes == 64 + 4 + 8
    spool.append(b"x" * (1 << 20))  # over the budget: everything moves to the spool file
    assert spool.spilled and bytes(spool.get(kept)) == frozen.tobytes()
    spool.close()
