"""Skeleton joining's pure steps, by hand: which points lie on a face two blocks share, the
one edge across a segment TEASAR left none in, the cut's short branches pruned back to their
junction, and a loop opened at a block face."""

from __future__ import annotations

import numpy as np

from shardwright.generation.grid import BlockGrid
from shardwright.generation.tracing import (
    FACE_BRANCH_LIMIT,
    _across,
    _on_inner_face,
    _opened_at_faces,
    _without_face_branches,
    teasar_params,
)

NM = 100.0
GRID = BlockGrid((64, 32, 32), (32, 32, 32), (NM, NM, NM), (1, 1, 1), (0.0, 0.0, 0.0))


def test_only_planes_two_blocks_share_are_inner_faces() -> None:
    voxels = np.array([[32, 5, 5], [0, 5, 5], [64, 5, 5], [31.5, 5, 5], [5, 5, 5], [5, 32, 5],
                       [32.0004, 1, 1]])  # fmt: skip
    assert _on_inner_face(voxels * NM, GRID).tolist() == [
        True, False, False, False, False, False, True,  # within the tolerance of the plane
    ]  # fmt: skip


def test_a_segment_with_no_edge_gets_one_across_its_box() -> None:
    grid = BlockGrid((64, 64, 64), (32, 32, 32), (4.0, 4.0, 40.0), (1, 1, 1), (2.0, 2.0, 20.0))
    points, edges, radius = _across(((3, 4, 5), (4, 5, 6)), grid)  # one voxel: along z
    assert points.tolist() == [[14.0, 18.0, 200.0], [14.0, 18.0, 240.0]]
    assert edges.tolist() == [[0, 1]] and radius.tolist() == [2.0, 2.0]
    points, _, _ = _across(((0, 0, 0), (10, 1, 1)), grid)  # first to last voxel centre
    assert points.tolist() == [[2.0, 2.0, 20.0], [38.0, 2.0, 20.0]]


def test_short_branches_ending_at_a_cut_are_pruned_back_to_their_junction() -> None:
    points = np.array([[0, 0, 0], [100, 0, 0], [200, 0, 0], [300, 0, 0], [200, 500, 0],
                       [200, 0, 2000], [5000, 0, 0], [5100, 0, 0]], np.float64)  # fmt: skip
    edges = np.array([[0, 1], [1, 2], [2, 3], [2, 4], [2, 5], [6, 7]])
    cut = np.zeros(len(points), bool)
    cut[[3, 4, 5, 7]] = True  # 3 and 4 short, 5 longer than the limit, 7 on a lone path
    assert 500 < FACE_BRANCH_LIMIT < 2000
    kept = _without_face_branches(points, edges, cut)
    assert sorted(map(tuple, kept.tolist())) == [(0, 1), (1, 2), (2, 5), (6, 7)]
    nothing_cut = _without_face_branches(points, edges, np.zeros(len(points), bool))
    assert sorted(map(tuple, nothing_cut.tolist())) == sorted(map(tuple, edges.tolist()))


def test_a_loop_is_opened_once_at_a_face_and_a_tree_is_left_alone() -> None:
    loop = np.array([[0, 1], [1, 2], [2, 3], [0, 3]])
    on_face = np.array([False, True, False, False])
    kept, opened = _opened_at_faces(loop, on_face)
    assert len(kept) == 3
    (removed,) = {tuple(e) for e in loop.tolist()} - {tuple(e) for e in kept.tolist()}
    assert 1 in removed  # the edge removed touches the face
    assert opened.tolist() == [i in removed for i in range(4)]
    tree = np.array([[0, 1], [1, 2], [1, 3]])
    kept, opened = _opened_at_faces(tree, np.array([True, True, False, False]))
    assert kept.tolist() == tree.tolist() and not opened.any()


def test_teasar_runs_with_igneous_defaults() -> None:
    params = teasar_params()
    assert (params["scale"], params["const"], params["pdrf_exponent"]) == (4, 10, 4)
    assert params["soma_detection_threshold"] < params["soma_acceptance_threshold"]
