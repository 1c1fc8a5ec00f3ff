"""Pyramid levels added above a dataset's coarsest level, in place: what each format's
`adding.py` plans them with (`formats/<name>/adding.py`: a precomputed volume's new scales,
an OME-Zarr 0.5 group's new Zarr v3 level arrays, an OME-Zarr 0.4 group's new Zarr v2 arrays).

Each is planned as a conversion's pyramid whose base is the coarsest level as it is stored:
its tasks read it epoch by epoch and hand the reduced voxels up without writing anything
(`writes_base` False); the levels above are written as any pyramid's. What the dataset's
metadata document gains is derived by its format (the info's new scales, or the group's new
datasets, each with its scale and translation, voxel centres as the finer levels have them,
and the new arrays' own metadata).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from shardwright.errors import NAMED, PlanError
from shardwright.options import ConvertOptions
from shardwright.planning.text import xyz
from shardwright.planning.volume import ConversionPlan
from shardwright.sources import Source, open_source


def level_options(options: ConvertOptions, key: str, **chosen: Any) -> ConvertOptions:
    """What the levels' pyramid is planned with: the pyramid and budget the user gave, the
    rest as the level read is stored (`chosen`)."""
    return ConvertOptions(
        mips=options.mips, factor=options.factor, downsample=options.downsample,
        memory_budget=options.memory_budget, target_shard_bytes=options.target_shard_bytes,
        min_shards=options.min_shards, compression_level=options.compression_level,
        fill_missing=options.fill_missing, timeout=options.timeout,
        storage_options=options.storage_options,
        source_storage_options=options.storage_options, source_scale=key, **chosen,
    )  # fmt: skip


def open_level(dest: str, key: str, options: ConvertOptions) -> Source:
    """The dataset's level `key`, read as a source."""
    return open_source(dest, scale_key=key, storage_options=options.storage_options,
                       fill_missing=options.fill_missing)  # fmt: skip


def above_base(plan: ConversionPlan, key: str, base: Source) -> ConversionPlan:
    """The pyramid, its base never written; refused where no level fits above the level
    read."""
    if plan.pyramid is None or plan.level_count < 2:
        raise PlanError(
            f"{{mips}}: level {key} ({xyz(base.shape_xyz)} voxels) is too small for a level "
            "above it",
            mips=NAMED,
        )
    return dataclasses.replace(plan, writes_base=False)


def numbered(dest: str, every: list[str], replaced: tuple[str, ...]) -> tuple[list[str], str]:
    """An OME-Zarr group's dataset paths less the levels `replaced` (refused where those are
    not its last), and the name before their numbers (`s` of s0, s1; none of 0, 1)."""
    paths = every[: len(every) - len(replaced)]
    if tuple(every[len(paths) :]) != replaced or not paths:
        raise PlanError(
            f"{dest}: levels {', '.join(replaced)} shardwright added are not the group's last "
            f"datasets ({', '.join(every)}): a level above them was added since, by another "
            "tool; shardwright does not make them again"
        )
    name = paths[0].rstrip("0123456789")  # `s` of s0, s1 (ome-zarr-py), or none
    in_order = (re.fullmatch(rf"{re.escape(name)}{k}(-\d+)?", p) for k, p in enumerate(paths))
    if not all(in_order):
        raise PlanError(
            f"{dest}: its datasets are {', '.join(paths)}: shardwright adds levels to a group "
            "whose datasets are numbered in order (0, 1, 2 or s0, s1, s2, ...)"
        )
    return paths, name


def group_base(
    dest: str, paths: list[str], options: ConvertOptions, replaced: tuple[str, ...]
) -> Source:
    """An OME-Zarr group's coarsest dataset kept, opened: the levels' base, whose pyramid
    step is the group's own (that of the datasets it keeps, where levels are replaced)."""
    base = open_level(dest, paths[-1], options)
    if replaced:
        step = open_level(dest, paths[-2], options).hints.pyramid_factor if len(paths) > 1 else None
        base.hints = dataclasses.replace(base.hints, pyramid_factor=step)
    return base
