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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwright.common import downsample
from shardwright.common.downsample import Factor, reduced_shape
from shardwright.errors import NAMED, Alias, PlanError, PyramidError, within
from shardwright.options import ConvertOptions
from shardwright.planning.text import xyz

Triple = tuple[int, int, int]
Box = tuple[Triple, Triple]  # [start, stop) per axis x, y, z

# Memory shares of the per-task budget: what a base task hands to the next level (1/4), the
# region an upper-level task holds (1/8, held twice: its inputs and the assembled region), the
# slab a reduction works on (1/32, at most 2 MiB: cache-sized slabs reduce fastest; mode sorts
# a copy of it).
IMAGE_SHARE = 4
REGION_SHARE = 8
REDUCE_SLAB_SHARE = 32
REDUCE_SLAB_MAX = 2 * 1024**2
GIVEN = "as given"  # a factor given with --factor


@dataclass(frozen=True)
class Pyramid:
    """What every level of a pyramid shares: the factor between levels and the method."""

    factor: Factor
    method: str
    levels: int  # including the base level
    factor_from: str = field(default=GIVEN, compare=False)  # why this factor (the plan says)

    def to_json(self) -> dict[str, Any]:
        return {
            "levels": self.levels,
            "factor_xyz": list(self.factor),
            "factor_from": self.factor_from,
            "method": self.method,
            "rules": downsample.RULES,  # what `method` meant when the levels were written
        }


ISOTROPY = 2.0  # an axis this many times as coarse as the finest is not halved by default


def default_factor(
    resolution: Sequence[float], size: Triple, source_factor: Factor | None, where: str
) -> tuple[Factor, str]:
    """The factor between levels where none is given, and why: the source's own pyramid's
    where it has one (`where` names it); else from the voxel size, as Igneous downsamples EM:
    the axes at least twice as coarse as the finest are not halved (8,8,40 nm: 2,2,1), nor an
    axis one voxel thick; near-isotropic voxels are halved along every axis (2,2,2)."""
    if source_factor is not None:
        return source_factor, f"as the source's own pyramid: {where}"
    finest = min(resolution)
    halved = [r < ISOTROPY * finest and n > 1 for r, n in zip(resolution, size, strict=True)]
    if not any(halved):  # a line of voxels along a coarse axis: that axis, then
        halved = [n > 1 for n in size]
    x, y, z = (2 if h else 1 for h in halved)
    voxel = xyz(f"{float(r):g}" for r in resolution)
    return (x, y, z), f"for the voxel size {voxel} nm"


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
            f"a {xyz(size)} volume is a single voxel along every downsampled axis of factor "
            f"{xyz(factor)}: there is nothing to downsample"
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
                f"{{mips}} is too many for a {xyz(size)} volume with factor "
                f"{xyz(factor)}: level {most} is already one voxel along the downsampled "
                f"axes; use {{most}} or fewer (or auto)",
                mips=wanted,
                most=Alias("mips", most),
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
        out = triple(o // f for o, f in zip(out, factor, strict=True))
    return out


def scale_key(resolution: tuple[float, ...]) -> str:
    """``"16_16_40"``: the precomputed key convention (Igneous, CloudVolume)."""
    return "_".join(str(int(r)) if float(r).is_integer() else str(r) for r in resolution)


def alignment_step(chunk: Triple, factor: Factor) -> Triple:
    """Chunks per axis whose extent is a whole number of downsampling blocks.

    Shard and epoch boxes that are multiples of this (or span the whole axis) never split a
    downsampling block, so each task reduces its own voxels exactly.
    """
    return triple(f // math.gcd(c, f) for c, f in zip(chunk, factor, strict=True))


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
    return triple(start), triple(stop)


def box_shape(box: Box) -> Triple:
    return triple(b - a for a, b in zip(box[0], box[1], strict=True))


# -- what is asked for, and what each level's shards may be ---------------------------------------
def requested(
    options: ConvertOptions,
    layer_type: str,
    dtype: np.dtype,
    size: Triple,
    chunk: Triple,
    *,
    resolution: Sequence[float] = (1.0, 1.0, 1.0),
    source_factor: Factor | None = None,
    where: str = "the source",
) -> tuple[Pyramid, list[Triple]] | None:
    """The pyramid asked for (and every level's size), validated; None without --mips. The
    factor is the one given, else `default_factor` of the voxel size (`resolution`, nm) or
    of the source's own pyramid (`source_factor`, recorded by `where`)."""
    if options.mips in (None, 0):
        if options.factor is not None or options.downsample is not None:
            raise PlanError(
                "{factor} and {downsample} shape a pyramid: add {mips} (levels above the "
                "base, or auto)",
                factor=NAMED,
                downsample=NAMED,
                mips=NAMED,
            )
        return None
    if options.hash not in (None, "identity"):
        raise PlanError(
            f"pyramids need spatial-box shards (identity hash), not {options.hash}: each "
            "shard task reduces its own box for the next level"
        )
    try:
        if options.factor is None:
            factor, why = default_factor(resolution, size, source_factor, where)
        else:
            factor, why = downsample.check_factor(options.factor), GIVEN
        method = options.downsample or downsample.default_method(layer_type, dtype)
        downsample.check_method(method, dtype, layer_type)
        sizes = level_sizes(size, factor, options.mips, chunk)
    except ValueError as exc:
        raise within(exc) from exc
    return Pyramid(factor, method, len(sizes), why), sizes


def box_limits(
    pyramid: Pyramid | None, budget: int, chunk: Triple, raw_chunk: int, base: bool
) -> tuple[int | None, Triple]:
    """(most chunks per shard, alignment step in chunks) for one level's shards.

    A base task's reduced output (1/prod(factor) of its region) and an upper task's region
    must fit their shares of the budget; shard extents stay whole downsampling blocks.
    """
    if pyramid is None:
        return None, (1, 1, 1)
    share = math.prod(pyramid.factor) * budget // IMAGE_SHARE if base else budget // REGION_SHARE
    return max(1, share // raw_chunk), alignment_step(chunk, pyramid.factor)


def check_aligned(level: int, box: tuple[int, ...], grid: tuple[int, ...], step: Triple) -> None:
    """Refuse shards that would split downsampling blocks between two tasks."""
    if not box_aligned(box, grid, step):
        raise PlanError(
            f"pyramid level {level}: shards of {xyz(box)} chunks would split downsampling "
            f"blocks between shards; give shard sizes that are multiples of "
            f"{xyz(step)} chunks (or use a chunk size divisible by the factor)"
        )
