"""Boxes of voxels, [start, stop) along x, y, z: their overlap, and a box as slices of an
array that starts elsewhere. Shared by the pyramid's geometry, its hand-off and the block
groups' faces."""

from __future__ import annotations

Triple = tuple[int, int, int]
Box = tuple[Triple, Triple]  # [start, stop) per axis x, y, z


def intersect(a: Box, b: Box) -> Box | None:
    """The voxels two boxes share; None where they share none."""
    x0, y0, z0 = (max(p, q) for p, q in zip(a[0], b[0], strict=True))
    x1, y1, z1 = (min(p, q) for p, q in zip(a[1], b[1], strict=True))
    if x0 >= x1 or y0 >= y1 or z0 >= z1:
        return None
    return (int(x0), int(y0), int(z0)), (int(x1), int(y1), int(z1))


def within(box: Box, origin: Triple) -> tuple[slice, slice, slice]:
    """`box` as slices of an array whose first voxel is `origin`."""
    x, y, z = (slice(a - o, b - o) for a, b, o in zip(*box, origin, strict=True))
    return (x, y, z)
