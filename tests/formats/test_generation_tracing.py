"""Joining a segment's skeleton pieces across blocks: welded at the shared face, the cut's
artefacts (short branches ending on a face two blocks share) removed, the segment's own
branches kept, a loop the welding closed opened at a face (not deleted), one edge across
the box of a segment TEASAR left none in. Decoded by osteoid (kimimaro's skeleton type),
not by our own reader."""

from __future__ import annotations

import numpy as np
import pytest

from shardwright.generation.exchange import Piece
from shardwright.generation.grid import BlockGrid
from shardwright.generation.tracing import RADIUS_ATTRIBUTE, joined_skeleton

NM = 100.0  # per voxel: branch lengths below are voxels x 100 nm
GRID = BlockGrid(
    shape=(64, 32, 32), block=(32, 32, 32), resolution=(NM, NM, NM), factor=(1, 1, 1),
    origin_nm=(0.0, 0.0, 0.0),
)  # fmt: skip
BOX = ((0, 0, 0), (64, 32, 32))  # the segment's voxels (used only when no edge is left)


def _piece(block: tuple[int, int, int], paths: list[list[tuple[int, int, int]]]) -> Piece:
    """A piece made of polylines (block-local voxel positions; equal positions are one)."""
    points: list[tuple[int, int, int]] = []
    edges = []
    for path in paths:
        for a, b in zip(path, path[1:], strict=False):
            for p in (a, b):
                if p not in points:
                    points.append(p)
            edges.append((points.index(a), points.index(b)))
    vertices = np.asarray(points, np.float32) * np.float32(NM)
    return Piece(7, 100, block, vertices, np.asarray(edges, np.uint32), np.ones(len(points)))


def _decoded(blob: bytes):  # noqa: ANN202 (osteoid's Skeleton)
    import osteoid

    return osteoid.Skeleton.from_precomputed(blob, vertex_attributes=[RADIUS_ATTRIBUTE])


def test_pieces_weld_on_the_shared_face_and_lose_only_the_cuts_short_branches() -> None:
    trunk = [(x, 16, 16) for x in (0, 2, 4, 10, 12, 28, 32)]
    left = _piece((0, 0, 0), [
        trunk,
        [(28, 16, 16), (32, 20, 16)],  # 566 nm to the shared face: the cut's artefact
        [(10, 16, 16), (10, 26, 16)],  # 1,000 nm, ending inside the block: kept
        [(12, 16, 16), (32, 28, 16)],  # 2,332 nm to the shared face: the segment's own
        [(4, 16, 16), (4, 12, 16), (4, 12, 10)],  # 1,000 nm, ends inside
    ])  # fmt: skip
    right = _piece((1, 0, 0), [[(0, 16, 16), (20, 16, 16)]])
    skeleton = _decoded(joined_skeleton([left, right], GRID, BOX))

    branches = 10 * NM + np.hypot(20, 12) * NM + 10 * NM
    assert np.isclose(skeleton.cable_length(), 52 * NM + branches)
    assert len(skeleton.components()) == 1
    positions = {tuple(v) for v in np.rint(skeleton.vertices / NM).astype(int).tolist()}
    assert (32, 20, 16) not in positions  # the artefact's end
    assert {(32, 16, 16), (52, 16, 16), (32, 28, 16), (10, 26, 16)} <= positions


def test_a_path_that_ends_on_a_shared_face_keeps_all_of_it() -> None:
    only = _piece((0, 0, 0), [[(20, 16, 16), (32, 16, 16)]])
    skeleton = _decoded(joined_skeleton([only], GRID, BOX))
    assert np.isclose(skeleton.cable_length(), 12 * NM)


def test_a_short_branch_ending_on_the_datasets_edge_is_kept() -> None:
    along = [(10, 16, 4), (20, 16, 4), (30, 16, 4)]
    piece = _piece((0, 0, 0), [along, [(20, 16, 4), (20, 16, 0)], [(20, 16, 4), (20, 12, 4)]])
    skeleton = _decoded(joined_skeleton([piece], GRID, BOX))
    assert np.isclose(skeleton.cable_length(), (20 + 4 + 4) * NM)


def test_a_loop_welded_across_four_blocks_is_opened_at_a_face_not_deleted() -> None:
    """A ring around the line four blocks share: each block's piece joins two of its faces,
    the welded pieces close a loop without branches, which kimimaro's loop removal deletes
    whole. Opened by one edge at a face, it is the ring less that edge."""
    grid = BlockGrid((64, 64, 32), (32, 32, 32), (NM, NM, NM), (1, 1, 1), (0.0, 0.0, 0.0))
    quarters = {
        (0, 0, 0): [(26, 32, 16), (28, 28, 16), (32, 26, 16)],
        (1, 0, 0): [(32, 26, 16), (36, 28, 16), (38, 32, 16)],
        (1, 1, 0): [(38, 32, 16), (36, 36, 16), (32, 38, 16)],
        (0, 1, 0): [(32, 38, 16), (28, 36, 16), (26, 32, 16)],
    }
    pieces = [_piece(block, [[(x - 32 * block[0], y - 32 * block[1], z) for x, y, z in path]])
              for block, path in quarters.items()]  # fmt: skip
    skeleton = _decoded(joined_skeleton(pieces, grid, ((26, 26, 16), (39, 39, 17))))
    assert len(skeleton.edges) == 7 and len(skeleton.components()) == 1
    assert np.isclose(skeleton.cable_length(), 7 * np.hypot(2, 4) * NM)


def test_a_branch_both_blocks_traced_in_their_shared_face_is_kept() -> None:
    """Where the segment lies in the face two blocks share, both trace it: a short branch
    there ending at a vertex both hold is the segment's own, not the cut's."""
    in_face = [(32, 16, 16), (32, 22, 16)]  # 600 nm, shorter than FACE_BRANCH_LIMIT
    left = _piece((0, 0, 0), [[(20, 16, 16), (32, 16, 16)], in_face])
    right = _piece((1, 0, 0), [[(0, 16, 16), (12, 16, 16)], [(0, 16, 16), (0, 22, 16)]])
    skeleton = _decoded(joined_skeleton([left, right], GRID, BOX))
    assert np.isclose(skeleton.cable_length(), (24 + 6) * NM)


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
    skeleton = _decoded(joined_skeleton([no_edge], GRID, box))
    assert skeleton.edges.tolist() == [[0, 1]]
    np.testing.assert_allclose(skeleton.vertices, np.asarray(ends) * NM)
    assert (skeleton.radius > 0).all()
