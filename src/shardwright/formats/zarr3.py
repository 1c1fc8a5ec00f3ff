"""Zarr v3 `sharding_indexed` shards and the `zarr.json` of a sharded array.

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
``crc32c``; producing them is the codecs' and engine's job, not this module's.

Pure bytes in, bytes out: no I/O beyond the local spool a builder may spill to.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import google_crc32c
import numpy as np
import numpy.typing as npt

from shardwright.codecs import ByteCodec, byte_codec
from shardwright.errors import ShardFormatError, ZarrMetadataError
from shardwright.formats.shardfile import ShardFile
from shardwright.formats.spool import DEFAULT_MEMORY_BUDGET, ChunkSpool

MISSING = 2**64 - 1
"""Index sentinel: an inner chunk whose offset and nbytes are both this is absent."""

INDEX_LOCATIONS = ("start", "end")
DATA_TYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
)
COMPRESSORS = ("gzip", "zstd", "blosc")
BLOSC_CNAMES = ("blosclz", "lz4", "lz4hc", "zlib", "zstd")
BLOSC_SHUFFLES = ("noshuffle", "shuffle", "bitshuffle")

_U64 = np.dtype("<u8")
_Coords = TypeVar("_Coords", bound=tuple[int, ...])
_CRC_NBYTES = 4
_MISSING_U64 = np.uint64(MISSING)


# -- grid helpers ----------------------------------------------------------------------------
def _grid(chunks_per_shard: Sequence[int]) -> tuple[int, ...]:
    grid = tuple(chunks_per_shard)
    if not grid:
        raise ValueError("chunks_per_shard must have rank >= 1")
    for n in grid:
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ValueError(f"chunks_per_shard must be positive integers, got {grid}")
    return tuple(int(n) for n in grid)


def index_nbytes(chunks_per_shard: Sequence[int]) -> int:
    """Encoded size of a shard index: 16 bytes per inner chunk plus the 4-byte crc32c."""
    return 16 * math.prod(_grid(chunks_per_shard)) + _CRC_NBYTES


def _check_location(index_location: str) -> str:
    if index_location not in INDEX_LOCATIONS:
        raise ValueError(f"index_location must be 'start' or 'end', got {index_location!r}")
    return index_location


def encode_index(index: npt.ArrayLike) -> bytes:
    """Index bytes + crc32c for an array of (offset, nbytes) pairs in C order of the grid.

    Exposed so engines that compute offsets themselves (the GPU path) emit the same bytes.
    """
    table = np.ascontiguousarray(index, dtype=_U64)
    if table.ndim < 1 or table.shape[-1] != 2:
        raise ValueError(f"index must have a trailing dimension of 2, got shape {table.shape}")
    return append_crc32c(table.tobytes())


def append_crc32c(data: bytes) -> bytes:
    """The `crc32c` bytes-to-bytes codec: data followed by its little-endian CRC32C."""
    return data + struct.pack("<I", google_crc32c.value(data))


def strip_crc32c(data: bytes | memoryview) -> bytes:
    """Undo `append_crc32c`, checking the checksum."""
    view = memoryview(data).cast("B")
    if len(view) < _CRC_NBYTES:
        raise ShardFormatError(f"{len(view)} bytes cannot hold a crc32c")
    payload = bytes(view[:-_CRC_NBYTES])
    (stored,) = struct.unpack("<I", view[-_CRC_NBYTES:])
    if stored != google_crc32c.value(payload):
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
    actual = google_crc32c.value(bytes(raw))
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
            raise ValueError(
                f"chunk coordinates {tuple(coords)} have rank {len(coords)}, "
                f"the shard grid {grid} has rank {len(grid)}"
            )
        linear = 0
        for c, n, stride in zip(coords, grid, self._strides, strict=True):
            if isinstance(c, bool) or not isinstance(c, int | np.integer) or not 0 <= c < n:
                raise ValueError(
                    f"chunk coordinates {tuple(coords)} are out of range for the shard grid {grid}"
                )
            linear += int(c) * stride
        if self._slot[linear] >= 0:
            raise ValueError(f"chunk {tuple(int(c) for c in coords)} added twice to the shard")
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
            raise ValueError(
                f"coords must have shape (N, {len(grid)}) for the shard grid {grid}, "
                f"got {table.shape}"
            )
        if table.shape[0] != len(blobs):
            raise ValueError(f"{table.shape[0]} chunk coordinates but {len(blobs)} blobs")
        if not np.issubdtype(table.dtype, np.integer):
            raise ValueError(f"coords must be integers, got dtype {table.dtype}")
        bad = ((table < 0) | (table >= np.asarray(grid))).any(axis=1)
        if bad.any():
            row = tuple(int(c) for c in table[np.flatnonzero(bad)[0]])
            raise ValueError(f"chunk coordinates {row} are out of range for the shard grid {grid}")
        linear = np.ravel_multi_index(tuple(table.T), grid)
        uniq, counts = np.unique(linear, return_counts=True)
        clash = np.concatenate([uniq[counts > 1], linear[self._slot[linear] >= 0]])
        if clash.size:
            where = tuple(int(c) for c in np.unravel_index(int(clash[0]), grid))
            raise ValueError(f"chunk {where} added twice to the shard")
        start = len(self._spool)
        for blob in blobs:
            self._spool.append(blob)
        self._slot[linear] = np.arange(start, start + len(blobs), dtype=np.int64)

    def finish(self) -> ShardFile:
        """The finished shard; its pieces stream from the spool. Raises if no chunk was added."""
        self._check_open()
        if len(self._spool) == 0:
            raise ValueError(
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

        def pieces() -> Iterator[bytes]:
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
            raise ValueError("a shard with its index at the end needs object_size to be read")
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
            raise ValueError(
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


# -- zarr.json -------------------------------------------------------------------------------
def _positive_shape(value: Any, name: str) -> tuple[int, ...]:
    try:
        items = tuple(value)
    except TypeError:
        raise ZarrMetadataError(f"{name} must be a list of integers, got {value!r}") from None
    for n in items:
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ZarrMetadataError(f"{name} must be positive integers, got {list(items)}")
    if not items:
        raise ZarrMetadataError(f"{name} must have rank >= 1")
    return tuple(int(n) for n in items)


def _dtype_name(value: Any) -> str:
    try:
        name = np.dtype(value).name
    except TypeError:
        name = None
    if name not in DATA_TYPES:
        raise ZarrMetadataError(f"data_type {value!r} is not supported; use one of {DATA_TYPES}")
    return name


def _fill_value(value: Any, dtype: np.dtype[Any]) -> int | float | bool:
    """`value` as a Python scalar of `dtype`'s kind, or an error if the dtype cannot hold it."""
    bad = ZarrMetadataError(f"fill_value {value!r} is not representable as {dtype.name}")
    if dtype.kind == "b":
        if isinstance(value, bool | np.bool_):
            return bool(value)
        raise bad
    if isinstance(value, bool | np.bool_):
        raise bad
    if dtype.kind in "iu":
        if isinstance(value, float | np.floating) and float(value).is_integer():
            value = int(value)
        if not isinstance(value, int | np.integer):
            raise bad
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise bad
        return int(value)
    if not isinstance(value, int | float | np.integer | np.floating):
        raise bad
    number = float(value)
    if math.isfinite(number) and abs(number) > float(np.finfo(dtype).max):
        raise bad
    return number


def _fill_to_json(value: int | float | bool) -> Any:
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
    return value


def _fill_from_json(value: Any, dtype: np.dtype[Any]) -> int | float | bool:
    if dtype.kind == "f" and isinstance(value, str):
        special = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
        if value in special:
            return special[value]
        if value.startswith("0x") and len(value) == 2 + 2 * dtype.itemsize:
            try:
                bits = int(value, 16)
            except ValueError:
                pass
            else:
                raw = bits.to_bytes(dtype.itemsize, "little")
                return float(np.frombuffer(raw, dtype=dtype.newbyteorder("<"))[0])
        raise ZarrMetadataError(f"fill_value {value!r} is not a valid {dtype.name} fill value")
    return _fill_value(value, dtype)


@dataclass(frozen=True)
class Compressor:
    """The compressor of the inner codec chain: gzip, zstd or blosc, with its settings.

    `level` is the gzip/zstd level or the blosc clevel; `cname`, `shuffle` and `blocksize`
    apply to blosc only (the blosc typesize is always the array's item size).
    """

    name: str
    level: int
    cname: str | None = None
    shuffle: str | None = None
    blocksize: int = 0

    def __post_init__(self) -> None:
        if self.name not in COMPRESSORS:
            raise ZarrMetadataError(
                f"compressor must be one of {COMPRESSORS} or None, got {self.name!r}"
            )
        level = self.level
        if isinstance(level, bool) or not isinstance(level, int):
            raise ZarrMetadataError(f"{self.name} level must be an integer, got {level!r}")
        low, high = {"gzip": (0, 9), "zstd": (-131072, 22), "blosc": (0, 9)}[self.name]
        if not low <= level <= high:
            raise ZarrMetadataError(f"{self.name} level must be in [{low}, {high}], got {level}")
        if self.name == "blosc":
            if self.cname not in BLOSC_CNAMES:
                raise ZarrMetadataError(
                    f"blosc cname must be one of {BLOSC_CNAMES}, got {self.cname!r}"
                )
            if self.shuffle not in BLOSC_SHUFFLES:
                raise ZarrMetadataError(
                    f"blosc shuffle must be one of {BLOSC_SHUFFLES}, got {self.shuffle!r}"
                )
            if isinstance(self.blocksize, bool) or not isinstance(self.blocksize, int):
                raise ZarrMetadataError(
                    f"blosc blocksize must be an integer, got {self.blocksize!r}"
                )
            if self.blocksize < 0:
                raise ZarrMetadataError(f"blosc blocksize must be >= 0, got {self.blocksize}")
        elif self.cname is not None or self.shuffle is not None or self.blocksize:
            raise ZarrMetadataError(f"cname/shuffle/blocksize apply to blosc only, not {self.name}")

    @classmethod
    def gzip(cls, level: int = 6) -> Compressor:
        return cls("gzip", level)

    @classmethod
    def zstd(cls, level: int = 3) -> Compressor:
        return cls("zstd", level)

    @classmethod
    def blosc(
        cls, cname: str = "zstd", clevel: int = 5, shuffle: str = "shuffle", blocksize: int = 0
    ) -> Compressor:
        return cls("blosc", clevel, cname, shuffle, blocksize)

    def codec(self, itemsize: int) -> ByteCodec:
        """The byte codec that produces what this zarr.json entry describes."""
        if self.name == "blosc":
            codec = byte_codec(
                "blosc",
                cname=self.cname or "zstd",
                clevel=self.level,
                shuffle=self.shuffle or "shuffle",
                typesize=itemsize,
                blocksize=self.blocksize,
            )
        else:
            codec = byte_codec(self.name, level=self.level)
        assert codec is not None
        return codec

    def to_json(self, itemsize: int) -> dict[str, Any]:
        if self.name == "gzip":
            return {"name": "gzip", "configuration": {"level": self.level}}
        if self.name == "zstd":
            return {"name": "zstd", "configuration": {"level": self.level, "checksum": False}}
        return {
            "name": "blosc",
            "configuration": {
                "cname": self.cname,
                "clevel": self.level,
                "shuffle": self.shuffle,
                "typesize": itemsize,
                "blocksize": self.blocksize,
            },
        }


_TOP_LEVEL = {
    "zarr_format",
    "node_type",
    "shape",
    "data_type",
    "chunk_grid",
    "chunk_key_encoding",
    "fill_value",
    "codecs",
    "attributes",
    "dimension_names",
    "storage_transformers",
}


@dataclass(frozen=True)
class ZarrArrayMetadata:
    """The `zarr.json` of a sharded Zarr v3 array as shardwright writes it.

    `shard_shape` is the outer chunk grid (one object per shard), `chunk_shape` the inner
    chunks inside each shard. Arrays are little endian, C order. A NaN fill value makes two
    otherwise equal instances compare unequal (NaN != NaN); compare `to_json()` instead.
    """

    shape: tuple[int, ...]
    data_type: str
    shard_shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    fill_value: int | float | bool = 0
    dimension_names: tuple[str | None, ...] | None = None
    compressor: Compressor | None = None
    checksum_inner: bool = False
    index_location: str = "end"
    attributes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "shape", _positive_shape(self.shape, "shape"))
        set_(self, "shard_shape", _positive_shape(self.shard_shape, "shard_shape"))
        set_(self, "chunk_shape", _positive_shape(self.chunk_shape, "chunk_shape"))
        rank = len(self.shape)
        for name in ("shard_shape", "chunk_shape"):
            if len(getattr(self, name)) != rank:
                raise ZarrMetadataError(
                    f"{name} {getattr(self, name)} has rank {len(getattr(self, name))}, "
                    f"shape {self.shape} has rank {rank}"
                )
        for d, (outer, inner) in enumerate(zip(self.shard_shape, self.chunk_shape, strict=True)):
            if outer % inner:
                raise ZarrMetadataError(
                    f"shard_shape {self.shard_shape} is not a multiple of chunk_shape "
                    f"{self.chunk_shape} in dimension {d} ({outer} % {inner} != 0)"
                )
        set_(self, "data_type", _dtype_name(self.data_type))
        set_(self, "fill_value", _fill_value(self.fill_value, self.dtype))
        if self.dimension_names is not None:
            names = tuple(self.dimension_names)
            if len(names) != rank:
                raise ZarrMetadataError(
                    f"dimension_names {list(names)} has {len(names)} entries, "
                    f"shape {self.shape} has rank {rank}"
                )
            if not all(n is None or isinstance(n, str) for n in names):
                raise ZarrMetadataError(
                    f"dimension_names must be strings or null, got {list(names)}"
                )
            set_(self, "dimension_names", names)
        if self.compressor is not None and not isinstance(self.compressor, Compressor):
            raise ZarrMetadataError(
                f"compressor must be a Compressor or None, got {self.compressor!r} "
                "(use Compressor.gzip(), Compressor.zstd() or Compressor.blosc())"
            )
        if not isinstance(self.checksum_inner, bool):
            raise ZarrMetadataError(f"checksum_inner must be a bool, got {self.checksum_inner!r}")
        if self.index_location not in INDEX_LOCATIONS:
            raise ZarrMetadataError(
                f"index_location must be 'start' or 'end', got {self.index_location!r}"
            )
        if not isinstance(self.attributes, dict):
            raise ZarrMetadataError(f"attributes must be a dict, got {type(self.attributes)}")

    # -- geometry -----------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The little-endian numpy dtype of the stored elements."""
        return np.dtype(self.data_type).newbyteorder("<")

    @property
    def chunks_per_shard(self) -> tuple[int, ...]:
        return tuple(s // c for s, c in zip(self.shard_shape, self.chunk_shape, strict=True))

    @property
    def shard_grid_shape(self) -> tuple[int, ...]:
        """Number of shards along each dimension (edge shards included)."""
        return tuple(-(-n // s) for n, s in zip(self.shape, self.shard_shape, strict=True))

    @property
    def chunk_grid_shape(self) -> tuple[int, ...]:
        """Number of inner chunks along each dimension over the whole array."""
        return tuple(-(-n // c) for n, c in zip(self.shape, self.chunk_shape, strict=True))

    @property
    def index_nbytes(self) -> int:
        return index_nbytes(self.chunks_per_shard)

    def chunk_key(self, shard_coords: Sequence[int]) -> str:
        """The shard object's key relative to the array: default encoding, "/" separator."""
        grid = self.shard_grid_shape
        if len(shard_coords) != len(grid) or not all(
            0 <= c < n for c, n in zip(shard_coords, grid, strict=True)
        ):
            raise ValueError(
                f"shard coordinates {tuple(shard_coords)} are out of range for the shard grid "
                f"{grid}"
            )
        return "c/" + "/".join(str(int(c)) for c in shard_coords)

    # -- JSON ---------------------------------------------------------------------------------
    def inner_codecs_json(self) -> list[dict[str, Any]]:
        """The inner chunk codec chain: bytes (little endian), compressor?, crc32c?."""
        codecs: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
        if self.compressor is not None:
            codecs.append(self.compressor.to_json(self.dtype.itemsize))
        if self.checksum_inner:
            codecs.append({"name": "crc32c"})
        return codecs

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(self.shape),
            "data_type": self.data_type,
            "chunk_grid": {
                "name": "regular",
                "configuration": {"chunk_shape": list(self.shard_shape)},
            },
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": _fill_to_json(self.fill_value),
            "codecs": [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": list(self.chunk_shape),
                        "codecs": self.inner_codecs_json(),
                        "index_codecs": [
                            {"name": "bytes", "configuration": {"endian": "little"}},
                            {"name": "crc32c"},
                        ],
                        "index_location": self.index_location,
                    },
                }
            ],
            "attributes": dict(self.attributes),
        }
        if self.dimension_names is not None:
            out["dimension_names"] = list(self.dimension_names)
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ZarrArrayMetadata:
        """Parse a sharded array's zarr.json (as shardwright, zarr-python 3 or TensorStore write
        it); anything shardwright cannot reproduce exactly raises ZarrMetadataError."""
        if not isinstance(obj, Mapping):
            raise ZarrMetadataError(f"zarr.json must be a JSON object, got {type(obj).__name__}")
        for key, value in obj.items():
            if key not in _TOP_LEVEL and not (
                isinstance(value, Mapping) and value.get("must_understand") is False
            ):
                raise ZarrMetadataError(f"zarr.json has an unsupported member {key!r}")
        if obj.get("zarr_format") != 3:
            raise ZarrMetadataError(
                f"zarr.json zarr_format must be 3, got {obj.get('zarr_format')!r}"
            )
        if obj.get("node_type") != "array":
            raise ZarrMetadataError(
                f"zarr.json node_type must be 'array', got {obj.get('node_type')!r}"
            )
        for key in ("shape", "data_type", "chunk_grid", "fill_value", "codecs"):
            if key not in obj:
                raise ZarrMetadataError(f"zarr.json is missing {key!r}")
        if obj.get("storage_transformers"):
            raise ZarrMetadataError("zarr.json storage_transformers are not supported")

        if obj["data_type"] not in DATA_TYPES:
            raise ZarrMetadataError(
                f"data_type {obj['data_type']!r} is not supported; use one of {DATA_TYPES}"
            )
        dtype = np.dtype(obj["data_type"])

        grid = _named(obj["chunk_grid"], "chunk_grid")
        if grid[0] != "regular":
            raise ZarrMetadataError(f"chunk_grid must be 'regular', got {grid[0]!r}")
        _only_keys(grid[1], {"chunk_shape"}, "chunk_grid.configuration")
        if "chunk_shape" not in grid[1]:
            raise ZarrMetadataError("chunk_grid.configuration is missing 'chunk_shape'")

        encoding = _named(obj.get("chunk_key_encoding", "default"), "chunk_key_encoding")
        if encoding[0] != "default":
            raise ZarrMetadataError(f"chunk_key_encoding must be 'default', got {encoding[0]!r}")
        _only_keys(encoding[1], {"separator"}, "chunk_key_encoding.configuration")
        if encoding[1].get("separator", "/") != "/":
            raise ZarrMetadataError(
                f"chunk_key_encoding separator must be '/', got {encoding[1]['separator']!r}"
            )

        codecs = obj["codecs"]
        if not isinstance(codecs, list) or len(codecs) != 1:
            raise ZarrMetadataError(
                f"codecs must be exactly one 'sharding_indexed' codec, got {codecs!r}"
            )
        name, shard_cfg = _named(codecs[0], "codecs[0]")
        if name != "sharding_indexed":
            raise ZarrMetadataError(f"codecs[0] must be 'sharding_indexed', got {name!r}")
        where = "codecs[0].configuration"
        _only_keys(shard_cfg, {"chunk_shape", "codecs", "index_codecs", "index_location"}, where)
        for key in ("chunk_shape", "codecs", "index_codecs"):
            if key not in shard_cfg:
                raise ZarrMetadataError(f"{where} is missing {key!r}")
        compressor, checksum_inner = _parse_inner_codecs(shard_cfg["codecs"], dtype)
        _parse_index_codecs(shard_cfg["index_codecs"])

        attributes = obj.get("attributes", {})
        if not isinstance(attributes, Mapping):
            raise ZarrMetadataError(f"zarr.json attributes must be an object, got {attributes!r}")
        names = obj.get("dimension_names")
        if names is not None and not isinstance(names, list):
            raise ZarrMetadataError(f"zarr.json dimension_names must be a list, got {names!r}")
        return cls(
            shape=obj["shape"],
            data_type=obj["data_type"],
            shard_shape=grid[1]["chunk_shape"],
            chunk_shape=shard_cfg["chunk_shape"],
            fill_value=_fill_from_json(obj["fill_value"], dtype),
            dimension_names=None if names is None else tuple(names),
            compressor=compressor,
            checksum_inner=checksum_inner,
            index_location=shard_cfg.get("index_location", "end"),
            attributes=dict(attributes),
        )


def _named(value: Any, where: str) -> tuple[str, Mapping[str, Any]]:
    """(name, configuration) of a `{"name", "configuration"}` object or a bare name string."""
    if isinstance(value, str):
        return value, {}
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        raise ZarrMetadataError(f"{where} must be an object with a 'name', got {value!r}")
    _only_keys(value, {"name", "configuration"}, where)
    config = value.get("configuration", {})
    if not isinstance(config, Mapping):
        raise ZarrMetadataError(f"{where}.configuration must be an object, got {config!r}")
    return value["name"], config


def _only_keys(config: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise ZarrMetadataError(f"{where} has unsupported member(s): {', '.join(unknown)}")


def _check_bytes_codec(config: Mapping[str, Any], where: str, itemsize: int) -> None:
    _only_keys(config, {"endian"}, where)
    endian = config.get("endian")
    if endian is None and itemsize > 1:
        raise ZarrMetadataError(f"{where}: bytes codec needs 'endian' for a multi-byte data type")
    if endian not in (None, "little"):
        raise ZarrMetadataError(f"{where}: bytes endian must be 'little', got {endian!r}")


def _parse_inner_codecs(codecs: Any, dtype: np.dtype[Any]) -> tuple[Compressor | None, bool]:
    """The inner chain must be bytes, then at most one compressor, then optionally crc32c."""
    where = "codecs[0].configuration.codecs"
    if not isinstance(codecs, list) or not codecs:
        raise ZarrMetadataError(f"{where} must be a non-empty list, got {codecs!r}")
    parsed = [_named(c, f"{where}[{i}]") for i, c in enumerate(codecs)]
    name, config = parsed[0]
    if name != "bytes":
        raise ZarrMetadataError(f"{where}[0] must be the 'bytes' codec, got {name!r}")
    _check_bytes_codec(config, f"{where}[0]", dtype.itemsize)
    compressor: Compressor | None = None
    checksum = False
    for i, (name, config) in enumerate(parsed[1:], start=1):
        at = f"{where}[{i}]"
        if name == "crc32c" and i == len(parsed) - 1:
            _only_keys(config, set(), at)
            checksum = True
        elif name in COMPRESSORS and compressor is None and i == 1:
            compressor = _parse_compressor(name, config, at, dtype.itemsize)
        elif name in COMPRESSORS or name == "crc32c":
            raise ZarrMetadataError(
                f"{at}: codec {name!r} is out of place; the supported inner chain is "
                "bytes, [gzip|zstd|blosc], [crc32c]"
            )
        else:
            raise ZarrMetadataError(f"{at}: unsupported codec {name!r}")
    return compressor, checksum


def _parse_compressor(
    name: str, config: Mapping[str, Any], where: str, itemsize: int
) -> Compressor:
    try:
        if name == "gzip":
            _only_keys(config, {"level"}, where)
            return Compressor("gzip", config.get("level", 6))
        if name == "zstd":
            _only_keys(config, {"level", "checksum"}, where)
            if config.get("checksum", False) is not False:
                raise ZarrMetadataError(f"{where}: zstd checksum=true is not supported")
            return Compressor("zstd", config.get("level", 0))
        _only_keys(config, {"cname", "clevel", "shuffle", "typesize", "blocksize"}, where)
        typesize = config.get("typesize", itemsize)
        if typesize != itemsize:
            raise ZarrMetadataError(
                f"{where}: blosc typesize {typesize!r} differs from the item size {itemsize}"
            )
        return Compressor(
            "blosc",
            config.get("clevel", 5),
            config.get("cname"),
            config.get("shuffle"),
            config.get("blocksize", 0),
        )
    except ZarrMetadataError as exc:
        if str(exc).startswith(where):
            raise
        raise ZarrMetadataError(f"{where}: {exc}") from None


def _parse_index_codecs(codecs: Any) -> None:
    where = "codecs[0].configuration.index_codecs"
    if not isinstance(codecs, list):
        raise ZarrMetadataError(f"{where} must be a list, got {codecs!r}")
    parsed = [_named(c, f"{where}[{i}]") for i, c in enumerate(codecs)]
    if [name for name, _ in parsed] != ["bytes", "crc32c"]:
        raise ZarrMetadataError(
            f"{where} must be [bytes (little endian), crc32c], got {[n for n, _ in parsed]}"
        )
    _check_bytes_codec(parsed[0][1], f"{where}[0]", 8)
    _only_keys(parsed[1][1], set(), f"{where}[1]")
