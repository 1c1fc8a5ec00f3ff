"""Segmentations shaped like the field's: neurites (long, branching, thin tubes, a few
somata) and cell bodies (blobs that touch), each a deterministic uint64 volume [x, y, z] for a
seed. The skeleton tests (tests/e2e/test_skeleton_quality.py) and `benchmarks/bench_meshes.py`
make theirs here; the tests of TEASAR's C parts draw single segments (`one_segment`)."""

from __future__ import annotations

import numpy as np


def _walk(
    rng: np.random.Generator, start: np.ndarray, extent: np.ndarray, length: float, step: float
) -> np.ndarray:
    """Points (nm) of a persistent random walk from `start`, cut where it first leaves the box.

    The heading drifts as a random walk of its own (no per-step renormalising loop), so the
    path bends smoothly over a few hundred nm, as neurites do.
    """
    steps = max(2, int(length / step))
    heading = rng.normal(size=3)
    heading /= np.linalg.norm(heading)
    drift = np.cumsum(rng.normal(scale=0.07, size=(steps, 3)), axis=0) + heading
    drift /= np.linalg.norm(drift, axis=1, keepdims=True)
    points = start + np.cumsum(step * drift, axis=0)
    inside = np.all((points >= 0) & (points < extent), axis=1)
    leaves = np.flatnonzero(~inside)
    return points[: leaves[0]] if leaves.size else points


def neurites(
    shape: tuple[int, int, int],
    resolution: tuple[float, float, float],
    segments: int,
    seed: int,
) -> np.ndarray:
    """A (x, y, z) uint64 segmentation of `segments` neuron-like objects, the same for a seed.

    Every object is one to four tubes (random walks through a shared start point, 50-300 nm
    radius, thinner side branches); one in 200 also has a soma (a 400-800 nm ball). Each voxel
    belongs to the nearest centre-line point (a Voronoi partition, so touching objects split
    along a surface as EM segmentations do) if it lies within that point's radius, else to the
    background (0). Ids are distinct random values in [1, 2**40).
    """
    from scipy import ndimage

    rng = np.random.default_rng(seed)
    res = np.asarray(resolution, dtype=np.float64)
    extent = np.asarray(shape, dtype=np.float64) * res
    ids = np.unique(rng.integers(1, 2**40, size=segments + 64, dtype=np.uint64))
    ids = rng.permutation(ids)[:segments]
    points: list[np.ndarray] = []
    owner: list[np.ndarray] = []
    radii: list[np.ndarray] = []
    somata = max(1, segments // 200)
    for index in range(segments):
        start = rng.uniform(0, extent)
        radius = float(np.clip(rng.lognormal(np.log(110.0), 0.35), 50.0, 300.0))
        tubes = [start[None, :]]
        tube_radii = [radius]
        if index < somata:
            tube_radii[0] = rng.uniform(400.0, 800.0)
        for branch in range(1 + min(int(rng.poisson(1.2)), 3)):
            walk = _walk(rng, start, extent, rng.uniform(2000.0, 9000.0), 30.0)
            tubes.append(walk)
            tube_radii.append(radius if branch < 2 else radius * rng.uniform(0.5, 0.8))
        for tube, tube_radius in zip(tubes, tube_radii, strict=True):
            points.append(tube)
            owner.append(np.full(len(tube), index, dtype=np.int32))
            radii.append(np.full(len(tube), tube_radius, dtype=np.float32))
    centres = np.concatenate(points)
    centre_owner = np.concatenate(owner)
    centre_radius = np.concatenate(radii)
    voxel = np.floor(centres / res).astype(np.int64)
    voxel = np.minimum(np.maximum(voxel, 0), np.asarray(shape) - 1)

    nearest = np.full(shape, -1, dtype=np.int32)  # centre-line point index per seed voxel
    nearest[voxel[:, 0], voxel[:, 1], voxel[:, 2]] = np.arange(len(centres), dtype=np.int32)
    distance, where = ndimage.distance_transform_edt(nearest < 0, sampling=res, return_indices=True)
    nearest = nearest[where[0], where[1], where[2]]
    del where
    inside = distance <= centre_radius[nearest]
    del distance
    labels = np.where(inside, ids[centre_owner[nearest]], np.uint64(0))
    return np.asfortranarray(labels.astype(np.uint64, copy=False))


def cell_bodies(
    shape: tuple[int, int, int],
    resolution: tuple[float, float, float],
    cells: int,
    seed: int,
) -> np.ndarray:
    """A (x, y, z) uint64 segmentation of `cells` cell bodies, the same for a seed: ellipsoids
    of 180-480 nm radius (each axis stretched by 0.7-1.3), split where they meet as a
    Voronoi partition in each one's own scaled distance; ids 1 .. cells."""
    rng = np.random.default_rng(seed)
    res = np.asarray(resolution, np.float64)
    centres = rng.uniform(0, np.asarray(shape) * res, size=(cells, 3))
    radii = rng.uniform(180.0, 480.0, size=cells)
    stretch = rng.uniform(0.7, 1.3, size=(cells, 3))
    nearest = np.full(shape, np.inf, np.float32)
    owner = np.zeros(shape, np.uint64)
    for cell in range(cells):
        reach = radii[cell] * stretch[cell]  # nm along each axis
        low = np.maximum(np.floor((centres[cell] - reach) / res), 0).astype(int)
        high = np.minimum(np.ceil((centres[cell] + reach) / res) + 1, shape).astype(int)
        if (high <= low).any():
            continue
        axes = [np.arange(a, b) * r - c for a, b, r, c in zip(low, high, res, centres[cell],
                                                              strict=True)]  # fmt: skip
        x, y, z = np.meshgrid(*(a / s for a, s in zip(axes, stretch[cell], strict=True)),
                              indexing="ij")  # fmt: skip
        scaled = (np.sqrt(x**2 + y**2 + z**2) / radii[cell]).astype(np.float32)
        box = tuple(slice(a, b) for a, b in zip(low, high, strict=True))
        closer = scaled < nearest[box]
        nearest[box][closer] = scaled[closer]
        owner[box][closer] = cell + 1
    return np.asfortranarray(np.where(nearest < 1.0, owner, np.uint64(0)))


def one_segment(kind: str, size: tuple[int, int, int], rng: np.random.Generator) -> np.ndarray:
    """One segment's voxels (bool, Fortran order) for TEASAR's parts: an ellipsoid centred
    on the box (a cell body; symmetric, so full of equal distances), a bent tube (a neurite),
    noise, or the whole box (the most ties)."""
    x, y, z = np.indices(size, dtype=np.float64)
    centre = (np.asarray(size, np.float64) - 1) / 2
    if kind == "blob":
        radii = (centre + 0.5) * rng.uniform(0.6, 1.0, 3)
        inside = sum(((a - c) / r) ** 2 for a, c, r in zip((x, y, z), centre, radii, strict=True))
        return np.asfortranarray(inside <= 1)
    if kind == "tube":
        bend = centre[1] + (size[1] / 4) * np.sin(x / max(size[0], 1) * 2 * np.pi)
        return np.asfortranarray((y - bend) ** 2 + ((z - centre[2]) * 2) ** 2 <= rng.uniform(2, 9))
    if kind == "box":
        return np.ones(size, bool, order="F")
    return np.asfortranarray(rng.random(size) < rng.uniform(0.3, 0.9))
