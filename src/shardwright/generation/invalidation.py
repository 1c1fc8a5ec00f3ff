"""TEASAR's rolling-ball invalidation at several times kimimaro's speed.

After each path TEASAR clears the segment's voxels within a ball around each path vertex
(radius scale x DBF + const) that the vertex reaches through the segment, nearest first: a
voxel is taken at its distance from the vertex that reaches it nearest, and a vertex's flood
does not cross a voxel another has taken. kimimaro's flood (`roll_invalidation_ball_inside_
component`) pushes a voxel once for every neighbour that reaches it; on a cell body, whose
first balls cover all of it, that is most of a trace (71 % of a whole pass, measured).
`_invalidation.c` pushes a voxel only when it is reached nearer than before: each voxel is
taken at the same distance from the same vertex, so the same voxels are cleared, but where
two vertices reach a voxel at exactly the same distance: there the one that reached it first
takes it, where kimimaro's takes the one its C++ library's heap pops first. The tests hold
the rule by hand, kimimaro's voxels where no vertices tie, and kimimaro's skeletons made with
each. On six of the benchmark's 130^3 blocks (neurites, cell bodies) 657 of 659 skeletons
came out the same, vertex for vertex, the other two within 0.1 % of their cable; the floods
took a sixth to an eighth of kimimaro's time, the blocks' whole TEASAR a half to a third.

`install` puts it in kimimaro's place in this process: kimimaro looks the function up on its
module after each path, so its TEASAR runs unchanged around it. Where the C extension is not
built (no compiler at install), or a call asks for what it does not do (a voxel connectivity
graph, another connectivity, a field not Fortran-ordered bytes or over 159 million voxels),
kimimaro's own runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np

_invalidation: ModuleType | None
try:
    from shardwright.generation import _invalidation
except ImportError:  # built without a C compiler: kimimaro's own invalidation
    _invalidation = None

# The most voxels a field the C one floods may have (each voxel's pushes are counted in 32 bits).
MOST_VOXELS = (2**32 - 1) // 27
_installing = threading.Lock()
_kimimaro_own: Callable[..., tuple[int, np.ndarray]] | None = None


def install() -> None:
    """Put `roll_invalidation` in kimimaro's place in this process, once."""
    global _kimimaro_own
    if _invalidation is None:
        return
    import kimimaro.skeletontricks as tricks

    with _installing:
        current = getattr(tricks, "roll_invalidation_ball_inside_component", None)
        if current is None or current is roll_invalidation:
            return
        _kimimaro_own = current
        tricks.roll_invalidation_ball_inside_component = roll_invalidation


def kimimaro_own() -> Callable[..., tuple[int, np.ndarray]]:
    """kimimaro's own invalidation, installed or not (the tests' reference)."""
    if _kimimaro_own is not None:
        return _kimimaro_own
    import kimimaro.skeletontricks as tricks

    found: Callable[..., tuple[int, np.ndarray]] = tricks.roll_invalidation_ball_inside_component
    return found


def roll_invalidation(
    labels: np.ndarray,
    DBF: np.ndarray,  # noqa: N803 (kimimaro's argument names: it passes some by keyword)
    scale: float,
    constant: float,
    anisotropy: Sequence[float],
    path: Any,
    voxel_connectivity_graph: np.ndarray | None = None,
    connectivity: int = 26,
) -> tuple[int, np.ndarray]:
    """kimimaro's `roll_invalidation_ball_inside_component`, by the same arguments: clears
    `labels` (in place) within the balls around `path`'s vertices; (voxels cleared, labels)."""
    fits = (
        _invalidation is not None
        and voxel_connectivity_graph is None
        and connectivity == 26
        and labels.ndim == 3
        and labels.itemsize == 1
        and labels.flags.f_contiguous
        and labels.size <= MOST_VOXELS
    )
    if not fits:
        return kimimaro_own()(labels, DBF, scale, constant, anisotropy, path,
                              voxel_connectivity_graph=voxel_connectivity_graph,
                              connectivity=connectivity)  # fmt: skip
    assert _invalidation is not None
    sources = np.ascontiguousarray(np.asarray(path, np.int64).reshape(-1, 3))
    # in float32 arithmetic, as kimimaro computes each radius
    radii = np.float32(scale) * DBF[tuple(sources.T)].astype(np.float32) + np.float32(constant)
    voxel = tuple(float(w) for w in anisotropy)
    cleared = _invalidation.roll(labels, sources, np.ascontiguousarray(radii, np.float32), voxel)
    return int(cleared), labels
