"""TEASAR over a welded graph (generation/joining.py), on random trees and loops: the paths
kept form one tree per component, and nothing is lost: every point left out lies within the
ball (scale x radius + const, a soma's own) of a point kept."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwright.generation.joining import retraced
from shardwright.generation.tracing import Tracing


@st.composite
def graphs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random tree (each point joined to an earlier one) with some extra edges (loops)."""
    n = draw(st.integers(2, 60))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    parents = [int(rng.integers(0, i)) for i in range(1, n)]
    points = np.zeros((n, 3))
    for i, p in enumerate(parents, 1):
        points[i] = points[p] + rng.normal(0, 200, 3)
    edges = [(p, i) for i, p in enumerate(parents, 1)]
    edges += [tuple(sorted(map(int, rng.choice(n, 2, replace=False))))
              for _ in range(draw(st.integers(0, 4)))]  # fmt: skip
    radius = rng.uniform(5, draw(st.sampled_from([60.0, 400.0, 5000.0])), n).astype(np.float32)
    return points, np.unique(np.asarray(edges, np.int64), axis=0), radius


@settings(max_examples=60, deadline=None)
@given(graphs())
def test_the_paths_kept_are_a_tree_and_cover_every_point(
    graph: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    points, edges, radius = graph
    teasar = Tracing().params()
    kept = retraced(points, edges, radius, teasar)
    assert {tuple(e) for e in np.sort(kept, axis=1).tolist()} <= {tuple(e) for e in edges.tolist()}
    used = np.unique(kept)
    n = len(points)
    parts = connected_components(coo_matrix((np.ones(len(kept)), kept.T), (n, n)),
                                 directed=False)[0] - (n - len(used))  # fmt: skip
    assert parts == 1 and len(kept) == len(used) - 1  # one tree: the graph is connected
    soma = radius > teasar["soma_acceptance_threshold"]
    ball = np.where(soma, teasar["soma_invalidation_scale"] * radius
                    + teasar["soma_invalidation_const"],
                    teasar["scale"] * radius + teasar["const"])  # fmt: skip
    far = np.linalg.norm(points[:, None] - points[None, used], axis=2)
    assert (far <= ball[used][None, :] + 1e-6).any(axis=1).all()
