"""The census of a segmentation: each segment's voxels and bounding box at the level meshed.

Block tasks count the segments of their core (`block_census`, one pass of the block); an
output-shard task sums a segment's counts and joins its boxes over the segment's pieces and
stores, beside its shard, the table of the segments over the dust threshold that hash to it
(`encode` / `decode`): every one must have its object there, which `verify` checks. A table
holds one shard's segments (40 bytes each), so no object, the manifest included, grows with
the volume's segment count.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from shardwright.errors import MeshFormatError
from shardwright.generation.grid import three

ROW = np.dtype([("segment", "<u8"), ("voxels", "<u8"), ("low", "<u4", 3), ("high", "<u4", 3)])
MAGIC = b"SWCENSUS01"

Triple = tuple[int, int, int]
Box = tuple[Triple, Triple]  # (low, high) voxels, high exclusive
NO_BOX: Box = ((0, 0, 0), (0, 0, 0))  # of a block where the segment has no voxels


def block_census(core: np.ndarray, start: Triple) -> dict[int, tuple[int, Box]]:
    """segment -> (voxels, (low, high)) of the labels `core` [x, y, z] (0 left out), boxes in
    the level's voxels (`start`: the core's first voxel; high exclusive). The segments are
    numbered 1, 2, ... in one hashing pass (fastremap), then counted and boxed in one pass
    each (scipy's find_objects): several times faster than sorting the block's voxels, which
    is what `verify` does where those two (the meshes extra) are not installed."""
    try:
        import fastremap
        from scipy import ndimage
    except ImportError:
        return _sorted_census(core, start)
    numbered, numbers = fastremap.renumber(core, preserve_zero=True, in_place=False)
    counts = np.bincount(numbered.ravel(order="K"), minlength=len(numbers))
    boxes = ndimage.find_objects(numbered)
    out: dict[int, tuple[int, Box]] = {}
    for segment, numbered_as in numbers.items():
        number = int(numbered_as)
        if segment:
            box = boxes[number - 1]
            low = three([a + s.start for a, s in zip(start, box, strict=True)])
            high = three([a + s.stop for a, s in zip(start, box, strict=True)])
            out[int(segment)] = (int(counts[number]), (low, high))
    return out


def _sorted_census(core: np.ndarray, start: Triple) -> dict[int, tuple[int, Box]]:
    """`block_census` in NumPy alone: the voxels sorted by segment, each segment's extent
    along an axis from which planes across it hold the segment."""
    ids = np.unique(core)
    index = np.searchsorted(ids, core)  # each voxel's segment, numbered from 0
    counts = np.bincount(index.ravel(), minlength=len(ids))
    low, high = np.zeros((len(ids), 3), np.int64), np.zeros((len(ids), 3), np.int64)
    for axis in range(3):
        planes = np.moveaxis(index, axis, 0)
        seen = np.zeros(len(ids), bool)
        for plane in range(len(planes)):
            here = np.zeros(len(ids), bool)
            here[planes[plane].ravel()] = True
            low[here & ~seen, axis] = plane
            high[here, axis] = plane + 1
            seen |= here
    low += np.asarray(start)
    high += np.asarray(start)
    return {int(segment): (int(n), (three(lo), three(hi)))
            for segment, n, lo, hi in zip(ids.tolist(), counts.tolist(), low.tolist(),
                                          high.tolist(), strict=True)
            if segment}  # fmt: skip


def joined(parts: Iterable[tuple[int, Box]]) -> tuple[int, Box]:
    """One segment's (voxels, box) from its blocks' (a block with no voxels adds nothing)."""
    voxels, low, high = 0, [2**32 - 1] * 3, [0] * 3
    for n, (lo, hi) in parts:
        if n:
            voxels += n
            low = [min(a, b) for a, b in zip(low, lo, strict=True)]
            high = [max(a, b) for a, b in zip(high, hi, strict=True)]
    return voxels, (three(low), three(high))


def encode(rows: Iterable[tuple[int, int, Box]]) -> bytes:
    """A table object from (segment, voxels, box) rows."""
    table = np.array([(s, n, lo, hi) for s, n, (lo, hi) in rows], ROW)
    return MAGIC + table.tobytes()


def row_count(nbytes: int) -> int:
    """The segments a table object of `nbytes` lists (from a listing, before reading it)."""
    return max(0, nbytes - len(MAGIC)) // ROW.itemsize


def decode(data: bytes) -> np.ndarray:
    """A table object's rows (ROW)."""
    body = data[len(MAGIC) :]
    if data[: len(MAGIC)] != MAGIC or len(body) % ROW.itemsize:
        raise MeshFormatError("not a census table of this project (its header or size is wrong)")
    return np.frombuffer(body, ROW).copy()
