"""A volume shard's voxels as both engines take them, and where a chunk sits in its shard.

A box shard arrives in blocks: its epochs read from the source one after the other (sub-boxes
within the memory budget), or, in a pyramid, its whole region handed up by the level below.
Each block is a chunk-grid box and its voxels [x, y, z, c] from that box's corner, in the
engine's array namespace. The CPU engine cuts blocks into chunks (`block_cells`, or
`cut_cells` for encoders that take one chunk at a time); a scattered (murmurhash) shard's
chunks are read one by one (`scattered_cells`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from shardwright.common.arrays import Array, Namespace, copy_runs, upload
from shardwright.engine.scatter import precomputed_regions
from shardwright.engine.stages import Stages, timer
from shardwright.planning import ConversionPlan, ShardTask
from shardwright.planning.geometry import to_axes

Triple = tuple[int, int, int]
Block = tuple[Triple, Triple, Array]  # chunk box [start, stop), its voxels [x, y, z, c]
Cell = tuple[Triple, np.ndarray]  # (chunk grid coordinate, its voxels [x, y, z, c])
OnEpoch = Callable[[Triple, Array], None]


def epoch_blocks(
    plan: ConversionPlan,
    task: ShardTask,
    xp: Namespace = np,
    on_epoch: OnEpoch | None = None,
    stages: Stages | None = None,
) -> Iterator[Block]:
    """A box shard's epochs, read one at a time and moved into `xp` (the device under CuPy).

    `on_epoch(voxel start, voxels)` sees each epoch as it is read (a pyramid's base level
    reduces it there for the level above, so the source is read once for every level).
    """
    stage = timer(stages)
    for cstart, cstop in plan.epochs(task):
        vstart = _voxel(cstart, plan.chunk_size)
        vstop = _clip(_voxel(cstop, plan.chunk_size), plan.size)
        with stage("read"):
            voxels = plan.source.read(vstart, vstop)
        with stage("h2d"):
            block = upload(xp, voxels)
        del voxels
        if on_epoch is not None:
            on_epoch(vstart, block)
        yield cstart, cstop, block


def block_cells(block: Block, chunk: Triple) -> Iterator[Cell]:
    """The chunks of a block, x fastest, each a read-only view contiguous in its precomputed
    raw order ([x, y, z, c] Fortran order; edge chunks truncated).

    The block is scattered into chunk-major layout in one copy per region of equal chunk shape
    (`scatter.precomputed_regions`, the batched engine's scatter): cutting strided views chunk
    by chunk and gathering each on its own was three times slower, the voxels being read 64
    bytes at a time across a thousand pages per chunk. Chunks keep the order of the grid.
    """
    (x0, y0, z0), _, voxels = block
    scattered = []
    for chunks, coords in precomputed_regions(np, voxels, chunk):
        chunks.flags.writeable = False  # chunk views may be kept as they are (ChunkSpool)
        for index, (gx, gy, gz) in enumerate(coords.tolist()):
            scattered.append(((gz, gy, gx), (gx + x0, gy + y0, gz + z0), chunks[index]))
    scattered.sort(key=lambda item: item[0])
    for _, coord, czyx in scattered:
        yield coord, czyx.transpose(3, 2, 1, 0)


def cut_cells(block: Block, chunk: Triple) -> Iterator[Cell]:
    """The chunks of a block, x fastest, each copied out on its own right before its encoder
    reads it (rows moved whole, `copy_runs`) into one buffer reused from chunk to chunk, in
    its precomputed raw order ([x, y, z, c] Fortran order; edge chunks truncated): for
    encoders that take a chunk at a time (compressed_segmentation, jpeg, png). Each chunk is
    valid until the next is asked for. An encoder reading the chunk through the block's
    strides instead took a quarter longer (compressed_segmentation, uint64): it read each
    voxel from memory 8 bytes at a time across pages, where the copy reads whole rows."""
    (x0, y0, z0), (x1, y1, z1), voxels = block
    cx, cy, cz = chunk
    buffer = np.empty((voxels.shape[3], cz, cy, cx), voxels.dtype)  # [c, z, y, x]
    for gz, gy, gx in itertools.product(range(z1 - z0), range(y1 - y0), range(x1 - x0)):
        view = voxels[gx * cx : (gx + 1) * cx, gy * cy : (gy + 1) * cy, gz * cz : (gz + 1) * cz]
        nx, ny, nz, _ = view.shape
        out = buffer[:, :nz, :ny, :nx]
        copy_runs(out, view.transpose(3, 2, 1, 0))
        yield (gx + x0, gy + y0, gz + z0), out.transpose(3, 2, 1, 0)


def cells(blocks: Iterable[Block], chunk: Triple, *, scatter: bool = True) -> Iterator[Cell]:
    """Every chunk of the blocks, block after block: each contiguous in its precomputed raw
    order, scattered a block at a time (`block_cells`) or, without `scatter`, copied out one
    at a time into a buffer reused (`cut_cells`)."""
    cut = block_cells if scatter else cut_cells
    for block in blocks:
        yield from cut(block, chunk)


def scattered_cells(plan: ConversionPlan, coords: np.ndarray) -> Iterator[Cell]:
    """The chunks at grid coordinates `coords` (N, 3), each read on its own."""
    for coord in coords.tolist():
        start = _voxel(coord, plan.chunk_size)
        stop = _clip(_voxel((coord[0] + 1, coord[1] + 1, coord[2] + 1), plan.chunk_size), plan.size)
        yield (coord[0], coord[1], coord[2]), plan.source.read(start, stop)


def grid_offset(axes: str, chunk: Sequence[int], origin: Sequence[int]) -> tuple[int, ...]:
    """Chunk `chunk` (x, y, z) counted from chunk `origin`, in a zarr array's axis order (one
    chunk spans the channels): an inner chunk's position in its shard, or the shift of an
    epoch's chunk grid within it."""
    steps = [int(a) - int(b) for a, b in zip(chunk, origin, strict=True)]
    return to_axes(steps, 0, axes)


def _voxel(chunk_coord: Sequence[int], chunk: Triple) -> Triple:
    """The voxel corner of a chunk grid coordinate."""
    return (chunk_coord[0] * chunk[0], chunk_coord[1] * chunk[1], chunk_coord[2] * chunk[2])


def _clip(voxel: Triple, size: Triple) -> Triple:
    """A voxel corner no further than the volume's end."""
    return (min(voxel[0], size[0]), min(voxel[1], size[1]), min(voxel[2], size[2]))
