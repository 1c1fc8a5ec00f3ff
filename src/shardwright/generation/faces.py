"""Where two block groups meet: the layer of voxels one hands the other.

A block is read with one voxel of the level meshed (`factor` base voxels) more on each high
side where a block follows (generation/grid.py). Inside its group those voxels lie in chunks
the group reads anyway; at the group's high faces they lie in the next group's blocks, whose
chunks the group would fetch only for that one layer. So a block at its group's low face
(along an axis where a group precedes) hands that layer over: its core's first `factor` base
voxels along the axis, a *face* (`published`), written before the group makes any block. A
block reads its own group's part of its box from the source and each other part from the face
of the block it lies in (`parts`), or from the source where that face is not there yet: faces
change how many chunks are fetched, never a voxel. Group tasks run from the last group to the
first, so a group's neighbours above it have run or are running (jobs/shard_stream.py).

A face is stored as a small object: its box, dtype and shape, the crc32c of its voxels, then
the voxels gzip-compressed (`encode`); `decode` gives None for one that does not prove itself
(another box, a torn or changed object), and the block reads the source instead.
"""

from __future__ import annotations

import itertools
import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c
import numpy as np

from shardwright.codecs.gzip import GzipCodec
from shardwright.common.boxes import Box, intersect
from shardwright.generation.grid import BlockGrid, Triple, three

AXES = "xyz"
MAGIC = b"SWFACE1\n"
_HEADER = struct.Struct("<II")  # header length, crc32c of the voxels
_GZIP = GzipCodec(level=1)  # a face is written once and read once or twice: fastest


@dataclass(frozen=True)
class Part:
    """A part of a block's read box that another group's block `owner` holds: the box (base
    voxels), taken from the owner's face along `axis`."""

    owner: Triple
    axis: int
    box: Box


def read_box(grid: BlockGrid, position: Triple, limit: Triple) -> Box:
    """A block's read box in base voxels (`limit`: the base's shape)."""
    return grid.base_box(*grid.read_box(position), limit)


def own_box(grid: BlockGrid, position: Triple, limit: Triple) -> Box:
    """The part of a block's read box inside its own group (what it reads from the source)."""
    (start, stop), (_, group_stop) = (
        read_box(grid, position, limit),
        grid.base_box(*grid.group_core(grid.group_of(position)), limit),
    )
    return start, three(min(a, b) for a, b in zip(stop, group_stop, strict=True))


def parts(grid: BlockGrid, position: Triple, limit: Triple) -> list[Part]:
    """The parts of a block's read box in other groups' blocks, each with the block and the
    face it is taken from (an axis along which that block starts its group)."""
    box = read_box(grid, position, limit)
    mine = grid.group_of(position)
    found = []
    for step in itertools.product((0, 1), repeat=3):
        owner = three(p + s for p, s in zip(position, step, strict=True))
        if not any(step) or any(o >= n for o, n in zip(owner, grid.counts, strict=True)):
            continue
        theirs = grid.group_of(owner)
        if theirs == mine:
            continue
        part = intersect(box, grid.base_box(*grid.core(owner), limit))
        if part is None:
            continue
        axis = next(a for a in range(3) if step[a] and theirs[a] != mine[a])
        found.append(Part(owner, axis, part))
    return found


def published(grid: BlockGrid, position: Triple, limit: Triple) -> Iterator[tuple[int, Box]]:
    """The faces a block hands over: (axis, box) along each axis where it starts its group
    and a group precedes."""
    for axis in range(3):
        if position[axis] and not position[axis] % grid.group[axis]:
            yield axis, face_box(grid, position, axis, limit)


def face_box(grid: BlockGrid, position: Triple, axis: int, limit: Triple) -> Box:
    """A block's face along `axis`: the base voxels of its core's first level voxel along it."""
    start, stop = grid.core(position)
    first = list(stop)
    first[axis] = start[axis] + 1
    return grid.base_box(start, three(first), limit)


def face_name(position: Triple, axis: int) -> str:
    """A face object's name: `x-2_0_1` (the block's face along x)."""
    return f"{AXES[axis]}-{'_'.join(str(p) for p in position)}"


def encode(voxels: np.ndarray, box: Box) -> bytes:
    """A face object: header, then the voxels [x, y, z, c] (Fortran order) gzip-compressed."""
    raw = np.asfortranarray(voxels).tobytes(order="F")
    header = json.dumps(
        {"box": box, "dtype": voxels.dtype.str, "shape": list(voxels.shape)}
    ).encode()
    return MAGIC + _HEADER.pack(len(header), crc32c.crc32c(raw)) + header + _GZIP.compress(raw)


def decode(data: bytes, box: Box, dtype: np.dtype, channels: int) -> np.ndarray | None:
    """A face's voxels, or None where the object is not the face of `box` as it was written."""
    start = len(MAGIC) + _HEADER.size
    if len(data) < start or not data.startswith(MAGIC):
        return None
    length, crc = _HEADER.unpack_from(data, len(MAGIC))
    try:
        header = json.loads(data[start : start + length])
        raw = _GZIP.decompress(data[start + length :])
    except (ValueError, OSError, EOFError):
        return None
    shape = [b - a for a, b in zip(*box, strict=True)] + [channels]
    wanted = {"box": [list(box[0]), list(box[1])], "dtype": dtype.str, "shape": shape}
    if header != wanted or crc32c.crc32c(raw) != crc:
        return None
    if len(raw) != int(np.prod(shape)) * dtype.itemsize:
        return None
    return np.frombuffer(raw, dtype=dtype).reshape(shape, order="F")
