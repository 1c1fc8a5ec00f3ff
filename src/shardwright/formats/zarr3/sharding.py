"""Zarr v3 `sharding_indexed` shards: the index with its crc32c, the builder, reader and layout.

Shard layout (one object per outer chunk, key ``c/<i>/<j>/<k>``)::

    index_location="end":    [inner chunk blobs, C order] [index] [crc32c]
    index_location="start":  [index] [crc32c] [inner chunk blobs, C order]

The index holds one ``(offset, nbytes)`` uint64 little-endian pair per inner chunk, in C order
of the inner-chunk grid; offsets are absolute from the start of the shard object in both
layouts, and an absent chunk is ``(2**64-1, 2**64-1)``. The index codecs are ``bytes``
(little endian) + ``crc32c``: a 4-byte little-endian CRC32C of the index bytes follows it.
Blobs are laid out in C order of their grid coordinates, so output is deterministic and
byte-identical to what TensorStore writes for the same chunks.

An empty shard (no chunks) is never stored: readers treat a missing shard object as all fill
value, so `encode_shard` and `ShardBuilder.finish` refuse to produce one.

Inner chunks are whatever the caller encoded. Zarr's inner chunks are always full
`chunk_shape` arrays in C order, padded with the fill value at the array's edges (never
truncated), passed through the inner codec chain ``bytes`` -> optional compressor -> optional
``crc32c``; producing them is the codecs' and engine's job, not this module's. The array's
`zarr.json` is `metadata`'s.

Pure bytes in, bytes out: no I/O beyond the local spool a builder may spill to.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar

import crc32c
import numpy as np
import numpy.typing as npt

from shardwright.common.vocabulary import IndexLocation, names
from shardwright.errors import ShardFormatError
from shardwright.formats.shardfile import ShardFile
from shardwright.formats.spool import DEFAULT_MEMORY_BUDGET, ChunkSpool

MISSING = 2**64 - 1
"""Index sentinel: an inner chunk whose offset and nbytes are both this is absent."""

INDEX_LOCATIONS = names(IndexLocation)

_U64 = np.dtype("<u8")
_Coords = TypeVar("_Coords", bound=tuple[int, ...])
_CRC_NBYTES = 4
_MISSING_U64 = np.uint64(MISSING)


# -- grid helpers ----------------------------------------------------------------------------
def _grid(chunks_per_shard: Sequence[int]) -> tuple[int, ...]:
    grid = tuple(chunks_per_shard)
    if not grid:
        raise ShardFormatError("chunks_per_shard must have rank >= 1")
    for n in grid:
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ShardFormatError(f"chunks_per_shard must be positive integers, got {grid}")
    return tuple(int(n) for n in grid)


def index_nbytes(chunks_per_shard: Sequence[int]) -> int:
    """Encoded size of a shard index: 16 bytes per inner chunk plus the 4-byte crc32c."""
    return 16 * math.prod(_grid(chunks_per_shard)) + _CRC_NBYTES


def _check_location(index_location: str) -> str:
    if index_location not in INDEX_LOCATIONS:
        raise ShardFormatError(f"index_location must be 'start' or 'end', got {index_location!r}")
    return index_location


def encode_index(index: npt.ArrayLike) -> bytes:
    """Index bytes + crc32c for an array of (offset, nbytes) pairs in C order of the grid.

    Exposed so engines that compute offsets themselves (the GPU path) emit the same bytes.
    """
    table = np.ascontiguousarray(index, dtype=_U64)
    if table.ndim < 1 or table.shape[-1] != 2:
        raise ShardFormatError(
            f"index must have a trailing dimension of 2, got shape {table.shape}"
        )
    return append_crc32c(table.tobytes())


def append_crc32c(data: bytes) -> bytes:
    """The `crc32c` bytes-to-bytes codec: data followed by its little-endian CRC32C."""
    return data + struct.pack("<I", crc32c.crc32c(data))


def strip_crc32c(data: bytes | memoryview) -> bytes:
    """Undo `append_crc32c`, checking the checksum."""
    view = memoryview(data).cast("B")
    if len(view) < _CRC_NBYTES:
        raise ShardFormatError(f"{len(view)} bytes cannot hold a crc32c")
    payload = bytes(view[:-_CRC_NBYTES])
    (stored,) = struct.unpack("<I", view[-_CRC_NBYTES:])
    if stored != crc32c.crc32c(payload):
        raise ShardFormatError("inner chunk crc32c mismatch")
    return payload


def read_index(
    index_bytes_with_crc: bytes | bytearray | memoryview, chunks_per_shard: Sequence[int]
) -> npt.NDArray[np.uint64]:
    """The (*chunks_per_shard, 2) uint64 index, after checking its length, crc32c and sentinels."""
    grid = _grid(chunks_per_shard)
    expected = index_nbytes(grid)
    view = memoryview(index_bytes_with_crc).cast("B")
    if len(view) != expected:
        raise ShardFormatError(
            f"shard index is {len(view)} bytes, expected {expected} for a {grid} chunk grid "
            "(truncated shard?)"
        )
    raw = view[: expected - _CRC_NBYTES]
    (stored,) = struct.unpack("<I", view[expected - _CRC_NBYTES :])
    actual = crc32c.crc32c(raw)
    if stored != actual:
        raise ShardFormatError(
            f"shard index crc32c mismatch: stored {stored:#010x}, computed {actual:#010x}"
        )
    table = np.frombuffer(raw, dtype=_U64).astype(np.uint64).reshape(*grid, 2)
    half = (table[..., 0] == _MISSING_U64) != (table[..., 1] == _MISSING_U64)
    if half.any():
        where = tuple(int(i) for i in np.argwhere(half)[0])
        raise ShardFormatError(
            f"shard index entry {where} has only one of offset/nbytes set to the 2**64-1 "
            "empty-chunk sentinel"
        )
    return table


def _check_ranges(table: npt.NDArray[np.uint64], object_size: int) -> None:
    """Every present, non-empty chunk must lie inside the object (zero-length: any offset)."""
    offsets, sizes = table[..., 0], table[..., 1]
    present = (offsets != _MISSING_U64) & (sizes != 0)
    size = np.uint64(object_size)
    bad = present & ((sizes > size) | (offsets > size - np.minimum(sizes, size)))
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        offset, nbytes = (int(v) for v in table[where])
        raise ShardFormatError(
            f"shard index entry {where} = [{offset}, {offset + nbytes}) lies outside the "
            f"{object_size}-byte shard (truncated shard?)"
        )


# -- streaming assembly ----------------------------------------------------------------------
class ShardBuilder:
    """Collects one shard's encoded inner chunks in any order and emits the finished object.

    Blobs live in a `ChunkSpool` that spills to local disk beyond `memory_budget`; the finished
    `ShardFile` streams them from there in C order, so the shard is never concatenated in
    memory. The index is built with numpy from the per-chunk sizes.
    """

    def __init__(
        self,
        chunks_per_shard: Sequence[int],
        index_location: str = "end",
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        spool_dir: str | None = None,
        name: str = "",
    ):
        self.chunks_per_shard = _grid(chunks_per_shard)
        self.index_location = _check_location(index_location)
        self.name = name
        self._spool = ChunkSpool(memory_budget, spool_dir)
        n = math.prod(self.chunks_per_shard)
        # slot[linear C-order position] = spool index of that chunk, -1 while absent
        self._slot = np.full(n, -1, dtype=np.int64)
        self._strides = tuple(
            math.prod(self.chunks_per_shard[d + 1 :]) for d in range(len(self.chunks_per_shard))
        )
        self._finished = False

    def __len__(self) -> int:
        return len(self._spool)

    @property
    def spilled(self) -> bool:
        """Whether the blobs now live in a temporary file."""
        return self._spool.spilled

    @property
    def nbytes(self) -> int:
        """Bytes of chunk data added so far (the index not included)."""
        return self._spool.nbytes

    def _check_open(self) -> None:
        if self._finished:
            raise RuntimeError(f"shard builder {self.name!r} is finished; no more chunks")

    def add(self, coords: Sequence[int], blob: bytes | bytearray | memoryview) -> None:
        """Add one encoded inner chunk at grid position `coords` (within this shard)."""
        self._check_open()
        grid = self.chunks_per_shard
        if len(coords) != len(grid):
            raise ShardFormatError(
                f"chunk coordinates {tuple(coords)} have rank {len(coords)}, "
                f"the shard grid {grid} has rank {len(grid)}"
            )
        linear = 0
        for c, n, stride in zip(coords, grid, self._strides, strict=True):
            if isinstance(c, bool) or not isinstance(c, int | np.integer) or not 0 <= c < n:
                raise ShardFormatError(
                    f"chunk coordinates {tuple(coords)} are out of range for the shard grid {grid}"
                )
            linear += int(c) * stride
        if self._slot[linear] >= 0:
            raise ShardFormatError(
                f"chunk {tuple(int(c) for c in coords)} added twice to the shard"
            )
        self._slot[linear] = self._spool.append(blob)

    def add_many(
        self, coords: npt.ArrayLike, blobs: Sequence[bytes | bytearray | memoryview]
    ) -> None:
        """Add N encoded chunks; `coords` is an (N, rank) integer array, validated as a whole."""
        self._check_open()
        grid = self.chunks_per_shard
        table = np.asarray(coords)
        if table.size == 0 and len(blobs) == 0:
            return
        if table.ndim != 2 or table.shape[1] != len(grid):
            raise ShardFormatError(
                f"coords must have shape (N, {len(grid)}) for the shard grid {grid}, "
                f"got {table.shape}"
            )
        if table.shape[0] != len(blobs):
            raise ShardFormatError(f"{table.shape[0]} chunk coordinates but {len(blobs)} blobs")
        if not np.issubdtype(table.dtype, np.integer):
            raise ShardFormatError(f"coords must be integers, got dtype {table.dtype}")
        bad = ((table < 0) | (table >= np.asarray(grid))).any(axis=1)
        if bad.any():
            row = tuple(int(c) for c in table[np.flatnonzero(bad)[0]])
            raise ShardFormatError(
                f"chunk coordinates {row} are out of range for the shard grid {grid}"
            )
        linear = np.ravel_multi_index(tuple(table.T), grid)
        uniq, counts = np.unique(linear, return_counts=True)
        clash = np.concatenate([uniq[counts > 1], linear[self._slot[linear] >= 0]])
        if clash.size:
            where = tuple(int(c) for c in np.unravel_index(int(clash[0]), grid))
            raise ShardFormatError(f"chunk {where} added twice to the shard")
        start = len(self._spool)
        for blob in blobs:
            self._spool.append(blob)
        self._slot[linear] = np.arange(start, start + len(blobs), dtype=np.int64)

    def finish(self) -> ShardFile:
        """The finished shard; its pieces stream from the spool. Raises if no chunk was added."""
        self._check_open()
        if len(self._spool) == 0:
            raise ShardFormatError(
                f"shard {self.name!r} has no chunks: an empty shard is not stored "
                "(readers treat a missing shard as all fill value); skip writing it"
            )
        self._finished = True
        present = np.flatnonzero(self._slot >= 0)
        positions = np.empty(present.size, dtype=np.int64)
        positions[self._slot[present]] = present  # C-order position of each spooled chunk
        order, index = shard_layout(
            self.chunks_per_shard, positions, self._spool.sizes(), self.index_location
        )
        spool = self._spool
        at_start = self.index_location == "start"

        def pieces() -> Iterator[bytes | memoryview]:
            if at_start:
                yield index
            yield from spool.iter_in_order(order)
            if not at_start:
                yield index

        return ShardFile(
            name=self.name,
            nbytes=spool.nbytes + len(index),
            chunk_count=int(present.size),
            _pieces=pieces,
            _close=spool.close,
        )


def shard_layout(
    chunks_per_shard: Sequence[int],
    positions: npt.ArrayLike,
    sizes: npt.ArrayLike,
    index_location: str = "end",
) -> tuple[npt.NDArray[np.intp], bytes]:
    """Blob order (C order of the inner-chunk grid) and the encoded index of a shard.

    `positions` are the C-order linear positions of the present chunks, `sizes` their stored
    sizes, both in any order. Shared by the streaming builder and the GPU engine, which gathers
    its encoded buffer in `order` (engine/aggregate.py) so both write the same bytes.
    """
    grid = _grid(chunks_per_shard)
    positions = np.asarray(positions, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.uint64)
    order = np.argsort(positions, kind="stable")
    sorted_sizes = sizes[order]
    head = index_nbytes(grid) if _check_location(index_location) == "start" else 0
    table = np.full((math.prod(grid), 2), MISSING, dtype=np.uint64)
    table[positions[order], 0] = (
        np.cumsum(sorted_sizes, dtype=np.uint64) - sorted_sizes + np.uint64(head)
    )
    table[positions[order], 1] = sorted_sizes
    return order, encode_index(table)


def encode_shard(
    chunks: Mapping[_Coords, bytes | bytearray | memoryview],
    chunks_per_shard: Sequence[int],
    index_location: str = "end",
) -> bytes:
    """One shard object holding `chunks` (grid coords -> encoded blob), in memory.

    Raises ValueError for an empty mapping: an empty shard is not stored, its absence means
    all fill value. For large shards use `ShardBuilder`, which spools and streams.
    """
    builder = ShardBuilder(chunks_per_shard, index_location, memory_budget=2**62)
    for coords, blob in chunks.items():
        builder.add(coords, blob)
    shard = builder.finish()
    try:
        return shard.to_bytes()
    finally:
        shard.close()


def _index_span(object_size: int, grid: tuple[int, ...], index_location: str) -> tuple[int, int]:
    n = index_nbytes(grid)
    if object_size < n:
        raise ShardFormatError(
            f"shard is {object_size} bytes, shorter than its {n}-byte index (truncated shard?)"
        )
    return (0, n) if index_location == "start" else (object_size - n, object_size)


def decode_shard(
    data: bytes | bytearray | memoryview,
    chunks_per_shard: Sequence[int],
    index_location: str = "end",
) -> dict[tuple[int, ...], bytes]:
    """Every present inner chunk of one shard object (grid coords -> blob), in C order.

    Validates the index crc32c, the sentinels and that every chunk lies inside the object.
    Zero-length chunks are present (and returned as b"") - TensorStore writes and reads them.
    """
    grid = _grid(chunks_per_shard)
    _check_location(index_location)
    view = memoryview(data).cast("B")
    lo, hi = _index_span(len(view), grid, index_location)
    table = read_index(view[lo:hi], grid)
    _check_ranges(table, len(view))
    flat = table.reshape(-1, 2)
    present = np.flatnonzero(flat[:, 0] != _MISSING_U64)
    coords = np.stack(np.unravel_index(present, grid), axis=1).tolist()
    starts = flat[present, 0].tolist()
    ends = (flat[present, 0] + flat[present, 1]).tolist()
    return {tuple(c): bytes(view[s:e]) for c, s, e in zip(coords, starts, ends, strict=True)}


# -- ranged reads ----------------------------------------------------------------------------
class ShardReader:
    """Reads single inner chunks of one shard object through byte-range requests.

    `fetch(start, end)` returns bytes [start, end) of the shard object; it may raise
    FileNotFoundError, which means the shard is absent (every chunk reads as None). The index
    is fetched once and cached. With the index at the end the object size is needed to find
    it, so pass `object_size` (from a stat / HEAD request).
    """

    def __init__(
        self,
        fetch: Callable[[int, int], bytes],
        chunks_per_shard: Sequence[int],
        index_location: str = "end",
        object_size: int | None = None,
    ):
        self.chunks_per_shard = _grid(chunks_per_shard)
        self.index_location = _check_location(index_location)
        if index_location == "end" and object_size is None:
            raise ShardFormatError("a shard with its index at the end needs object_size to be read")
        self._fetch = fetch
        self._object_size = object_size
        self._index: npt.NDArray[np.uint64] | None = None
        self._absent = False

    def index(self) -> npt.NDArray[np.uint64] | None:
        """The (*chunks_per_shard, 2) index, or None if the shard object does not exist."""
        if self._index is None and not self._absent:
            grid = self.chunks_per_shard
            n = index_nbytes(grid)
            if self._object_size is not None:
                lo, hi = _index_span(self._object_size, grid, self.index_location)
            else:
                lo, hi = 0, n
            try:
                raw = self._fetch(lo, hi)
            except FileNotFoundError:
                self._absent = True
                return None
            if len(raw) != n:
                raise ShardFormatError(
                    f"read {len(raw)} of the {n}-byte shard index (truncated shard?)"
                )
            table = read_index(raw, grid)
            if self._object_size is not None:
                _check_ranges(table, self._object_size)
            self._index = table
        return self._index

    def read_chunk(self, coords: Sequence[int]) -> bytes | None:
        """The inner chunk's blob, or None when it is absent (fill value)."""
        grid = self.chunks_per_shard
        if len(coords) != len(grid) or not all(
            0 <= c < n for c, n in zip(coords, grid, strict=True)
        ):
            raise ShardFormatError(
                f"chunk coordinates {tuple(coords)} are out of range for the shard grid {grid}"
            )
        table = self.index()
        if table is None:
            return None
        offset, nbytes = (int(v) for v in table[tuple(coords)])
        if offset == MISSING:
            return None
        if nbytes == 0:
            return b""
        blob = self._fetch(offset, offset + nbytes)
        if len(blob) != nbytes:
            raise ShardFormatError(
                f"chunk {tuple(coords)}: read {len(blob)} of {nbytes} bytes (truncated shard?)"
            )
        return blob
