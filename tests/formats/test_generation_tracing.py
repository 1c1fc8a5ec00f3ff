"""Joining a segment's skeleton pieces across blocks: welded at the shared face, the cut's
artefacts (short branches ending on a face two blocks share) removed, the segment's own
branches kept. Decoded by osteoid (kimimaro's skeleton type), not by our own reader."""

from __future__ import annotations

import numpy as np

from shardwright.generation.exchange import Piece
from shardwright.generation.grid import BlockGrid
from shardwright.generation.tracing import RADIUS_ATTRIBUTE, joined_skeleton

NM = 100.0  # per voxel: branch lengths below are voxels x 100 nm
GRID = BlockGrid(
    shape=(64, 32, 32), block=(32, 32, 32), resolution=(NM, NM, NM), factor=(1, 1, 1),
    origin_nm=(0.0, 0.0, 0.0),
)  # fmt: skip


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
    skeleton = _decoded(joined_skeleton([left, right], GRID))

    branches = 10 * NM + np.hypot(20, 12) * NM + 10 * NM
    assert np.isclose(skeleton.cable_length(), 52 * NM + branches)
    assert len(skeleton.components()) == 1
    positions = {tuple(v) for v in np.rint(skeleton.vertices / NM).astype(int).tolist()}
    assert (32, 20, 16) not in positions  # the artefact's end
    assert {(32, 16, 16), (52, 16, 16), (32, 28, 16), (10, 26, 16)} <= positions


def test_a_path_that_ends_on_a_shared_face_keeps_all_of_it() -> None:
    only = _piece((0, 0, 0), [[(20, 16, 16), (32, 16, 16)]])
    skeleton = _decoded(joined_skeleton([only], GRID))
    assert np.isclose(skeleton.cable_length(), 12 * NM)


def test_a_short_branch_ending_on_the_datasets_edge_is_kept() -> None:
    along = [(10, 16, 4), (20, 16, 4), (30, 16, 4)]
    piece = _piece((0, 0, 0), [along, [(20, 16, 4), (20, 16, 0)], [(20, 16, 4), (20, 12, 4)]])
    skeleton = _decoded(joined_skeleton([piece], GRID))
    assert np.isclose(skeleton.cable_length(), (20 + 4 + 4) * NM)
