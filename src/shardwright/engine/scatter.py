"""Scatter an epoch into chunk-major layout with lifted strides, over numpy or CuPy.

An epoch block [x, y, z, c] is viewed with each axis lifted into (chunk index, position in
chunk) and transposed so that every chunk's voxels are contiguous in its format's order:
precomputed chunks x-fastest ([x, y, z, c] Fortran order, edge chunks truncated), zarr3 chunks
C order of the output axes padded with the fill value. One copy per region of equal chunk shape
(the interior and the truncated edges), no loop over chunks. For precomputed `raw` (and zarr3
without a compressor) the scattered bytes are the encoded chunks.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from shardwright.common.arrays import Array, contiguous, to_host
from shardwright.formats.zarr3.chunks import InnerChunkChain, pad


def _regions(extent: int, chunk: int) -> list[tuple[int, int, int]]:
    """(start, stop, chunk length) runs along one axis: full chunks, then the truncated one."""
    full = extent // chunk * chunk
    runs = [(0, full, chunk)] if full else []
    if full < extent:
        runs.append((full, extent, extent - full))
    return runs


def precomputed_regions(
    xp: Any, block_xyzc: Array, chunk_size: tuple[int, int, int]
) -> Iterator[tuple[Array, np.ndarray]]:
    """Per region of equal chunk shape: (chunks [N, c, z, y, x] C-contiguous, local chunk
    coordinates (N, 3) x, y, z). Each chunk's bytes are its precomputed raw encoding; the same
    array seen as [N, x, y, z, c] (`.transpose(0, 4, 3, 2, 1)`) feeds batched encoders."""
    block = xp.asarray(block_xyzc)
    channels = block.shape[3]
    runs = [_regions(n, c) for n, c in zip(block.shape[:3], chunk_size, strict=True)]
    for (x0, x1, cx), (y0, y1, cy), (z0, z1, cz) in itertools.product(*runs):
        nx, ny, nz = (x1 - x0) // cx, (y1 - y0) // cy, (z1 - z0) // cz
        region = block[x0:x1, y0:y1, z0:z1, :]
        lifted = region.reshape(nx, cx, ny, cy, nz, cz, channels)
        # chunk index (z, y, x) outermost; inside a chunk C order of (c, z, y, x) == x-fastest
        chunk_major = contiguous(xp, lifted.transpose(4, 2, 0, 6, 5, 3, 1))
        gz, gy, gx = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
        coords = np.stack(
            [
                gx.ravel() + x0 // chunk_size[0],
                gy.ravel() + y0 // chunk_size[1],
                gz.ravel() + z0 // chunk_size[2],
            ],
            axis=1,
        )
        yield chunk_major.reshape(nx * ny * nz, channels, cz, cy, cx), coords


def scatter_precomputed(
    xp: Any, block_xyzc: Array, chunk_size: tuple[int, int, int]
) -> tuple[Array, np.ndarray, np.ndarray, np.ndarray]:
    """Chunk-major bytes of an epoch whose origin is a chunk corner.

    Returns (buffer uint8, offsets, sizes, local chunk coordinates (N, 3) x, y, z), chunks in
    the order the regions produce them.
    """
    pieces: list[Array] = []
    coords: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    for chunks, region_coords in precomputed_regions(xp, block_xyzc, chunk_size):
        pieces.append(chunks.reshape(-1).view(xp.uint8))
        coords.append(region_coords)
        per_chunk = int(np.prod(chunks.shape[1:])) * chunks.dtype.itemsize
        sizes.append(np.full(len(region_coords), per_chunk, dtype=np.int64))
    size_array = np.concatenate(sizes)
    offsets = np.cumsum(size_array) - size_array
    return xp.concatenate(pieces), offsets, size_array, np.concatenate(coords)


def scatter_zarr3(
    xp: Any, block: Array, chunk_shape: tuple[int, ...], fill_value: Any = 0
) -> tuple[Array, np.ndarray]:
    """Chunk-major bytes of an epoch already in the output's axis order, edge chunks padded.

    Returns (buffer uint8, C-order chunk grid coordinates (N, rank)); every chunk has
    prod(chunk_shape) * itemsize bytes, chunks in C order of the epoch's chunk grid.
    """
    block = xp.asarray(block)
    grid = [-(-n // c) for n, c in zip(block.shape, chunk_shape, strict=True)]
    block = pad(xp, block, [g * c for g, c in zip(grid, chunk_shape, strict=True)], fill_value)
    rank = block.ndim
    lifted = block.reshape([v for g, c in zip(grid, chunk_shape, strict=True) for v in (g, c)])
    outer = list(range(0, 2 * rank, 2))
    inner = list(range(1, 2 * rank, 2))
    chunk_major = contiguous(xp, lifted.transpose(outer + inner))
    coords = np.stack(np.unravel_index(np.arange(int(np.prod(grid))), grid), axis=1)
    return chunk_major.reshape(-1).view(xp.uint8), coords


def zarr3_epoch_chunks(
    xp: Any, chain: InnerChunkChain, ordered: Array, epoch_offset: tuple[int, ...]
) -> tuple[Array, np.ndarray, np.ndarray]:
    """An epoch in the output's axis order as zarr3 inner chunks, for both engines.

    Returns (chunks [N, chunk bytes] in `xp`, the indices of those stored (not all fill value),
    each chunk's position in the shard grid (N, rank)); `epoch_offset` is the epoch's chunk
    offset within its shard (`blocks.grid_offset`).
    """
    ordered = ordered.astype(chain.dtype, copy=False)
    buffer, local = scatter_zarr3(xp, ordered, chain.shape, chain.fill_value)
    chunks = buffer.reshape(len(local), chain.nbytes)
    stored = np.flatnonzero(to_host(chain.present(xp, chunks.view(chain.dtype))))
    return chunks, stored, local + np.asarray(epoch_offset)
