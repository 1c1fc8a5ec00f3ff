"""The block grid meshes and skeletons are made on: blocks whose cores tile the level once,
reads one voxel longer where a neighbour follows, base boxes, dataset edges and origins."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from shardwright.generation.grid import BlockGrid

Triple = tuple[int, int, int]


def _grid(shape: Triple, block: Triple, factor: Triple = (1, 1, 1)) -> BlockGrid:
    return BlockGrid(shape, block, (4.0, 5.0, 40.0), factor, (2.0, 2.5, 20.0))


@given(shape=st.tuples(*[st.integers(1, 30)] * 3), block=st.tuples(*[st.integers(1, 12)] * 3))
def test_block_cores_tile_the_level_once_and_reads_reach_one_voxel_into_the_next(
    shape: Triple, block: Triple
) -> None:
    grid = _grid(shape, block)
    positions = list(grid.positions())
    assert len(positions) == grid.block_count == len(set(positions))
    assert positions == sorted(positions, key=lambda p: p[::-1])  # x fastest
    covered = np.zeros(shape, np.int32)
    for position in positions:
        start, stop = grid.core(position)
        covered[tuple(slice(a, b) for a, b in zip(start, stop, strict=True))] += 1
        read_start, read_stop = grid.read_box(position)
        low, high = grid.dataset_edges(position)
        assert read_start == start
        for d in range(3):
            assert read_stop[d] == (stop[d] if high[d] else stop[d] + 1)
            assert high[d] == (stop[d] == shape[d]) and low[d] == (position[d] == 0)
    assert (covered == 1).all()


def test_a_grid_by_hand() -> None:
    grid = _grid((10, 7, 3), (4, 4, 4), factor=(2, 2, 1))
    assert grid.counts == (3, 2, 1) and grid.block_count == 6
    assert grid.block_nm == (16.0, 20.0, 160.0)
    assert grid.core((2, 1, 0)) == ((8, 4, 0), (10, 7, 3))
    assert grid.read_box((1, 0, 0)) == ((4, 0, 0), (9, 5, 3))
    assert grid.base_box((8, 4, 0), (10, 7, 3), (19, 14, 3)) == ((16, 8, 0), (19, 14, 3))
    assert grid.dataset_edges((1, 0, 0)) == ((False, True, True), (False, False, True))
    assert grid.block_origin_nm((2, 1, 0)) == (2.0 + 2 * 4 * 4, 2.5 + 4 * 5, 20.0)
    assert grid.key((2, 1, 0)) == "2_1_0"


@given(
    shape=st.tuples(*[st.integers(1, 40)] * 3),
    block=st.tuples(*[st.integers(2, 12)] * 3),
    chunk=st.tuples(*[st.integers(1, 9)] * 3),
)
def test_chunk_reads_count_each_chunk_every_block_read_box_touches(
    shape: Triple, block: Triple, chunk: Triple
) -> None:
    """What the plan says the block tasks fetch: for each block's read box, the chunks it
    touches, counted by brute force."""
    grid = _grid(shape, block)
    expected = 0
    for position in grid.positions():
        start, stop = grid.read_box(position)
        expected += int(
            np.prod([-(-b // c) - a // c for a, b, c in zip(start, stop, chunk, strict=True)])
        )
    assert grid.chunk_reads(chunk) == expected


def test_chunk_reads_of_the_benchmarks_segmentation() -> None:
    """512 x 512 x 256 voxels, blocks of 128^3, chunks of 64^3: 605 chunk fetches for 256
    chunks, as benchmarks/bench_in_place.py counted the block tasks' opens."""
    assert _grid((512, 512, 256), (128, 128, 128)).chunk_reads((64, 64, 64)) == 605
