"""How close generated skeletons are to one whole pass, as a number `verify --full` reports.

Skeletons are made block by block and joined; a lab measures cable length and path distances
on them. For a seeded sample of segments (`SAMPLE`) whose box fits `MOST_VOXELS`, the stored
skeleton's cable length is compared with that of kimimaro's TEASAR, with the parameters the
job used (generation/tracing.py), on the segment's own cutout of the level the skeletons were
made from (its box and one voxel around it): the ratio per segment, their median, and how
many are more than `OFF` from 1. A quality measure, said in the report's notes: a skeleton is
not wrong for being longer or shorter than one pass would make it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shardwright.generation.grid import three
from shardwright.generation.tracing import Tracing
from shardwright.sources import Source

SAMPLE = 20  # segments compared
MOST_VOXELS = 256**3  # the largest cutout traced whole
OFF = 0.15  # a ratio further than this from 1 is counted as off


def cable_length(vertices: np.ndarray, edges: np.ndarray) -> float:
    """The summed length of a skeleton's edges (in the units of its vertices)."""
    if not len(edges):
        return 0.0
    ends = vertices[np.asarray(edges, np.int64)]
    return float(np.linalg.norm(ends[:, 0] - ends[:, 1], axis=1).sum())


def whole_pass_cable(source: Source, segment: int, low: Sequence[int], high: Sequence[int],
                     resolution: Sequence[float] | np.ndarray,
                     teasar: dict[str, float] | None = None) -> float | None:  # fmt: skip
    """kimimaro's cable length of `segment` on its own cutout (voxels [low, high] and one
    around, nm), with the job's TEASAR parameters (`teasar`: the manifest's; None: the
    defaults); None where the cutout is larger than MOST_VOXELS or TEASAR finds nothing."""
    import kimimaro

    start = three(max(0, int(a) - 1) for a in low)
    stop = three(min(n, int(b) + 2) for b, n in zip(high, source.shape_xyz, strict=True))
    if int(np.prod([b - a for a, b in zip(start, stop, strict=True)])) > MOST_VOXELS:
        return None
    labels = np.asarray(source.read(start, stop)[..., 0])
    mask = np.asfortranarray((labels == segment).astype(np.uint8))
    tracing = Tracing(tuple(teasar.items())) if teasar else Tracing()
    found = kimimaro.skeletonize(
        mask, teasar_params=tracing.params(), anisotropy=tuple(map(float, resolution)),
        dust_threshold=0, fix_branching=True, progress=False, parallel=1,
    )  # fmt: skip
    if 1 not in found or not len(found[1].edges):
        return None
    return cable_length(np.asarray(found[1].vertices), np.asarray(found[1].edges))


def summary(ratios: dict[int, float], skipped: int) -> str:
    """The note verify prints: the median ratio, how many are off, the furthest few."""
    if not ratios:
        return (f"skeleton cable against one TEASAR pass on each segment's cutout: none "
                f"compared ({skipped} too large or empty)")  # fmt: skip
    values = np.array(list(ratios.values()))
    off = {s: r for s, r in ratios.items() if abs(r - 1) > OFF}
    worst = sorted(off.items(), key=lambda item: -abs(item[1] - 1))[:3]
    named = ", ".join(f"segment {s}: {r:.2f}" for s, r in worst)
    return (
        f"skeleton cable against one TEASAR pass on each segment's cutout, {len(ratios)} "
        f"segments: median ratio {float(np.median(values)):.3f}, {len(off)} more than "
        f"{OFF:.0%} off" + (f" ({named})" if named else "")
        + (f"; {skipped} not compared (larger than {MOST_VOXELS:,} voxels, or empty)"
           if skipped else "")
    )  # fmt: skip
