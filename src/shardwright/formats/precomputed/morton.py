"""Compressed Morton codes: the chunk ids of sharded precomputed volumes.

Bits are interleaved x, y, z from the lowest bit up, skipping a dimension once its grid extent
needs no more bits. A dimension of extent ``n`` contributes ``(n - 1).bit_length()`` bits, as
Neuroglancer and TensorStore compute it (the prose "2**i <= grid_size" in the spec would keep one
bit too many for power-of-two extents; the readers are the reference).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from shardwright.errors import ShardingSpecError


def grid_bits(grid_shape: Sequence[int]) -> tuple[int, ...]:
    """Bits each dimension contributes to the compressed Morton code."""
    bits = tuple(max(int(n) - 1, 0).bit_length() for n in grid_shape)
    if sum(bits) > 64:
        raise ShardingSpecError(
            f"grid shape {tuple(grid_shape)} needs {sum(bits)} Morton bits; at most 64"
        )
    return bits


def _bit_schedule(grid_shape: Sequence[int]) -> list[tuple[int, int, int]]:
    """(dimension, source bit, output bit) triples in output-bit order."""
    bits = grid_bits(grid_shape)
    schedule = []
    out_bit = 0
    for bit in range(max(bits, default=0)):
        for dim, dim_bits in enumerate(bits):
            if bit < dim_bits:
                schedule.append((dim, bit, out_bit))
                out_bit += 1
    return schedule


def morton_bit_dims(grid_shape: Sequence[int]) -> list[int]:
    """The dimension each output bit of the code comes from, lowest bit first.

    Its first ``p`` entries say which box of chunks shares the code's high bits: with the
    identity hash, that box is what one shard (``p = preshift + minishard bits``) holds.
    """
    return [dim for dim, _, _ in _bit_schedule(grid_shape)]


def compressed_morton_code(
    grid_coords: npt.ArrayLike, grid_shape: Sequence[int]
) -> npt.NDArray[np.uint64]:
    """Compressed Morton code of each row of an (N, 3) array of grid coordinates (x, y, z)."""
    coords = np.asarray(grid_coords)
    if coords.ndim != 2 or coords.shape[1] != len(grid_shape):
        raise ShardingSpecError(
            f"grid_coords must have shape (N, {len(grid_shape)}), got {coords.shape}"
        )
    coords = coords.astype(np.uint64, copy=False)
    shape = np.asarray(grid_shape, dtype=np.int64)
    if coords.size and (coords.astype(np.int64) >= shape).any():
        raise ShardingSpecError(f"grid coordinates out of range for grid shape {tuple(grid_shape)}")
    codes = np.zeros(coords.shape[0], dtype=np.uint64)
    one = np.uint64(1)
    for dim, bit, out_bit in _bit_schedule(grid_shape):
        codes |= ((coords[:, dim] >> np.uint64(bit)) & one) << np.uint64(out_bit)
    return codes


def decode_compressed_morton_code(
    codes: npt.ArrayLike, grid_shape: Sequence[int]
) -> npt.NDArray[np.uint64]:
    """Inverse of `compressed_morton_code`: (N, 3) grid coordinates of each code."""
    values = np.asarray(codes, dtype=np.uint64).reshape(-1)
    coords = np.zeros((values.shape[0], len(grid_shape)), dtype=np.uint64)
    one = np.uint64(1)
    for dim, bit, out_bit in _bit_schedule(grid_shape):
        coords[:, dim] |= ((values >> np.uint64(out_bit)) & one) << np.uint64(bit)
    return coords
