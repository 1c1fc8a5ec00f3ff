"""The `neuroglancer_uint64_sharded_v1` format: spec, shard assembly, shard decoding, ranged reads.

Layout written by `ShardBuilder` (one shard object)::

    [shard index: 2**minishard_bits x (start, end) uint64le, relative to its own end]
    [chunk data, grouped by minishard, ids ascending within a minishard; a chunk may carry
     unindexed bytes right before it (a multi-resolution mesh's fragments before its manifest)]
    [minishard index of each non-empty minishard, in minishard order]

Pure bytes in, bytes out: no I/O beyond the local spool a builder may spill to.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from shardwright.codecs import byte_codec
from shardwright.common.vocabulary import ShardHash, names
from shardwright.errors import ShardFormatError, ShardingSpecError
from shardwright.formats.precomputed.murmurhash import murmurhash3_x86_128_low64
from shardwright.formats.shardfile import Piece, ShardFile
from shardwright.formats.spool import DEFAULT_MEMORY_BUDGET, ChunkSpool

SHARDING_TYPE = "neuroglancer_uint64_sharded_v1"
HASHES = names(ShardHash)
ENCODINGS = ("raw", "gzip")
_U64 = np.dtype("<u8")


def _bit_count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ShardingSpecError(f"sharding {name} must be an integer, got {value!r}")
    if value < 0:
        raise ShardingSpecError(f"sharding {name} must be >= 0, got {value}")
    return value


@dataclass(frozen=True)
class ShardingSpec:
    """A validated `"sharding"` member of a precomputed `info`."""

    preshift_bits: int = 0
    hash: str = "identity"
    minishard_bits: int = 0
    shard_bits: int = 0
    minishard_index_encoding: str = "raw"
    data_encoding: str = "raw"

    def __post_init__(self) -> None:
        for name in ("preshift_bits", "minishard_bits", "shard_bits"):
            _bit_count(getattr(self, name), name)
        total = self.preshift_bits + self.minishard_bits + self.shard_bits
        if total > 64:
            raise ShardingSpecError(
                f"sharding preshift_bits + minishard_bits + shard_bits = {total}; must be <= 64"
            )
        if self.hash not in HASHES:
            raise ShardingSpecError(f"sharding hash must be one of {HASHES}, got {self.hash!r}")
        for name in ("minishard_index_encoding", "data_encoding"):
            if getattr(self, name) not in ENCODINGS:
                raise ShardingSpecError(
                    f"sharding {name} must be one of {ENCODINGS}, got {getattr(self, name)!r}"
                )

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ShardingSpec:
        if not isinstance(obj, Mapping):
            raise ShardingSpecError(
                f"sharding spec must be a JSON object, got {type(obj).__name__}"
            )
        if obj.get("@type") != SHARDING_TYPE:
            raise ShardingSpecError(
                f"sharding @type must be {SHARDING_TYPE!r}, got {obj.get('@type')!r}"
            )
        known = {
            "@type",
            "preshift_bits",
            "hash",
            "minishard_bits",
            "shard_bits",
            "minishard_index_encoding",
            "data_encoding",
        }
        unknown = sorted(set(obj) - known)
        if unknown:
            raise ShardingSpecError(f"unknown sharding spec member(s): {', '.join(unknown)}")
        for name in ("preshift_bits", "hash", "minishard_bits", "shard_bits"):
            if name not in obj:
                raise ShardingSpecError(f"sharding spec is missing {name!r}")
        return cls(
            preshift_bits=obj["preshift_bits"],
            hash=obj["hash"],
            minishard_bits=obj["minishard_bits"],
            shard_bits=obj["shard_bits"],
            minishard_index_encoding=obj.get("minishard_index_encoding", "raw"),
            data_encoding=obj.get("data_encoding", "raw"),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "@type": SHARDING_TYPE,
            "preshift_bits": self.preshift_bits,
            "hash": self.hash,
            "minishard_bits": self.minishard_bits,
            "shard_bits": self.shard_bits,
            "minishard_index_encoding": self.minishard_index_encoding,
            "data_encoding": self.data_encoding,
        }

    # -- geometry -----------------------------------------------------------------------------
    @property
    def num_shards(self) -> int:
        return 1 << self.shard_bits

    @property
    def num_minishards(self) -> int:
        return 1 << self.minishard_bits

    @property
    def shard_index_nbytes(self) -> int:
        return 16 * self.num_minishards

    def hash_ids(self, chunk_ids: npt.ArrayLike) -> npt.NDArray[np.uint64]:
        """The hashed chunk ids: ``hash(id >> preshift_bits)``."""
        shifted = np.asarray(chunk_ids, dtype=np.uint64) >> np.uint64(self.preshift_bits)
        if self.hash == "identity":
            return shifted
        return murmurhash3_x86_128_low64(shifted)

    def locate(
        self, chunk_ids: npt.ArrayLike
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
        """(shard number, minishard number) of each chunk id."""
        hashed = self.hash_ids(chunk_ids)
        minishard = hashed & np.uint64(self.num_minishards - 1)
        shard = (hashed >> np.uint64(self.minishard_bits)) & np.uint64(self.num_shards - 1)
        return shard, minishard

    def shard_filename(self, shard_number: int) -> str:
        """``<shard>.shard`` with the number in lowercase hex, zero-padded to ceil(bits/4)."""
        if not 0 <= shard_number < self.num_shards:
            raise ShardFormatError(
                f"shard number {shard_number} out of range [0, {self.num_shards})"
            )
        digits = math.ceil(self.shard_bits / 4)
        return f"{shard_number:0{max(digits, 1)}x}.shard"

    # -- whole-shard helpers --------------------------------------------------------------------
    def builder(
        self,
        shard_number: int | None = None,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        spool_dir: str | None = None,
        level: int | None = None,
    ) -> ShardBuilder:
        return ShardBuilder(
            self, shard_number, memory_budget=memory_budget, spool_dir=spool_dir, level=level
        )

    def encode_shards(self, items: Mapping[int, bytes]) -> dict[str, bytes]:
        """Assemble complete shard files (filename -> bytes) holding every item."""
        if not items:
            return {}
        ids = np.fromiter(items.keys(), dtype=np.uint64, count=len(items))
        blobs = list(items.values())
        shards, _ = self.locate(ids)
        order = np.argsort(shards, kind="stable")
        bounds = np.flatnonzero(np.diff(shards[order])) + 1
        out: dict[str, bytes] = {}
        for group in np.split(order, bounds):
            shard_number = int(shards[group[0]])
            builder = self.builder(shard_number, memory_budget=2**62)
            builder.add_many(ids[group], [blobs[i] for i in group.tolist()])
            shard = builder.finish()
            out[shard.name] = shard.to_bytes()
        return out

    def decode_shard(self, data: bytes | memoryview) -> dict[int, bytes]:
        """All chunks of one shard file (data_encoding undone), validating its structure."""
        view = memoryview(data)
        decoder = byte_codec(self.data_encoding) if self.data_encoding != "raw" else None
        out: dict[int, bytes] = {}
        for ids, starts, sizes in iter_minishard_indices(self, view):
            for chunk_id, start, size in zip(
                ids.tolist(), starts.tolist(), sizes.tolist(), strict=True
            ):
                blob = view[start : start + size]
                out[chunk_id] = decoder.decompress(blob) if decoder else bytes(blob)
        return out


# -- index (de)serialisation ------------------------------------------------------------------
def read_shard_index(spec: ShardingSpec, data: bytes | memoryview) -> npt.NDArray[np.uint64]:
    """The (num_minishards, 2) array of absolute [start, end) minishard index ranges."""
    n = spec.shard_index_nbytes
    if len(data) < n:
        raise ShardFormatError(f"shard is {len(data)} bytes, shorter than its {n}-byte shard index")
    rel = np.frombuffer(data, dtype=_U64, count=2 * spec.num_minishards).reshape(-1, 2)
    if (rel[:, 0] > rel[:, 1]).any():
        raise ShardFormatError("shard index has a minishard index range with start > end")
    return rel.astype(np.uint64) + np.uint64(n)


def encode_minishard_index(
    spec: ShardingSpec,
    ids: npt.NDArray[np.uint64],
    starts: npt.NDArray[np.uint64],
    sizes: npt.NDArray[np.uint64],
) -> bytes:
    """Minishard index bytes for chunks sorted by id; `starts` relative to the shard index end."""
    table = np.empty((3, ids.shape[0]), dtype=_U64)
    with np.errstate(over="ignore"):
        table[0, 0] = ids[0]
        table[0, 1:] = np.diff(ids)
        table[1, 0] = starts[0]
        table[1, 1:] = starts[1:] - (starts[:-1] + sizes[:-1])
    table[2] = sizes
    raw = table.tobytes()
    if spec.minishard_index_encoding == "gzip":
        codec = byte_codec("gzip")
        assert codec is not None
        return codec.compress(raw)
    return raw


def decode_minishard_index(
    spec: ShardingSpec, encoded: bytes | memoryview, shard_nbytes: int | None = None
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
    """(ids, absolute start offsets, sizes) from one encoded minishard index."""
    if spec.minishard_index_encoding == "gzip":
        codec = byte_codec("gzip")
        assert codec is not None
        try:
            raw: bytes | memoryview = codec.decompress(encoded)
        except Exception as exc:  # corrupt gzip streams raise several exception types
            raise ShardFormatError(f"minishard index is not valid gzip: {exc}") from exc
    else:
        raw = encoded
    if len(raw) % 24:
        raise ShardFormatError(f"minishard index is {len(raw)} bytes, not a multiple of 24")
    table = np.frombuffer(raw, dtype=_U64).reshape(3, -1).astype(np.uint64)
    with np.errstate(over="ignore"):
        ids = np.cumsum(table[0], dtype=np.uint64)
        sizes = table[2]
        ends = np.cumsum(table[1] + sizes, dtype=np.uint64) + np.uint64(spec.shard_index_nbytes)
        starts = ends - sizes
    # starts > ends means the sums wrapped around: a corrupt index, like ends past the shard.
    if (
        shard_nbytes is not None
        and ids.size
        and ((starts > ends).any() or (ends > np.uint64(shard_nbytes)).any())
    ):
        raise ShardFormatError("minishard index points outside the shard")
    return ids, starts, sizes


def iter_minishard_indices(
    spec: ShardingSpec, data: bytes | memoryview
) -> Iterator[tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64], npt.NDArray[np.uint64]]]:
    """Decode every non-empty minishard index of a whole shard file."""
    ranges = read_shard_index(spec, data)
    if (ranges[:, 1] > np.uint64(len(data))).any():
        raise ShardFormatError("shard index points past the end of the shard")
    for minishard, (start, end) in enumerate(ranges.tolist()):
        if start == end:
            continue
        ids, starts, sizes = decode_minishard_index(spec, data[start:end], len(data))
        _, located = spec.locate(ids)
        if (located != np.uint64(minishard)).any():
            raise ShardFormatError(f"minishard {minishard} lists chunk ids of another minishard")
        yield ids, starts, sizes


# -- streaming assembly ----------------------------------------------------------------------
class ShardBuilder:
    """Collects one shard's chunks in any order and emits the finished file.

    Only encoded chunks are held, in a `ChunkSpool` that spills to local disk beyond
    `memory_budget`; the file is streamed from there in its final order.
    """

    def __init__(
        self,
        spec: ShardingSpec,
        shard_number: int | None = None,
        *,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        spool_dir: str | None = None,
        level: int | None = None,
    ):
        """`level`: the `data_encoding`'s compression level (None: its default); readers do
        not need it, so the spec does not record it."""
        self.spec = spec
        self.shard_number = shard_number
        self._spool = ChunkSpool(memory_budget, spool_dir)
        self._ids: list[int] = []
        self._prefix_sizes: list[int] = []
        self._encoder = byte_codec(spec.data_encoding, level=level)

    @property
    def spilled(self) -> bool:
        return self._spool.spilled

    def add(self, chunk_id: int, payload: Piece, *, prefix: bytes = b"") -> None:
        """Add a chunk; the spec's `data_encoding` (e.g. gzip) is applied here (not to
        `prefix`: bytes stored right before the chunk that no index entry covers)."""
        if self._encoder is not None:
            payload = self._encoder.compress(payload)
        self.add_encoded(chunk_id, payload, prefix=prefix)

    def add_encoded(self, chunk_id: int, stored: Piece, *, prefix: bytes = b"") -> None:
        """Add a chunk whose bytes already carry the `data_encoding` (e.g. GPU-compressed)."""
        self._ids.append(int(chunk_id))
        self._prefix_sizes.append(len(prefix))
        self._spool.append(prefix + bytes(stored) if prefix else stored)

    def add_many(
        self, chunk_ids: Sequence[int] | npt.NDArray[np.uint64], payloads: Sequence[bytes]
    ) -> None:
        if len(chunk_ids) != len(payloads):
            raise ShardFormatError(f"{len(chunk_ids)} chunk ids but {len(payloads)} payloads")
        for chunk_id, payload in zip(
            np.asarray(chunk_ids, dtype=np.uint64).tolist(), payloads, strict=True
        ):
            self.add(chunk_id, payload)

    def close(self) -> None:
        """Drop what was added (a task failing before `finish`): the spool file goes too."""
        self._spool.close()

    def finish(self) -> ShardFile:
        ids = np.asarray(self._ids, dtype=np.uint64)
        prefixes = np.asarray(self._prefix_sizes, dtype=np.uint64)
        layout = precomputed_layout(
            self.spec,
            ids,
            self._spool.sizes(),
            self.shard_number,
            prefixes if prefixes.any() else None,
        )
        spool = self._spool

        def pieces() -> Iterator[bytes | memoryview]:
            yield layout.header
            yield from spool.iter_in_order(layout.order)
            yield from layout.index_blobs

        return ShardFile(
            name=self.spec.shard_filename(layout.shard_number),
            nbytes=layout.nbytes,
            chunk_count=int(ids.size),
            _pieces=pieces,
            _close=spool.close,
        )


def packed_shard(
    spec: ShardingSpec,
    shard_number: int,
    chunk_ids: npt.NDArray[np.uint64],
    sizes: npt.NDArray[np.int64],
    data: npt.NDArray[np.uint8],
    *,
    level: int | None = None,
) -> ShardFile:
    """A whole shard from its chunks packed in one buffer (`sizes` each, in the order of
    `chunk_ids`), for shards of very many small chunks (annotations), where a Python step per
    chunk would cost more than the chunk. Packed in the file's order (minishard, then id),
    the buffer is written as it is; otherwise it is gathered chunk by chunk. A gzip
    `data_encoding` compresses each chunk, as the format reads it."""
    ids = np.asarray(chunk_ids, np.uint64)
    lengths = np.asarray(sizes, np.int64)
    payload: Piece = memoryview(np.ascontiguousarray(data, np.uint8).data).cast("B")
    encoder = byte_codec(spec.data_encoding, level=level)
    layout = precomputed_layout(spec, ids, lengths.astype(np.uint64), shard_number)
    ordered = bool((layout.order == np.arange(ids.size)).all())
    if encoder is not None or not ordered:
        ends = np.cumsum(lengths).tolist()
        chunks = [payload[end - size : end] for end, size in zip(ends, lengths.tolist(),
                                                                   strict=True)]  # fmt: skip
        chunks = [chunks[i] for i in layout.order.tolist()]
        if encoder is not None:
            chunks = [encoder.compress(chunk) for chunk in chunks]
        payload = b"".join(chunks)
        stored = np.asarray([len(chunk) for chunk in chunks], np.uint64)
        layout = precomputed_layout(spec, ids[layout.order], stored, shard_number)
    header, blobs, body = layout.header, layout.index_blobs, payload
    return ShardFile(
        name=spec.shard_filename(layout.shard_number),
        nbytes=layout.nbytes,
        chunk_count=int(ids.size),
        _pieces=lambda: [header, body, *blobs],
    )


@dataclass(frozen=True)
class ShardLayout:
    """Where every chunk of a shard goes: the file is header, chunks in `order`, index blobs."""

    shard_number: int
    order: npt.NDArray[np.intp]  # input position of the chunk stored k-th
    header: bytes  # the shard index
    index_blobs: list[bytes]  # encoded minishard indices, after all chunk data
    data_nbytes: int

    @property
    def nbytes(self) -> int:
        return len(self.header) + self.data_nbytes + sum(len(b) for b in self.index_blobs)


def precomputed_layout(
    spec: ShardingSpec,
    chunk_ids: npt.NDArray[np.uint64],
    sizes: npt.NDArray[np.uint64],
    shard_number: int | None = None,
    prefix_sizes: npt.NDArray[np.uint64] | None = None,
) -> ShardLayout:
    """Order chunks by (minishard, id) and build the shard and minishard indexes.

    `sizes` are the stored bytes of each entry; with `prefix_sizes`, the first bytes of an
    entry are unindexed (the index covers the rest).

    The host-side bookkeeping shared by every engine: the CPU builder streams its spool in
    `order`; the GPU engine gathers its encoded buffer in the same order (engine/aggregate.py).
    """
    ids = np.asarray(chunk_ids, dtype=np.uint64)
    sizes = np.asarray(sizes, dtype=np.uint64)
    shards, minishards = spec.locate(ids)
    if shard_number is None:
        shard_number = int(shards[0]) if ids.size else 0
    if ids.size and (shards != np.uint64(shard_number)).any():
        stray = int(ids[np.flatnonzero(shards != np.uint64(shard_number))[0]])
        raise ShardFormatError(f"chunk id {stray} does not belong to shard {shard_number}")
    order = np.lexsort((ids, minishards))
    ids_sorted, mini_sorted, sizes_sorted = ids[order], minishards[order], sizes[order]
    if ids.size > 1:
        dup = np.flatnonzero(ids_sorted[1:] == ids_sorted[:-1])
        if dup.size:
            raise ShardFormatError(f"chunk id {int(ids_sorted[dup[0]])} added twice")
    starts = np.cumsum(sizes_sorted, dtype=np.uint64) - sizes_sorted
    data_nbytes = int(sizes_sorted.sum(dtype=np.uint64))
    if prefix_sizes is not None:
        skipped = np.asarray(prefix_sizes, dtype=np.uint64)[order]
        starts, sizes_sorted = starts + skipped, sizes_sorted - skipped

    shard_index = np.zeros((spec.num_minishards, 2), dtype=_U64)
    blobs: list[bytes] = []
    position = data_nbytes
    present = np.unique(mini_sorted)
    bounds = np.searchsorted(mini_sorted, present, side="left")
    ends = np.append(bounds[1:], ids_sorted.size)
    for minishard, lo, hi in zip(present.tolist(), bounds.tolist(), ends.tolist(), strict=True):
        blob = encode_minishard_index(spec, ids_sorted[lo:hi], starts[lo:hi], sizes_sorted[lo:hi])
        shard_index[minishard] = (position, position + len(blob))
        position += len(blob)
        blobs.append(blob)
    return ShardLayout(shard_number, order, shard_index.tobytes(), blobs, data_nbytes)
