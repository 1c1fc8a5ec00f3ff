"""Skeleton tracing's pure steps, by hand: the one edge across a segment TEASAR left none in,
which segments reach a face a block shares, their voxels handed over, a segment put
together from them traced as one pass over the whole volume traces it, and a piece a block
left untraced traced from them as the block would have."""

from __future__ import annotations

import numpy as np
import pytest

from shardwright.generation import census, invalidation
from shardwright.generation.exchange import Piece
from shardwright.generation.grid import BlockGrid
from shardwright.generation.tracing import (
    Tracing,
    _across,
    _traced_as_its_block,
    block_masks,
    block_skeletons,
    left_to_the_shard,
    reaching_segments,
    trace_cutout,
)

kimimaro = pytest.importorskip("kimimaro")


def test_a_segment_with_no_edge_gets_one_across_its_box() -> None:
    grid = BlockGrid((64, 64, 64), (32, 32, 32), (4.0, 4.0, 40.0), (1, 1, 1), (2.0, 2.0, 20.0))
    points, edges, radius = _across(((3, 4, 5), (4, 5, 6)), grid)  # one voxel: along z
    assert points.tolist() == [[14.0, 18.0, 200.0], [14.0, 18.0, 240.0]]
    assert edges.tolist() == [[0, 1]] and radius.tolist() == [2.0, 2.0]
    points, _, _ = _across(((0, 0, 0), (10, 1, 1)), grid)  # first to last voxel centre
    assert points.tolist() == [[2.0, 2.0, 20.0], [38.0, 2.0, 20.0]]


def test_teasar_runs_with_igneous_defaults() -> None:
    params = Tracing().params()
    assert (params["scale"], params["const"], params["pdrf_exponent"]) == (4, 10, 4)
    assert params["soma_detection_threshold"] < params["soma_acceptance_threshold"]


def test_segments_on_a_shared_face_are_handed_over_those_within_are_not() -> None:
    """Block (1, 0, 0) of two along x reads 8 voxels: its low face is shared, its high one the
    dataset's edge; a segment on the shared face reaches past it, one at the edge or inside
    does not. Its voxels in the core come back exactly, placed by their first voxel."""
    grid = BlockGrid((16, 8, 8), (8, 8, 8), (1.0, 1.0, 1.0), (1, 1, 1), (0.0, 0.0, 0.0))
    labels = np.zeros((8, 8, 8), np.uint64)  # block (1, 0, 0)'s read box: voxels 8 .. 15
    labels[0, 2:4, 2:4] = 5  # on the shared face
    labels[7, 5, 5] = 6  # on the dataset's edge
    labels[3:5, 3:5, 3:5] = 7  # inside
    labels[2, 6, 6] = 5  # a second part of 5, in the same core
    assert reaching_segments(labels, grid, (1, 0, 0)) == {5}
    boxes = {s: box for s, (_, box) in census.block_census(labels, (8, 0, 0)).items()}
    masks = block_masks(labels, (8, 0, 0), {5: boxes[5], 7: boxes[7]})
    assert (masks[5].low, masks[5].high) == ((8, 2, 2), (11, 7, 7))
    assert masks[5].voxels().sum() == 5 and masks[5].voxels()[2, 4, 4]
    assert (masks[7].low, masks[7].high) == ((11, 3, 3), (13, 5, 5))
    assert masks[7].voxels().all()


@pytest.mark.parametrize("where", ["at the edge", "inside"])
def test_a_segment_put_together_is_traced_as_the_whole_volume_traces_it(where: str) -> None:
    """A bent tube touching the dataset's edge, or a cell body inside it (traced without
    looking for border targets: none can lie on a face of background): TEASAR of its cutout
    (background put around it where the dataset goes on) equals kimimaro on the whole volume,
    vertex for vertex."""
    grid = BlockGrid((48, 40, 12), (16, 16, 4), (8.0, 8.0, 40.0), (1, 1, 1), (0.0, 0.0, 0.0))
    labels = np.zeros(grid.shape, np.uint64)
    if where == "at the edge":
        labels[0:30, 10:14, 4:8] = 9  # from the dataset's low x edge
        labels[26:30, 10:36, 4:8] = 9
    else:
        x, y, z = np.indices(grid.shape)
        labels[((x - 15) / 12) ** 2 + ((y - 20) / 14) ** 2 + ((z - 6) / 4.5) ** 2 <= 1] = 9
    labels[40:44, 30:34, 2:6] = 3  # another segment, not traced
    invalidation.install()  # kimimaro as the job runs it: ties between vertices alike
    whole = kimimaro.skeletonize(
        labels, teasar_params=Tracing().params(), anisotropy=grid.resolution, dust_threshold=0,
        fix_branching=True, fix_borders=True, progress=False, parallel=1,
    )[9]  # fmt: skip
    low, high = (np.argwhere(labels == 9).min(axis=0), np.argwhere(labels == 9).max(axis=0) + 1)
    assert (low[0] == 0) == (where == "at the edge") and (high < grid.shape).all()
    cutout = labels[tuple(slice(a, b) for a, b in zip(low, high, strict=True))] == 9
    at, edges, _ = trace_cutout(cutout, tuple(low.tolist()), ((0, 0, 0), grid.shape),
                                grid.resolution, Tracing())  # fmt: skip
    got = {tuple(v) for v in (at * np.asarray(grid.resolution)).tolist()}
    assert got == {tuple(v) for v in np.asarray(whole.vertices, np.float64).tolist()}
    assert len(edges) == len(whole.edges)


def test_a_piece_left_to_the_shard_is_traced_as_its_block_would_have() -> None:
    """Every block hands over the segments reaching past its faces as the job does; each such
    piece traced from the pieces' masks (its own core and its neighbours' first layers)
    equals kimimaro's trace of it in the block's read box among the other segments, bit for
    bit."""
    grid = BlockGrid((48, 40, 12), (16, 16, 4), (8.0, 8.0, 40.0), (1, 1, 1), (0.0, 0.0, 0.0))
    labels = np.zeros(grid.shape, np.uint64)
    labels[0:30, 10:14, 4:8] = 9  # a bent tube across three blocks and a z face
    labels[26:30, 10:36, 4:8] = 9
    labels[10:24, 12:30, 0:12] = 4  # a blob across x, y and z faces, touching the tube
    labels[40:44, 20:24, 1:3] = 3  # within one block's core
    traced, pieces = {}, []
    for position in grid.positions():
        (start, stop), (core_start, core_stop) = grid.read_box(position), grid.core(position)
        block = labels[tuple(slice(a, b) for a, b in zip(start, stop, strict=True))]
        core = labels[tuple(slice(a, b) for a, b in zip(core_start, core_stop, strict=True))]
        counted = census.block_census(core, core_start)
        reaching = reaching_segments(block, grid, position) & set(counted)
        masks = block_masks(core, core_start, {s: counted[s][1] for s in reaching})
        for segment, (vertices, edges, radii) in block_skeletons(
            block, grid, counted, Tracing()
        ).items():
            traced[(segment, position)] = (vertices, edges, radii)
        for segment in reaching:
            voxels, box = counted[segment]
            empty = np.zeros((0, 3), np.float32), np.zeros((0, 2), np.uint32)
            pieces.append(Piece(segment, voxels, position, *empty, np.zeros(0, np.float32),
                                box, masks[segment], traced=False))  # fmt: skip
    assert {p.segment for p in pieces} == {4, 9} and len(pieces) >= 8
    for piece in pieces:
        same = [p for p in pieces if p.segment == piece.segment]
        got = _traced_as_its_block(piece, same, grid, Tracing())
        vertices, edges, radii = traced[(piece.segment, piece.block)]
        assert got.traced and len(got.links) == len(edges) > 0
        assert np.array_equal(got.vertices, vertices) and np.array_equal(got.links, edges)
        assert np.array_equal(got.radii, radii)  # bit for bit


def test_a_block_leaves_to_the_shard_only_a_large_blob_like_part_it_would_trace_whole() -> None:
    """A part of 10,000 voxels or more that fills a third of its box, no side over three
    times another in nm, is left; a smaller, sparser or longer one, or one whose box the
    memory budget does not trace whole, is traced in its block."""
    cube = ((0, 0, 0), (30, 30, 30))
    counted = {1: (20_000, cube), 2: (8_000, cube), 3: (9_999, ((0, 0, 0), (20, 20, 25))),
               4: (12_000, ((0, 0, 0), (90, 30, 10)))}  # fmt: skip
    fits, small = Tracing(whole_pass_voxels=27_000), Tracing(whole_pass_voxels=26_999)
    assert left_to_the_shard(counted, {1, 2, 3, 4}, (1.0, 1.0, 1.0), fits) == {1}
    assert left_to_the_shard(counted, {1}, (1.0, 1.0, 1.0), small) == set()
    assert left_to_the_shard(counted, {1}, (8.0, 8.0, 40.0), fits) == set()  # 5x longer in z
    assert left_to_the_shard(counted, {4}, (1.0, 3.0, 10.0), fits) == {4}  # 90 x 90 x 100 nm
