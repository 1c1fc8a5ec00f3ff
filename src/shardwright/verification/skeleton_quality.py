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
from shardwright.generation.tracing import Tracing, trace_cutout
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
    """kimimaro's cable length of `segment` on its own cutout (voxels [low, high), with the
    background around where the dataset goes on, nm), with the job's TEASAR parameters
    (`teasar`: the manifest's; None: the defaults); None where the cutout with the layers
    around it is larger than MOST_VOXELS or TEASAR finds nothing."""
    start, stop = three(int(a) for a in low), three(int(b) for b in high)
    around = [min(n, b + 2) - max(0, a - 1)
              for a, b, n in zip(start, stop, source.shape_xyz, strict=True)]  # fmt: skip
    if int(np.prod(around)) > MOST_VOXELS:
        return None
    mask = np.asarray(source.read(start, stop)[..., 0]) == segment
    nm = tuple(map(float, resolution))
    tracing = Tracing(tuple(teasar.items())) if teasar else Tracing()
    at, edges, _ = trace_cutout(mask, start, ((0, 0, 0), source.shape_xyz), nm, tracing)
    if not len(edges):
        return None
    return cable_length(at * np.asarray(nm), edges)


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
