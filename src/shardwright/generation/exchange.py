"""The exchange between block tasks and output-shard tasks: one spool object per block.

A block task writes one object holding its pieces (a segment's surface or skeleton within
the block) grouped by the output shard their segment hashes to, followed by an index of
those sections and a trailer. The task returns the index (a few bytes per section); the
coordinator folds the indexes into, for each output shard, the byte ranges that shard's
task reads. No task holds more than one block's pieces or one shard's segments, and the job
makes one intermediate object per block, not one per segment.

Layout: sections | index (ENTRY rows) | entry count (uint64) | MAGIC.
"""

from __future__ import annotations

import struct
import zlib
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from shardwright.errors import MeshFormatError
from shardwright.formats.shardfile import Piece as Bytes
from shardwright.generation.census import NO_BOX, Box, Triple
from shardwright.generation.grid import three

MESH, SKELETON = 0, 1  # which output a section feeds
ENTRY = np.dtype([("output", "<u4"), ("shard", "<u4"), ("start", "<u8"), ("stop", "<u8")])
MAGIC = b"SWXCHG04"
TRAILER = 8 + len(MAGIC)
# segment, voxels, block x y z, box low x y z, box high x y z, vertices, faces/edges
_HEADER = struct.Struct("<QQIIIIIIIIIII")
# a skeleton piece's mask: low x y z, shape x y z, bytes; whether the block traced the piece
_MASK = struct.Struct("<IIIIIIII")


@dataclass(frozen=True)
class Mask:
    """A segment's voxels in a box of the level meshed (`low`: its first voxel; the bits
    packed in C order, deflated): what a block hands over of a segment that reaches past its
    faces, so that the segment's skeleton is traced whole where it fits (tracing.py)."""

    low: Triple
    shape: Triple
    bits: bytes

    @classmethod
    def of(cls, voxels: np.ndarray, low: Triple) -> Mask:
        x, y, z = voxels.shape
        return cls(low, (x, y, z), zlib.compress(np.packbits(voxels, axis=None).tobytes(), 1))

    @property
    def high(self) -> Triple:
        x, y, z = (a + n for a, n in zip(self.low, self.shape, strict=True))
        return (x, y, z)

    def voxels(self) -> np.ndarray:
        """The box's voxels (bool, [x, y, z])."""
        count = int(np.prod(self.shape))
        packed = np.frombuffer(zlib.decompress(self.bits), np.uint8)
        return np.unpackbits(packed, count=count).astype(bool).reshape(self.shape)


@dataclass(frozen=True)
class Piece:
    """One segment within one block: a surface (faces [m, 3]) or a skeleton (edges [m, 2],
    radii), either possibly empty, with a skeleton the segment's voxels in the block's core
    where it reaches a face the block shares (`mask`); a piece the block left to the output
    shard's task to trace (`traced` false: tracing.left_to_the_shard) has no skeleton yet.
    Vertices are float32 nm from the block's origin (grid.block_origin_nm). `voxels` and
    `box` (low, high: voxels of the level meshed, high exclusive) are the segment's in the
    block's core: the census sums them."""

    segment: int
    voxels: int
    block: Triple
    vertices: np.ndarray
    links: np.ndarray  # faces or edges, uint32
    radii: np.ndarray | None = None
    box: Box = NO_BOX
    mask: Mask | None = None
    traced: bool = True

    def to_bytes(self) -> bytes:
        header = _HEADER.pack(
            self.segment, self.voxels, *self.block, *self.box[0], *self.box[1],
            len(self.vertices), len(self.links),
        )  # fmt: skip
        parts = [
            header,
            np.ascontiguousarray(self.vertices, "<f4").tobytes(),
            np.ascontiguousarray(self.links, "<u4").tobytes(),
        ]
        if self.radii is not None:
            parts.append(np.ascontiguousarray(self.radii, "<f4").tobytes())
            mask = self.mask or Mask((0, 0, 0), (0, 0, 0), b"")
            parts += [_MASK.pack(*mask.low, *mask.shape, len(mask.bits), self.traced), mask.bits]
        return b"".join(parts)


def read_pieces(data: bytes | memoryview, output: int) -> Iterator[Piece]:
    """The pieces of one section (`output`: MESH or SKELETON)."""
    view = memoryview(data)
    width = 3 if output == MESH else 2
    offset = 0
    while offset < len(view):
        try:
            segment, voxels, *where, nv, nl = _HEADER.unpack_from(view, offset)
            offset += _HEADER.size
            vertices = np.frombuffer(view, "<f4", 3 * nv, offset).reshape(-1, 3)
            offset += 12 * nv
            links = np.frombuffer(view, "<u4", width * nl, offset).reshape(-1, width)
            offset += 4 * width * nl
            radii, mask, traced = None, None, True
            if output == SKELETON:
                radii = np.frombuffer(view, "<f4", nv, offset)
                offset += 4 * nv
                *where_mask, length, traced_flag = _MASK.unpack_from(view, offset)
                traced = bool(traced_flag)
                offset += _MASK.size
                if length:
                    bits = bytes(view[offset : offset + length])
                    if len(bits) != length:
                        raise ValueError("the mask is cut short")
                    mask = Mask(three(where_mask[:3]), three(where_mask[3:]), bits)
                    offset += length
        except (struct.error, ValueError) as exc:
            raise MeshFormatError(f"an exchange section is truncated: {exc}") from None
        block, low, high = where[:3], where[3:6], where[6:]
        yield Piece(segment, voxels, three(block), vertices, links, radii,
                    (three(low), three(high)), mask, traced)  # fmt: skip


def spool(
    sections: Mapping[tuple[int, int], Sequence[Bytes]],
) -> tuple[list[Bytes], np.ndarray]:
    """The pieces of a block's spool object and its index, from (output, shard) -> pieces."""
    parts: list[Bytes] = []
    rows = []
    offset = 0
    for (output, shard), pieces in sorted(sections.items()):
        size = sum(len(p) for p in pieces)
        rows.append((output, shard, offset, offset + size))
        parts.extend(pieces)
        offset += size
    index = np.array(rows, ENTRY)
    parts += [index.tobytes(), struct.pack("<Q", len(index)), MAGIC]
    return parts, index


def index_size(trailer: bytes) -> int:
    """The bytes of the index before a spool object's trailer (its last TRAILER bytes)."""
    if len(trailer) == TRAILER and trailer[8:14] == MAGIC[:6] and trailer[8:] != MAGIC:
        raise MeshFormatError(
            f"a block spool of another shardwright version ({trailer[8:].decode(errors='replace')}"
            f", this one reads {MAGIC.decode()}): finish the job with the version that started "
            "it, or run it again with --overwrite"
        )
    if len(trailer) != TRAILER or trailer[8:] != MAGIC:
        raise MeshFormatError("not a block spool object: its trailer is wrong")
    (entries,) = struct.unpack_from("<Q", trailer)
    return entries * ENTRY.itemsize


def parse_index(data: bytes) -> np.ndarray:
    return np.frombuffer(data, ENTRY).copy()


@dataclass(frozen=True)
class BlockIndex:
    """What a block task returns: its spool object's key and index."""

    key: str
    index: np.ndarray


@dataclass(frozen=True)
class SpooledShardTask:
    """One output shard made from spools: its key, number, the byte ranges of the spools it
    reads (known once every spool task has returned) and which output of its job it is."""

    key: str
    shard_number: int
    ranges: tuple[tuple[str, int, int], ...]
    output: int = 0

    @property
    def chunk_count(self) -> int:
        return len(self.ranges)


class Exchange:
    """The coordinator's table: for each (output, shard), the (key, start, stop) ranges its
    task reads, gathered from the blocks' indexes as they finish."""

    def __init__(self) -> None:
        self._ranges: dict[tuple[int, int], list[tuple[str, int, int]]] = defaultdict(list)

    def add(self, block: BlockIndex) -> None:
        for row in block.index.tolist():
            output, shard, start, stop = row
            self._ranges[(output, shard)].append((block.key, start, stop))

    def shards(self, output: int) -> list[int]:
        """The shards of `output` that any block sent a piece to, in order."""
        return sorted(shard for kind, shard in self._ranges if kind == output)

    def ranges(self, output: int, shard: int) -> Sequence[tuple[str, int, int]]:
        """In block order, whatever order the blocks finished in (the same bytes each run)."""
        return tuple(sorted(self._ranges.get((output, shard), ())))
