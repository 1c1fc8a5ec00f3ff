"""Skeletons: TEASAR (kimimaro) in each block, joined across blocks into one per segment.

Blocks overlap by one voxel and kimimaro's `fix_borders` places a vertex at the centre of
each cross-section on a block's faces, so the pieces of a segment from neighbouring blocks
share those vertices exactly; joining is welding equal positions. Radii (the distance to
the boundary, nm) travel as the `radius` vertex attribute.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from shardwright.formats.skeletons import encode_skeleton
from shardwright.generation.exchange import Piece
from shardwright.generation.grid import BlockGrid

RADIUS_ATTRIBUTE = {"id": "radius", "data_type": "float32", "num_components": 1}
TICK_THRESHOLD = 3500  # nm: branches shorter than this from a junction are border artefacts


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


def joined_skeleton(pieces: Sequence[Piece], grid: BlockGrid) -> bytes:
    """One segment's encoded skeleton (vertices in nm, `radius` attribute) from its pieces."""
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
    unique, inverse = np.unique(points, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    welded = inverse[np.concatenate(edges)]
    welded = np.sort(welded[welded[:, 0] != welded[:, 1]], axis=1)
    welded = np.unique(welded, axis=0) if len(welded) else welded.reshape(0, 2)
    radius = np.zeros(len(unique), np.float32)
    np.maximum.at(radius, inverse, np.concatenate(radii))
    points, links, radius = _without_ticks(unique, welded, radius)
    return encode_skeleton(points.astype(np.float32), links.astype(np.uint32), [radius])


def _without_ticks(
    vertices: np.ndarray, edges: np.ndarray, radii: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The joined skeleton with kimimaro's clean-up (as Igneous's merge does): short
    branches that block borders leave behind removed, loops opened, close parts joined."""
    import kimimaro
    import osteoid

    skeleton = osteoid.Skeleton(vertices.astype(np.float32), edges.astype(np.uint32), radii)
    cleaned = kimimaro.postprocess(skeleton, dust_threshold=0, tick_threshold=TICK_THRESHOLD)
    return (
        np.asarray(cleaned.vertices, np.float64),
        np.asarray(cleaned.edges, np.int64).reshape(-1, 2),
        np.asarray(cleaned.radius, np.float32),
    )
