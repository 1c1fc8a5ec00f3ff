"""Joining a segment's skeleton pieces traced block by block: welded at the shared face into
one tree, what the cuts add (a branch towards a shared face, a second path beside the first)
left out as TEASAR's ball leaves it out, the segment's own branches kept, a loop the welding
closed opened (nothing lost), one edge across the box of a segment TEASAR left none in.
Decoded by osteoid (kimimaro's skeleton type), not by our own reader."""

from __future__ import annotations

import numpy as np
import pytest

from shardwright.generation.exchange import Piece
from shardwright.generation.grid import BlockGrid
from shardwright.generation.tracing import RADIUS_ATTRIBUTE, Tracing, joined_skeleton

NM = 100.0  # per voxel: branch lengths below are voxels x 100 nm
GRID = BlockGrid(
    shape=(64, 32, 32), block=(32, 32, 32), resolution=(NM, NM, NM), factor=(1, 1, 1),
    origin_nm=(0.0, 0.0, 0.0),
)  # fmt: skip
BOX = ((0, 0, 0), (64, 32, 32))  # the segment's voxels (used only when no edge is left)


def _piece(
    block: tuple[int, int, int], paths: list[list[tuple[int, int, int]]], radius: float = 1.0
) -> Piece:
    """A piece made of polylines (block-local voxel positions; equal positions are one), each
    vertex `radius` nm from the boundary."""
    points: list[tuple[int, int, int]] = []
    edges = []
    for path in paths:
        for a, b in zip(path, path[1:], strict=False):
            for p in (a, b):
                if p not in points:
                    points.append(p)
            edges.append((points.index(a), points.index(b)))
    vertices = np.asarray(points, np.float32) * np.float32(NM)
    radii = np.full(len(points), radius, np.float32)
    return Piece(7, 100, block, vertices, np.asarray(edges, np.uint32), radii)


def _traced_in_blocks(pieces: list[Piece], grid: BlockGrid, box: tuple) -> bytes:
    """The pieces joined as the block path joins them (none traced whole)."""
    return joined_skeleton(pieces, grid, box, Tracing())


def _decoded(blob: bytes):  # noqa: ANN202 (osteoid's Skeleton)
    import osteoid

    return osteoid.Skeleton.from_precomputed(blob, vertex_attributes=[RADIUS_ATTRIBUTE])


def test_pieces_weld_on_the_shared_face_into_one_tree() -> None:
    left = _piece((0, 0, 0), [[(x, 16, 16) for x in (0, 2, 4, 10, 12, 28, 32)]])
    right = _piece((1, 0, 0), [[(0, 16, 16), (20, 16, 16)]])
    skeleton = _decoded(_traced_in_blocks([left, right], GRID, BOX))
    assert np.isclose(skeleton.cable_length(), 52 * NM)
    assert len(skeleton.components()) == 1


def test_a_branch_within_the_ball_of_a_path_is_not_taken_one_beyond_it_is() -> None:
    """TEASAR's rule over the welded pieces: a path covers scale x radius + const around it
    (4 x 300 + 10 nm here); a branch whose end it covers (the cut's, towards a shared face)
    is not taken, one that reaches further is."""
    trunk = [(x, 16, 16) for x in (0, 2, 4, 10, 12, 28, 32)]
    left = _piece((0, 0, 0), [
        trunk,
        [(28, 16, 16), (32, 20, 16)],  # ends 566 nm from the trunk: covered
        [(12, 16, 16), (32, 28, 16)],  # ends 1,200 nm + from the trunk's nearest vertex
        [(10, 16, 16), (10, 30, 16)],  # 1,400 nm: beyond the ball
    ], radius=300.0)  # fmt: skip
    right = _piece((1, 0, 0), [[(0, 16, 16), (20, 16, 16)]], radius=300.0)
    skeleton = _decoded(_traced_in_blocks([left, right], GRID, BOX))
    positions = {tuple(v) for v in np.rint(skeleton.vertices / NM).astype(int).tolist()}
    assert (32, 20, 16) not in positions
    assert {(52, 16, 16), (32, 28, 16), (10, 30, 16)} <= positions  # (0, 16, 16): covered
    assert len(skeleton.components()) == 1


def test_a_loop_welded_across_four_blocks_becomes_a_tree_that_loses_no_piece() -> None:
    """A ring around the line four blocks share: each block's piece joins two of its faces,
    the welded pieces close a loop. Traced again it is the ring less one edge."""
    grid = BlockGrid((64, 64, 32), (32, 32, 32), (NM, NM, NM), (1, 1, 1), (0.0, 0.0, 0.0))
    quarters = {
        (0, 0, 0): [(26, 32, 16), (28, 28, 16), (32, 26, 16)],
        (1, 0, 0): [(32, 26, 16), (36, 28, 16), (38, 32, 16)],
        (1, 1, 0): [(38, 32, 16), (36, 36, 16), (32, 38, 16)],
        (0, 1, 0): [(32, 38, 16), (28, 36, 16), (26, 32, 16)],
    }
    pieces = [_piece(block, [[(x - 32 * block[0], y - 32 * block[1], z) for x, y, z in path]])
              for block, path in quarters.items()]  # fmt: skip
    skeleton = _decoded(_traced_in_blocks(pieces, grid, ((26, 26, 16), (39, 39, 17))))
    assert len(skeleton.vertices) == 8 and len(skeleton.edges) == 7
    assert len(skeleton.components()) == 1
    assert np.isclose(skeleton.cable_length(), 7 * np.hypot(2, 4) * NM)


def test_a_second_path_both_blocks_traced_beside_the_first_is_not_taken() -> None:
    """Where the segment lies along the face two blocks share, each may trace it a voxel
    apart: the second path lies within the first's ball and is left out."""
    left = _piece((0, 0, 0), [[(20, 16, 16), (32, 16, 16)], [(31, 10, 16), (31, 22, 16)]],
                  radius=200.0)  # fmt: skip
    right = _piece((1, 0, 0), [[(0, 16, 16), (12, 16, 16)], [(0, 10, 16), (0, 22, 16)]],
                   radius=200.0)  # fmt: skip
    skeleton = _decoded(_traced_in_blocks([left, right], GRID, BOX))
    assert len(skeleton.components()) == 1
    positions = {tuple(v) for v in np.rint(skeleton.vertices / NM).astype(int).tolist()}
    assert (31, 10, 16) not in positions and (31, 22, 16) not in positions
    assert {(20, 16, 16), (44, 16, 16)} <= positions


@pytest.mark.parametrize(
    ("box", "ends"),
    [
        (((3, 4, 5), (4, 5, 6)), [(2.5, 4, 5), (3.5, 4, 5)]),  # one voxel: across it
        (((3, 4, 5), (6, 5, 6)), [(3, 4, 5), (5, 4, 5)]),  # first to last voxel centre
    ],
)
def test_a_segment_traced_to_no_edge_gets_one_across_its_box(box: tuple, ends: list) -> None:
    no_edge = Piece(7, 1, (0, 0, 0), np.zeros((1, 3), np.float32), np.zeros((0, 2), np.uint32),
                    np.ones(1, np.float32))  # fmt: skip
    skeleton = _decoded(_traced_in_blocks([no_edge], GRID, box))
    assert skeleton.edges.tolist() == [[0, 1]]
    np.testing.assert_allclose(skeleton.vertices, np.asarray(ends) * NM)
    assert (skeleton.radius > 0).all()
