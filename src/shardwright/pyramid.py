"""Pyramid geometry: how many levels, their sizes, resolutions, offsets and keys, and boxes.

Level k is level k - 1 reduced by the factor: size ceil(size / factor) (a partial edge block
still makes a voxel), resolution times the factor, voxel offset floor-divided by the factor
(rounded toward -infinity, as Igneous does, so negative offsets stay consistent). The scale
key is the resolution written ``x_y_z`` (integers without a decimal point). Pure arithmetic:
no I/O, no Dask.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from shardwright.downsample import Factor, reduced_shape
from shardwright.errors import PyramidError

Triple = tuple[int, int, int]
Box = tuple[Triple, Triple]  # [start, stop) per axis x, y, z


@dataclass(frozen=True)
class Pyramid:
    """What every level of a pyramid shares: the factor between levels and the method."""

    factor: Factor
    method: str
    levels: int  # including the base level

    def to_json(self) -> dict[str, Any]:
        return {"levels": self.levels, "factor_xyz": list(self.factor), "method": self.method}


def triple(values: Iterable[int]) -> Triple:
    """Three integers x, y, z as a typed tuple."""
    x, y, z = values
    return (int(x), int(y), int(z))


def level_sizes(size: Triple, factor: Factor, mips: int | str, chunk: Triple) -> list[Triple]:
    """The size of every level, base first.

    `mips` counts the levels above the base; ``"auto"`` stops at the first level that fits in
    one chunk along every downsampled axis (at least one level above the base).
    """
    reducible = [d for d in range(3) if factor[d] > 1]
    most = 0  # levels above the base that still shrink a downsampled axis
    probe = size
    while any(probe[d] > 1 for d in reducible):
        probe = reduced_shape(probe, factor)
        most += 1
    if most == 0:
        raise PyramidError(
            f"a {_xyz(size)} volume is a single voxel along every downsampled axis of factor "
            f"{_xyz(factor)}: there is nothing to downsample"
        )
    if mips == "auto":
        wanted, probe = 0, size
        while wanted < most and (wanted == 0 or any(probe[d] > chunk[d] for d in reducible)):
            probe = reduced_shape(probe, factor)
            wanted += 1
    else:
        wanted = int(mips)
        if wanted > most:
            raise PyramidError(
                f"--mips {wanted} is too many for a {_xyz(size)} volume with factor "
                f"{_xyz(factor)}: level {most} is already one voxel along the downsampled "
                f"axes; use --mips {most} or fewer (or auto)"
            )
    sizes = [size]
    for _ in range(wanted):
        sizes.append(reduced_shape(sizes[-1], factor))
    return sizes


def level_resolution(
    resolution: tuple[float, ...], factor: Factor, level: int
) -> tuple[float, ...]:
    return tuple(r * f**level for r, f in zip(resolution, factor, strict=True))


def level_offset(offset: Triple, factor: Factor, level: int) -> Triple:
    out = offset
    for _ in range(level):
        out = tuple(o // f for o, f in zip(out, factor, strict=True))  # type: ignore[assignment]
    return out


def scale_key(resolution: tuple[float, ...]) -> str:
    """``"16_16_40"``: the precomputed key convention (Igneous, CloudVolume)."""
    return "_".join(str(int(r)) if float(r).is_integer() else str(r) for r in resolution)


def alignment_step(chunk: Triple, factor: Factor) -> Triple:
    """Chunks per axis whose extent is a whole number of downsampling blocks.

    Shard and epoch boxes that are multiples of this (or span the whole axis) never split a
    downsampling block, so each task reduces its own voxels exactly.
    """
    return tuple(f // math.gcd(c, f) for c, f in zip(chunk, factor, strict=True))  # type: ignore[return-value]


def box_aligned(box: Sequence[int], grid: Sequence[int], step: Sequence[int]) -> bool:
    return all(b % s == 0 or b >= g for b, g, s in zip(box, grid, step, strict=True))


# -- boxes ---------------------------------------------------------------------------------------
def image(box: Box, factor: Factor) -> Box:
    """The next level's voxels that a block-aligned box reduces to."""
    start, stop = box
    return (
        triple(a // f for a, f in zip(start, factor, strict=True)),
        triple(-(-b // f) for b, f in zip(stop, factor, strict=True)),
    )


def preimage(box: Box, factor: Factor, size: Triple) -> Box:
    """The previous level's voxels (of size `size`) that reduce to `box`."""
    start, stop = box
    return (
        triple(a * f for a, f in zip(start, factor, strict=True)),
        triple(min(b * f, s) for b, f, s in zip(stop, factor, size, strict=True)),
    )


def intersect(a: Box, b: Box) -> Box | None:
    start = tuple(max(x, y) for x, y in zip(a[0], b[0], strict=True))
    stop = tuple(min(x, y) for x, y in zip(a[1], b[1], strict=True))
    if any(lo >= hi for lo, hi in zip(start, stop, strict=True)):
        return None
    return start, stop  # type: ignore[return-value]


def box_shape(box: Box) -> Triple:
    return tuple(b - a for a, b in zip(box[0], box[1], strict=True))  # type: ignore[return-value]


def _xyz(values: Any) -> str:
    return " x ".join(str(v) for v in values)
