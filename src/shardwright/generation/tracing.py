"""Skeletons: TEASAR (kimimaro) in each block, joined across blocks into one per segment.

Blocks overlap by one voxel and kimimaro's `fix_borders` places a vertex at the centre of
each cross-section on a block's faces, so the pieces of a segment from neighbouring blocks
share those vertices exactly; joining is welding equal positions. TEASAR in a block also
runs branches out to other points of a face it shares with a neighbour (the face is an edge
of what it sees); the segment goes on there, through the centre vertex, so such a branch is
an artefact of the cut: after welding, a short branch that ends on an inner block face, at a
vertex one block's piece alone holds, is removed back to its junction (a branch both blocks
traced, lying in the face they share, is the segment's own). Short branches elsewhere are
the segment's own and are kept (as Igneous's merge keeps them by default). Radii (the
distance to the boundary, nm) travel as the `radius` vertex attribute.

Pieces welded across block faces can close a loop (a segment around the line four blocks
share: each block's piece joins two of its faces). kimimaro's loop removal deletes a loop
without branches whole, skeleton and all, so each loop is first opened where it crosses a
block face: one edge with an end on an inner face is removed, and the branches the opening
leaves are pruned as the cut's are. A segment TEASAR leaves no edge in (one voxel, say) gets
one edge across its box, so that every segment has a skeleton to show.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from shardwright.formats.precomputed.skeletons import encode_skeleton
from shardwright.generation.census import Box
from shardwright.generation.exchange import Piece
from shardwright.generation.grid import BlockGrid
from shardwright.generation.welding import unique_positions

RADIUS_ATTRIBUTE = {"id": "radius", "data_type": "float32", "num_components": 1}
# nm: a branch ending on an inner face longer than this is the segment's own (it ends there);
# shorter ones are cut artefacts. On bench_meshes' volume 1,000 nm left 92 of 994 skeletons
# more than 15 % from kimimaro's on the whole volume; 500 nm left 108, 2,500 nm 99, no limit
# 123 (real branches lost), no pruning 223 (and cutting every branch under 3,500 nm, 227).
FACE_BRANCH_LIMIT = 1000.0


def teasar_params() -> dict[str, Any]:
    """TEASAR parameters as Igneous's `skeleton forge` chooses them by default (in nm, so they
    follow the voxel size): the invalidation ball scale x radius + const, soma detection for
    large radii."""
    return {
        "scale": 4,
        "const": 10,
        "pdrf_scale": 100000,
        "pdrf_exponent": 4,
        "soma_detection_threshold": 1100,
        "soma_acceptance_threshold": 3500,
        "soma_invalidation_scale": 1.0,
        "soma_invalidation_const": 300,
        "max_paths": None,
    }


def block_skeletons(
    labels: np.ndarray, grid: BlockGrid, wanted: Iterable[int]
) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each wanted segment's skeleton in one block: (vertices [n, 3] float32 nm from the block's
    origin, edges [m, 2] uint32, radii [n] float32 nm)."""
    import kimimaro

    ids = sorted(set(wanted))
    if not ids:
        return {}
    found = kimimaro.skeletonize(
        np.asfortranarray(labels),
        teasar_params=teasar_params(),
        anisotropy=grid.resolution,
        object_ids=ids,
        dust_threshold=0,
        fix_branching=True,
        fix_borders=True,
        progress=False,
        parallel=1,
    )
    out = {}
    for segment, skeleton in found.items():
        if len(skeleton.vertices):
            out[int(segment)] = (
                np.asarray(skeleton.vertices, np.float32),
                np.asarray(skeleton.edges, np.uint32).reshape(-1, 2),
                np.asarray(skeleton.radii, np.float32),
            )
    return out


def joined_skeleton(pieces: Sequence[Piece], grid: BlockGrid, box: Box) -> bytes:
    """One segment's encoded skeleton (vertices in nm, `radius` attribute) from its pieces;
    `box`: the segment's (low, high) voxels, for one that TEASAR left no edge in."""
    points, links, radius = _joined(pieces, grid)
    if not len(links):
        points, links, radius = _across(box, grid)
    return encode_skeleton(points.astype(np.float32), links.astype(np.uint32), [radius])


def _joined(pieces: Sequence[Piece], grid: BlockGrid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pieces welded, loops opened at block faces, the cut's branches pruned, cleaned."""
    pieces = [piece for piece in pieces if len(piece.links)]
    if not pieces:
        return np.zeros((0, 3)), np.zeros((0, 2), np.int64), np.zeros(0, np.float32)
    vertices, edges, radii = [], [], []
    base = 0
    for piece in pieces:
        origin = np.asarray(grid.block_origin_nm(piece.block), np.float64)
        vertices.append(piece.vertices.astype(np.float64) + origin)
        edges.append(piece.links.astype(np.int64) + base)
        assert piece.radii is not None
        radii.append(piece.radii)
        base += len(piece.vertices)
    points = np.concatenate(vertices)
    unique, inverse = unique_positions(points)
    welded = inverse[np.concatenate(edges)]
    welded = np.sort(welded[welded[:, 0] != welded[:, 1]], axis=1)
    welded = np.unique(welded, axis=0) if len(welded) else welded.reshape(0, 2)
    radius = np.zeros(len(unique), np.float32)
    np.maximum.at(radius, inverse, np.concatenate(radii))
    holders = np.zeros(len(unique), np.int64)  # pieces holding each vertex
    for start, stop in itertools.pairwise(np.cumsum([0, *(len(v) for v in vertices)])):
        holders[np.unique(inverse[start:stop])] += 1
    on_face = _on_inner_face(unique, grid)
    welded, opened = _opened_at_faces(welded, on_face)
    welded = _without_face_branches(unique, welded, (on_face & (holders == 1)) | opened)
    return _cleaned(unique, welded, radius)


def _across(box: Box, grid: BlockGrid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One edge across the box, between the centres of its first and last voxels (of one
    voxel: across it, along its longest side), radius half the smallest voxel side."""
    resolution = np.asarray(grid.resolution, np.float64)
    low, high = (np.asarray(grid.origin_nm) + np.asarray(v) * resolution
                 for v in (box[0], np.asarray(box[1]) - 1))  # fmt: skip
    if np.array_equal(low, high):
        half = np.where(np.arange(3) == np.argmax(resolution), resolution / 2, 0)
        low, high = low - half, high + half
    radius = np.full(2, resolution.min() / 2, np.float32)
    return np.stack([low, high]), np.array([[0, 1]], np.int64), radius


def _opened_at_faces(edges: np.ndarray, on_face: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the edges without one edge of each loop, where it touches an inner block face; which
    vertices lost an edge). The edges kept are a spanning forest that takes every edge
    inside a block first (each block's piece is a tree, so only edges at faces close loops);
    a loop that touches no face (none should) is left to kimimaro."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import minimum_spanning_tree

    opened = np.zeros(len(on_face), bool)
    if not len(edges):
        return edges, opened
    at_face = on_face[edges].any(axis=1)
    weights = np.where(at_face, 2.0, 1.0)
    n = len(on_face)
    forest = minimum_spanning_tree(
        coo_matrix((weights, (edges[:, 0], edges[:, 1])), (n, n))
    ).tocoo()
    kept = {tuple(sorted(e)) for e in zip(forest.row.tolist(), forest.col.tolist(), strict=True)}
    in_forest = np.array([(a, b) in kept for a, b in edges.tolist()], bool)  # edges: a < b
    removed = ~in_forest & at_face
    opened[edges[removed].ravel()] = True
    return edges[~removed], opened


def _on_inner_face(points: np.ndarray, grid: BlockGrid) -> np.ndarray:
    """Which points (nm) lie on a plane two blocks share (not on the dataset's edges)."""
    voxels = (points - np.asarray(grid.origin_nm)) / np.asarray(grid.resolution)
    nearest = np.rint(voxels)
    block, shape = np.asarray(grid.block), np.asarray(grid.shape)
    on_grid = np.isclose(voxels, nearest, atol=1e-3) & (np.mod(nearest, block) == 0)
    inside = (nearest > 0) & (nearest < shape)
    return (on_grid & inside).any(axis=1)


def _without_face_branches(points: np.ndarray, edges: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """The edges without the branches (end vertex to the nearest junction, at most
    FACE_BRANCH_LIMIT long) whose end is a cut's (`cut`: on an inner block face, or where a
    loop was opened); a component that is one unbranched path keeps all of it."""
    neighbours: list[set[int]] = [set() for _ in range(len(points))]
    for a, b in edges.tolist():
        neighbours[a].add(b)
        neighbours[b].add(a)
    ends = [v for v in range(len(points)) if len(neighbours[v]) == 1 and cut[v]]
    while ends:
        end = ends.pop()
        if len(neighbours[end]) != 1:
            continue
        branch, previous, current = [end], end, next(iter(neighbours[end]))
        while len(neighbours[current]) == 2:
            branch.append(current)
            previous, current = current, next(n for n in neighbours[current] if n != previous)
        if len(neighbours[current]) < 3:  # one unbranched path: nothing to cut back to
            continue
        path = points[branch + [current]]
        if np.linalg.norm(np.diff(path, axis=0), axis=1).sum() > FACE_BRANCH_LIMIT:
            continue
        for vertex in branch:
            for n in neighbours[vertex]:  # welding left no edge from a vertex to itself
                neighbours[n].discard(vertex)
            neighbours[vertex].clear()
        if len(neighbours[current]) == 1 and cut[current]:
            ends.append(current)
    kept = [(a, b) for a in range(len(points)) for b in neighbours[a] if a < b]
    return np.asarray(kept, np.int64).reshape(-1, 2)


def _cleaned(
    vertices: np.ndarray, edges: np.ndarray, radii: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The joined skeleton with kimimaro's clean-up as Igneous's merge runs it by default:
    loops opened, close parts joined, vertices no edge uses dropped; no branch removed."""
    import kimimaro
    import osteoid

    skeleton = osteoid.Skeleton(vertices.astype(np.float32), edges.astype(np.uint32), radii)
    cleaned = kimimaro.postprocess(skeleton, dust_threshold=0, tick_threshold=0)
    return (
        np.asarray(cleaned.vertices, np.float64),
        np.asarray(cleaned.edges, np.int64).reshape(-1, 2),
        np.asarray(cleaned.radius, np.float32),
    )
