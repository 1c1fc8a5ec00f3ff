"""Pyramid geometry: how many levels, their sizes, resolutions, offsets and keys, and boxes.

Level k is level k - 1 reduced by its factor (each level its own: `Pyramid.steps`): size
ceil(size / factor) (a partial edge block still makes a voxel), resolution times the factor,
voxel offset floor-divided by the factor (rounded toward -infinity, as Igneous does, so
negative offsets stay consistent). The scale
key is the resolution written ``x_y_z`` (integers without a decimal point). Pure arithmetic:
no I/O, no Dask.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwright.common import downsample
from shardwright.common.boxes import Box, Triple
from shardwright.common.downsample import Factor, reduced_shape
from shardwright.common.memory import MemoryBudget
from shardwright.errors import NAMED, Alias, PlanError, PyramidError, within
from shardwright.options import ConvertOptions
from shardwright.planning.text import xyz

GIVEN = "as given"  # a factor given with --factor


@dataclass(frozen=True)
class Pyramid:
    """What every level of a pyramid shares: the method, and the factor each level is reduced
    by to make the next (`steps[k]`: level k to level k + 1)."""

    steps: tuple[Factor, ...]
    method: str
    factor_from: str = field(default=GIVEN, compare=False)  # why these factors (the plan says)

    @property
    def levels(self) -> int:
        """Levels, the base included."""
        return len(self.steps) + 1

    def step(self, level: int) -> Factor:
        """The factor that reduces `level` to the level above it."""
        return self.steps[level]

    def to_json(self) -> dict[str, Any]:
        return {
            "levels": self.levels,
            "factors_xyz": [list(step) for step in self.steps],
            "factor_from": self.factor_from,
            "method": self.method,
            "rules": downsample.RULES,  # what `method` meant when the levels were written
        }


def steps_of(described: dict[str, Any]) -> list[Factor]:
    """Each level's factor as a plan's or record's `pyramid` JSON names them (one factor for
    every level where written before levels had their own)."""
    if "factors_xyz" in described:
        return [triple(step) for step in described["factors_xyz"]]
    return [triple(described["factor_xyz"])] * (int(described["levels"]) - 1)


ISOTROPY = 2.0  # an axis this many times as coarse as the finest is not halved by default
StepRule = Callable[[Sequence[float], Triple], Factor]  # a level's voxel size, size -> factor


def voxel_step(resolution: Sequence[float], size: Triple) -> Factor:
    """The factor one level is reduced by where none is given, from its voxel size (nm) and
    size, as Igneous and Neuroglancer's scripts downsample EM towards isotropy: the axes at
    least twice as coarse as the finest are not halved (8,8,40 nm: 2,2,1), nor an axis one
    voxel thick; near-isotropic voxels are halved along every axis (2,2,2)."""
    thick = [r for r, n in zip(resolution, size, strict=True) if n > 1] or list(resolution)
    finest = min(thick)
    halved = [r < ISOTROPY * finest and n > 1 for r, n in zip(resolution, size, strict=True)]
    x, y, z = (2 if h else 1 for h in halved)
    return (x, y, z)


def default_steps(
    resolution: Sequence[float], source_factor: Factor | None, where: str
) -> tuple[StepRule, str]:
    """Where no factor is given: how each level's factor is chosen, and why. The source's own
    pyramid's step at every level where it has one (`where` names it); else each level's own
    voxel size (`voxel_step`): halved along the finest axes until near isotropy, then along
    all."""
    if source_factor is not None:
        return (lambda res, size: source_factor), f"as the source's own pyramid: {where}"
    voxel = xyz(f"{float(r):g}" for r in resolution)
    return voxel_step, f"for the voxel size {voxel} nm"


def triple(values: Iterable[int]) -> Triple:
    """Three integers x, y, z as a typed tuple."""
    x, y, z = values
    return (int(x), int(y), int(z))


def level_steps(
    size: Triple,
    resolution: Sequence[float],
    step_at: StepRule,
    mips: int | str,
    chunk: Triple,
) -> tuple[list[Factor], list[Triple]]:
    """Each level's factor (`step_at(its voxel size, its size)`) and every level's size, base
    first.

    `mips` counts the levels above the base; ``"auto"`` stops at the first level that fits in
    one chunk along every axis the next step would reduce (at least one level above the base).
    A level is possible while its step still shrinks an axis.
    """
    first = step_at(resolution, size)
    if not any(f > 1 and n > 1 for f, n in zip(first, size, strict=True)):
        raise PyramidError(
            f"a {xyz(size)} volume is a single voxel along every axis a factor of "
            f"{xyz(first)} downsamples: there is nothing to downsample"
        )
    steps: list[Factor] = []
    sizes = [size]
    res = tuple(float(r) for r in resolution)
    wanted = None if mips == "auto" else int(mips)
    while wanted is None or len(steps) < wanted:
        here = sizes[-1]
        step = step_at(res, here)
        shrinks = [d for d in range(3) if step[d] > 1 and here[d] > 1]
        if not shrinks:
            break
        if wanted is None and steps and all(here[d] <= chunk[d] for d in shrinks):
            break
        steps.append(step)
        sizes.append(reduced_shape(here, step))
        res = tuple(r * f for r, f in zip(res, step, strict=True))
    if wanted is not None and len(steps) < wanted:
        raise PyramidError(
            f"{{mips}} is too many for a {xyz(size)} volume with factors "
            f"{', '.join(xyz(s) for s in steps)}: level {len(steps)} is already one voxel "
            f"along the downsampled axes; use {{most}} or fewer (or auto)",
            mips=wanted,
            most=Alias("mips", len(steps)),
        )
    return steps, sizes


def level_resolution(
    resolution: tuple[float, ...], steps: Sequence[Factor], level: int
) -> tuple[float, ...]:
    """Level `level`'s voxel size: the base's times each step below it."""
    out = tuple(float(r) for r in resolution)
    for step in steps[:level]:
        out = tuple(r * f for r, f in zip(out, step, strict=True))
    return out


def level_offset(offset: Triple, steps: Sequence[Factor], level: int) -> Triple:
    out = offset
    for step in steps[:level]:
        out = triple(o // f for o, f in zip(out, step, strict=True))
    return out


def scale_of(steps: Sequence[Factor], level: int) -> Factor:
    """Base voxels per voxel of level `level` along each axis."""
    x, y, z = (math.prod(step[d] for step in steps[:level]) for d in range(3))
    return (x, y, z)


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
    """The pyramid asked for (and every level's size), validated; None without --mips. Each
    level's factor is the one given, else the source's own pyramid's (`source_factor`,
    recorded by `where`), else one from that level's voxel size (`resolution`: the base's, nm;
    `default_steps`)."""
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
            step_at, why = default_steps(resolution, source_factor, where)
        else:
            given = downsample.check_factor(options.factor)
            step_at, why = (lambda res, size: given), GIVEN
        method = options.downsample or downsample.default_method(layer_type, dtype)
        downsample.check_method(method, dtype, layer_type)
        steps, sizes = level_steps(size, resolution, step_at, options.mips, chunk)
    except ValueError as exc:
        raise within(exc) from exc
    return Pyramid(tuple(steps), method, why), sizes


def box_limits(
    pyramid: Pyramid | None, level: int, budget: int, chunk: Triple, raw_chunk: int
) -> tuple[int | None, Triple]:
    """(most chunks per shard, alignment step in chunks) for one level's shards.

    A base task's reduced output (1/prod(step) of its region) and an upper task's region
    must fit their shares of the budget; shard extents stay whole downsampling blocks of the
    step to the level above (none at the top).
    """
    if pyramid is None:
        return None, (1, 1, 1)
    top = level + 1 >= pyramid.levels
    step = (1, 1, 1) if top else pyramid.step(level)
    share = MemoryBudget(budget).level_region(step if level == 0 else None)
    return max(1, share // raw_chunk), alignment_step(chunk, step)


def check_aligned(level: int, box: tuple[int, ...], grid: tuple[int, ...], step: Triple) -> None:
    """Refuse shards that would split downsampling blocks between two tasks."""
    if not box_aligned(box, grid, step):
        raise PlanError(
            f"pyramid level {level}: shards of {xyz(box)} chunks would split downsampling "
            f"blocks between shards; give shard sizes that are multiples of "
            f"{xyz(step)} chunks (or use a chunk size divisible by the factor)"
        )
