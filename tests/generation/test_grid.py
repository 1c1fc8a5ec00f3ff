"""The block grid meshes and skeletons are made on: blocks whose cores tile the level once,
reads one voxel longer where a neighbour follows, base boxes, dataset edges and origins;
groups of blocks (one task each) that tile the blocks once, the chunks they fetch, and how a
group's size is chosen."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from shardwright.generation import faces
from shardwright.generation.grid import BlockGrid, choose_group

Triple = tuple[int, int, int]


def _grid(
    shape: Triple, block: Triple, factor: Triple = (1, 1, 1), group: Triple = (1, 1, 1)
) -> BlockGrid:
    return BlockGrid(shape, block, (4.0, 5.0, 40.0), factor, (2.0, 2.5, 20.0), group)


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


def _chunks_touched(start: Triple, stop: Triple, chunk: Triple) -> set[Triple]:
    x, y, z = (range(a // c, -(-b // c)) for a, b, c in zip(start, stop, chunk, strict=True))
    return {(i, j, k) for i in x for j in y for k in z}


@given(
    shape=st.tuples(*[st.integers(1, 40)] * 3),
    block=st.tuples(*[st.integers(2, 12)] * 3),
    chunk=st.tuples(*[st.integers(1, 9)] * 3),
    group=st.tuples(*[st.integers(1, 3)] * 3),
)
def test_chunk_reads_count_each_chunk_a_groups_read_boxes_touch_once_per_group(
    shape: Triple, block: Triple, chunk: Triple, group: Triple
) -> None:
    """What the plan says the group tasks fetch: for each group, the chunks its blocks' read
    boxes touch (each once: the group keeps what its next blocks read again), counted by brute
    force, without the layer where it meets the next groups where they hand it over; the
    groups' blocks tile the grid's once, x fastest."""
    grid = _grid(shape, block, group=group)
    alone = handed = 0
    seen: list[Triple] = []
    for g in grid.groups():
        blocks = grid.group_blocks(g)
        seen += blocks
        assert blocks == sorted(blocks, key=lambda p: p[::-1])
        touched: set[Triple] = set()
        own: set[Triple] = set()
        for position in blocks:
            touched |= _chunks_touched(*grid.read_box(position), chunk)
            own |= _chunks_touched(*faces.own_box(grid, position, shape), chunk)
            core = grid.core(position)
            assert all(a <= b for a, b in zip(grid.group_core(g)[0], core[0], strict=True))
            assert all(a >= b for a, b in zip(grid.group_core(g)[1], core[1], strict=True))
        alone += len(touched)
        handed += len(own)
    assert sorted(seen) == sorted(grid.positions()) and len(seen) == grid.block_count
    assert list(grid.groups(last_first=True)) == list(grid.groups())[::-1]
    assert len(list(grid.groups())) == grid.group_count
    assert grid.chunk_reads(chunk, handed=False) == alone
    assert grid.chunk_reads(chunk) == handed


@given(
    shape=st.tuples(*[st.integers(1, 40)] * 3),
    block=st.tuples(*[st.integers(2, 12)] * 3),
    group=st.tuples(*[st.integers(1, 3)] * 3),
    box=st.tuples(*[st.integers(0, 40)] * 6),
)
def test_the_groups_over_a_box_are_those_owning_its_voxels(
    shape: Triple, block: Triple, group: Triple, box: tuple[int, ...]
) -> None:
    grid = _grid(shape, block, group=group)
    start = tuple(min(a, b, s - 1) for a, b, s in zip(box[:3], box[3:], shape, strict=True))
    stop = tuple(min(max(a, b), s) for a, b, s in zip(box[:3], box[3:], shape, strict=True))
    expected = [
        g for g in grid.groups()
        if all(lo < b and hi > a for lo, hi, a, b in
               zip(*grid.group_core(g), start, stop, strict=True))
    ]  # fmt: skip
    if all(a < b for a, b in zip(start, stop, strict=True)):
        assert grid.groups_over(start, stop) == expected  # type: ignore[arg-type]


def test_chunk_reads_of_the_benchmarks_segmentation() -> None:
    """512 x 512 x 256 voxels, blocks of 128^3, chunks of 64^3: 605 chunk fetches for 256
    chunks one block per task, as benchmarks/bench_in_place.py counted the opens; 324 in
    groups of 2 x 2 x 2 blocks, the group a 2-core machine's plan takes (4 groups at least)."""
    alone = _grid((512, 512, 256), (128, 128, 128))
    assert alone.chunk_reads((64, 64, 64), handed=False) == 605
    assert choose_group((4, 4, 2), 4, lambda group: True) == (2, 2, 2)
    grouped = _grid((512, 512, 256), (128, 128, 128), group=(2, 2, 2))
    assert grouped.group_count == 4 and grouped.chunk_reads((64, 64, 64), handed=False) == 324
    assert grouped.chunk_reads((64, 64, 64)) == 256  # the groups hand each other their faces


def test_a_group_grows_where_it_removes_most_faces_within_parallelism_and_memory() -> None:
    # a long thin volume: groups grow along its length first
    assert choose_group((16, 2, 2), 2, lambda group: True) == (8, 2, 2)
    assert choose_group((16, 2, 2), 4, lambda group: True) == (4, 2, 2)
    # as many groups as blocks asked: one block each
    assert choose_group((4, 4, 2), 32, lambda group: True) == (1, 1, 1)
    # memory allows at most 4 blocks in a group
    assert choose_group((8, 8, 8), 1, lambda group: np.prod(group) <= 4) == (2, 2, 1)
    # one block along every axis: nothing to group
    assert choose_group((1, 1, 1), 1, lambda group: True) == (1, 1, 1)
