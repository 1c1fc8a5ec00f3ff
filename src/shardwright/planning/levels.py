"""Planning a pyramid's levels above the base.

Every level is planned like the base (chunk size clipped to the level, sharding chosen per
level), with shard and epoch boxes on whole downsampling blocks so each task reduces its own
voxels exactly, and sized so that what a task hands to the next level fits the budget. The
base plan carries the upper levels' plans (`level_plan(k)`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from shardwright.errors import NAMED, PlanError
from shardwright.planning import pyramid
from shardwright.planning.layout import LevelGeometry
from shardwright.planning.pyramid import Triple
from shardwright.planning.text import human_bytes, xyz
from shardwright.planning.volume import ConversionPlan


def add_levels(base: ConversionPlan, sizes: list[Triple]) -> ConversionPlan:
    """The base plan with the plans of every level above it, each with its layout (precomputed:
    one `info` listing every scale)."""
    pyr = base.pyramid
    assert pyr is not None
    options = base.options
    budget = options.memory_budget
    if base.image_bytes > options.budget.handed_up():
        raise PlanError(
            f"pyramid level 0: shards hand {human_bytes(base.image_bytes)} to the next level, more "
            f"than half the {human_bytes(budget)} memory budget allows; use a chunk size divisible "
            "by the factor, smaller shards or a larger {memory_budget}",
            memory_budget=NAMED,
        )
    # Explicit sharding choices are for the base level; upper levels are planned here.
    auto = dataclasses.replace(
        options, preshift_bits=None, minishard_bits=None, shard_bits=None, shard_shape=None
    )
    levels: list[dict[str, Any]] = []
    parts: list[Any] = []  # each level's part of the format's metadata
    for k in range(1, len(sizes)):
        size = sizes[k]
        chunk = pyramid.triple(min(c, s) for c, s in zip(base.chunk_size, size, strict=True))
        grid = tuple(math.ceil(s / c) for s, c in zip(size, chunk, strict=True))
        raw_chunk = math.prod(chunk) * base.num_channels * base.dtype.itemsize
        max_chunks, step = pyramid.box_limits(pyr, k, budget, chunk, raw_chunk)
        x, y, z = pyramid.level_resolution(base.resolution, pyr.steps, k)
        resolution = (x, y, z)
        level: dict[str, Any] = dict(
            level=k,
            size=size,
            chunk_size=chunk,
            resolution=resolution,
            voxel_offset=pyramid.level_offset(base.voxel_offset, pyr.steps, k),
        )
        box, part = base.layout.plan_level(
            auto,
            LevelGeometry(
                grid=pyramid.triple(grid),
                encoded_chunk_bytes=raw_chunk * base.encoded_ratio,
                max_chunks=max_chunks,
                step=step,
                **level,
            ),
        )
        parts.append(part)
        pyramid.check_aligned(k, box, grid, step)
        if math.prod(box) * raw_chunk > options.budget.handed_up():
            raise PlanError(
                f"pyramid level {k}: shards of {xyz(box)} chunks "
                f"({human_bytes(math.prod(box) * raw_chunk)}) are needed to keep downsampling "
                f"blocks whole, more than half the {human_bytes(budget)} memory budget; use a "
                "chunk size divisible by the factor or a larger {memory_budget}",
                memory_budget=NAMED,
            )
        level["shard_shape_chunks"] = box
        level["epoch_shape_chunks"] = box  # an upper task holds its whole region
        levels.append(level)
    layouts = base.layout.with_levels(parts)
    upper = tuple(
        dataclasses.replace(base, layout=layout, scattered=False, upper=(), **level)
        for layout, level in zip(layouts[1:], levels, strict=True)
    )
    return dataclasses.replace(base, layout=layouts[0], upper=upper)
