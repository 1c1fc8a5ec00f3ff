"""A segment's skeleton pieces, traced block by block, joined into one skeleton per segment.

Blocks overlap by one voxel and kimimaro's `fix_borders` places a vertex at the centre of
each cross-section on a block's faces, so the pieces of a segment from neighbouring blocks
share those vertices exactly; joining welds equal positions. What the cuts add is then taken
out as TEASAR itself would: TEASAR is run again on the welded graph (`retraced`): from a root
(the vertex furthest from any one), paths are taken to the vertex furthest along the graph
that no path yet covers, each path covering the ball of scale x radius + const around each of
its vertices (a soma's: its own ball). A branch a block grew towards a face it shares, or a
second path both blocks traced in the plane they share, lies within the ball of the path
through the face centre and is not taken; a loop the welding closed is opened (paths form a
tree); nothing the pieces reach is lost, for every vertex left out lies within a ball of one
kept. Components are taken largest first, each less what the ones before cover; close ones
are then joined as Igneous's merge joins them (kimimaro's clean-up). Radii (the distance to
the boundary, nm) travel as the `radius` vertex attribute.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shardwright.generation.exchange import Piece
from shardwright.generation.grid import BlockGrid
from shardwright.generation.welding import unique_positions

Skeleton = tuple[np.ndarray, np.ndarray, np.ndarray]  # vertices nm, edges, radii nm


def joined(pieces: Sequence[Piece], grid: BlockGrid, teasar: dict[str, Any]) -> Skeleton:
    """The pieces welded, traced again over the welded graph with `teasar` (kimimaro's
    parameters), cleaned."""
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
    points, inverse = unique_positions(np.concatenate(vertices))
    welded = inverse[np.concatenate(edges)]
    welded = np.sort(welded[welded[:, 0] != welded[:, 1]], axis=1)
    welded = np.unique(welded, axis=0) if len(welded) else welded.reshape(0, 2)
    radius = np.zeros(len(points), np.float32)
    np.maximum.at(radius, inverse, np.concatenate(radii))
    return _cleaned(points, retraced(points, welded, radius, teasar), radius)


def retraced(
    points: np.ndarray, edges: np.ndarray, radius: np.ndarray, teasar: dict[str, Any]
) -> np.ndarray:
    """The edges TEASAR keeps of a graph (`points` nm, `edges`, `radius` nm per point): a
    tree of paths per component, each path to the furthest point not yet covered."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components, dijkstra
    from scipy.spatial import cKDTree

    n = len(points)
    if not len(edges):
        return edges
    lengths = np.maximum(np.linalg.norm(points[edges[:, 0]] - points[edges[:, 1]], axis=1), 1e-9)
    graph = coo_matrix((lengths, (edges[:, 0], edges[:, 1])), (n, n)).tocsr()
    count, component = connected_components(graph, directed=False)
    soma = radius > teasar["soma_acceptance_threshold"]
    ball = np.where(soma, teasar["soma_invalidation_scale"] * radius
                    + teasar["soma_invalidation_const"],
                    teasar["scale"] * radius + teasar["const"])  # fmt: skip
    near = cKDTree(points)
    covered = np.zeros(n, bool)
    kept: list[np.ndarray] = []
    sizes = np.bincount(component[edges[:, 0]], weights=lengths, minlength=count)
    for c in np.argsort(-sizes, kind="stable"):
        members = np.flatnonzero(component == c)
        if len(members) < 2 or covered[members].all():
            continue
        root = _root(graph, members, radius, soma)
        distance, parent = dijkstra(graph, directed=False, indices=root, return_predecessors=True)
        on_tree = np.zeros(n, bool)
        on_tree[root] = True
        for target in members[np.argsort(-distance[members], kind="stable")]:
            if covered[target]:
                continue
            path, vertex = [], target
            while not on_tree[vertex]:
                path.append(vertex)
                on_tree[vertex] = True
                vertex = parent[vertex]
            for v in path:
                covered[near.query_ball_point(points[v], ball[v])] = True
            covered[target] = True
        tree = members[on_tree[members] & (members != root)]
        kept.append(np.stack([tree, parent[tree]], axis=1))
    return np.concatenate(kept).astype(np.int64) if kept else edges[:0]


def _root(graph: Any, members: np.ndarray, radius: np.ndarray, soma: np.ndarray) -> int:
    """Where TEASAR starts in a component: the widest point of a soma, else the point
    furthest from any one (kimimaro's choices)."""
    from scipy.sparse.csgraph import dijkstra

    if soma[members].any():
        return int(members[np.argmax(radius[members])])
    distance = dijkstra(graph, directed=False, indices=int(members[0]))[members]
    return int(members[np.argmax(np.where(np.isfinite(distance), distance, -1))])


def _cleaned(vertices: np.ndarray, edges: np.ndarray, radii: np.ndarray) -> Skeleton:
    """The joined skeleton with kimimaro's clean-up as Igneous's merge runs it by default:
    close parts joined, vertices no edge uses dropped; no branch removed."""
    import kimimaro
    import osteoid

    skeleton = osteoid.Skeleton(vertices.astype(np.float32), edges.astype(np.uint32), radii)
    cleaned = kimimaro.postprocess(skeleton, dust_threshold=0, tick_threshold=0)
    return (
        np.asarray(cleaned.vertices, np.float64),
        np.asarray(cleaned.edges, np.int64).reshape(-1, 2),
        np.asarray(cleaned.radius, np.float32),
    )
