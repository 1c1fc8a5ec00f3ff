"""Pyramid levels added above a dataset's coarsest level, in place: a precomputed volume's
new scales, an OME-Zarr 0.5 group's new Zarr v3 level arrays, or an OME-Zarr 0.4 group's new
Zarr v2 arrays.

Each is planned as a conversion's pyramid whose base is the coarsest level as it is stored:
its tasks read it epoch by epoch and hand the reduced voxels up without writing anything
(`writes_base` False); the levels above are written as any pyramid's. What the dataset's
metadata document gains is derived here: the info's new scales, or the group's new datasets
(each with its scale and translation, voxel centres as the finer levels have them) and the
new arrays' own `zarr.json`.

Where the dataset also gains meshes or skeletons made from the level the levels are reduced
from (a segmentation of one scale), the meshes' block tasks are the levels' base tasks: each
reduces its block's core as it reads it and hands the pieces to the first new level's tasks
(`feeding`, `group_consumers`, `group_producers`: a task makes a group of blocks), so the
volume is read once for all.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from shardwright.codecs import CHUNK_ENCODINGS
from shardwright.errors import NAMED, PlanError
from shardwright.formats.zarr2 import layout as zarr2_layout
from shardwright.formats.zarr2.array import as_group_document
from shardwright.formats.zarr3.layout import levels_in_group
from shardwright.formats.zarr3.ome_zarr import dataset_paths
from shardwright.generation.grid import three
from shardwright.options import ConvertOptions
from shardwright.planning.builder import make_plan
from shardwright.planning.text import xyz
from shardwright.planning.volume import ConversionPlan
from shardwright.sources import Source, open_source
from shardwright.sources.precomputed import own_step
from shardwright.stores import Store


def precomputed_levels(
    dest: str, info: dict[str, Any], options: ConvertOptions, taken: set[str]
) -> ConversionPlan:
    """The levels above a precomputed volume's coarsest scale: chunks and encoding as that
    scale's (one shardwright only reads becomes compressed_segmentation), sharded;
    `taken`: the names the dataset holds already (scales, directories)."""
    top = info["scales"][-1]
    key = str(top.get("key"))
    base = _open(dest, key, options)
    # Its own pyramid's step, that of the scales `info` lists (less any levels an addition
    # replaces): the default factor of the levels.
    base.hints = dataclasses.replace(
        base.hints, pyramid_factor=own_step(info["scales"], len(info["scales"]) - 1)
    )
    encoding = str(top.get("encoding", "raw"))
    if encoding not in CHUNK_ENCODINGS:  # compresso, crackle: a segmentation's, read only
        encoding = "compressed_segmentation" if info.get("type") == "segmentation" else "raw"
    block = top.get("compressed_segmentation_block_size")
    chunk = (top.get("chunk_sizes") or [[64, 64, 64]])[0]
    plan = make_plan(base, dest, _level_options(
        options, key, format="precomputed", layer_type=str(info.get("type")),
        encoding=encoding, chunk_size=three(int(c) for c in chunk),
        compressed_segmentation_block_size=(
            three(int(b) for b in block) if encoding == "compressed_segmentation" and block
            else None
        ),
    ))  # fmt: skip
    plan = _checked(plan, key, base)
    added = [plan.level_plan(k).layout.level_key for k in range(1, plan.level_count)]
    clash = [k for k in added if k in taken]
    if clash:
        raise PlanError(
            f"{dest}: scale {clash[0]!r} is there already; the levels above {key} would be "
            f"{', '.join(added)}: pass fewer {{mips}} or another {{factor}}",
            mips=NAMED,
            factor=NAMED,
        )
    return plan


def ome_levels(
    dest: str, group: dict[str, Any], options: ConvertOptions, replaced: tuple[str, ...] = ()
) -> ConversionPlan:
    """The levels above an OME-Zarr 0.5 group's coarsest dataset (less the levels it
    `replaced`, shardwright's, its last): Zarr v3 arrays sharded as shardwright writes them,
    numbered on from it, their axes the group's. A dataset numbered `s2-2` is level 2 written
    again beside the one it replaced."""
    ome = (group.get("attributes") or {}).get("ome")
    if not dataset_paths(group) or not isinstance(ome, dict):
        raise PlanError(f"{dest}/zarr.json is no OME-Zarr 0.5 multiscales group")
    paths, name = _numbered(dest, dataset_paths(group) or [], replaced)
    base = _based(dest, paths, options, replaced)
    label = "image-label" in ome
    plan = make_plan(base, dest, _level_options(
        options, paths[-1], format="zarr3", layer_type="segmentation" if label else "image",
    ))  # fmt: skip
    return levels_in_group(_checked(plan, paths[-1], base), group, dest, name, len(paths) - 1)


def ome04_levels(
    dest: str,
    zattrs: dict[str, Any],
    store: Store,
    options: ConvertOptions,
    replaced: tuple[str, ...] = (),
) -> ConversionPlan:
    """The levels above an OME-Zarr 0.4 group's coarsest dataset (`zattrs`: the group's
    attributes): Zarr v2 arrays stored as that dataset's array is, chunk by chunk, numbered
    on from it, along the group's axes (formats/zarr2/layout.py)."""
    paths, name = _numbered(dest, dataset_paths(as_group_document(zattrs)) or [], replaced)
    base = _based(dest, paths, options, replaced)
    zarray = _zarray(store, dest, paths[-1])
    axes = zarr2_layout.group_axes(zattrs)
    chunks = zarr2_layout.xyz_of(axes, zarray.get("chunks"))
    chunk = three(min(c, n) for c, n in zip(chunks, base.shape_xyz, strict=True))
    label = "image-label" in zattrs
    # Where the levels sit is derived from the coarsest dataset's transforms by the group's
    # own rule (zarr2_layout.zattrs_with_levels), not from an offset: none is asked of it.
    level_options = _level_options(
        options, paths[-1], format="zarr3", layer_type="segmentation" if label else "image",
        chunk_size=chunk, voxel_offset=(0, 0, 0),
    )  # fmt: skip
    plan = make_plan(base, dest, level_options,
                     planner=lambda geo: zarr2_layout.plan_volume(geo, zarray, axes))  # fmt: skip
    return zarr2_layout.levels_in_group(_checked(plan, paths[-1], base), name, len(paths) - 1)


def _zarray(store: Store, dest: str, path: str) -> dict[str, Any]:
    """A Zarr v2 dataset's `.zarray`, refused in one line where it is absent or no JSON."""
    try:
        document = json.loads(store.read(f"{path}/.zarray", small=True))
    except FileNotFoundError:
        raise PlanError(f"{dest}/{path} has no .zarray: the dataset is no Zarr v2 array") from None
    except ValueError as exc:
        raise PlanError(f"{dest}/{path}/.zarray is not valid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise PlanError(f"{dest}/{path}/.zarray is no JSON object")
    return document


def _numbered(dest: str, every: list[str], replaced: tuple[str, ...]) -> tuple[list[str], str]:
    """The group's dataset paths less the levels `replaced` (refused where those are not
    its last), and the name before their numbers (`s` of s0, s1; none of 0, 1)."""
    paths = every[: len(every) - len(replaced)]
    if tuple(every[len(paths) :]) != replaced or not paths:
        raise PlanError(
            f"{dest}: levels {', '.join(replaced)} shardwright added are not the group's last "
            f"datasets ({', '.join(every)}): a level above them was added since, by another "
            "tool; shardwright does not make them again"
        )
    name = paths[0].rstrip("0123456789")  # `s` of s0, s1 (ome-zarr-py), or none
    numbered = (re.fullmatch(rf"{re.escape(name)}{k}(-\d+)?", p) for k, p in enumerate(paths))
    if not all(numbered):
        raise PlanError(
            f"{dest}: its datasets are {', '.join(paths)}: shardwright adds levels to a group "
            "whose datasets are numbered in order (0, 1, 2 or s0, s1, s2, ...)"
        )
    return paths, name


def _based(
    dest: str, paths: list[str], options: ConvertOptions, replaced: tuple[str, ...]
) -> Source:
    """The coarsest dataset kept, opened: the levels' base, whose pyramid step is the group's
    own (that of the datasets it keeps, where levels are replaced)."""
    base = _open(dest, paths[-1], options)
    if replaced:
        step = _open(dest, paths[-2], options).hints.pyramid_factor if len(paths) > 1 else None
        base.hints = dataclasses.replace(base.hints, pyramid_factor=step)
    return base


def precomputed_root(
    info: dict[str, Any], levels: ConversionPlan | None, replaced: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The info's `scales` with the added levels' after its own (less those `replaced`)."""
    if levels is None:
        return info
    added = dict(levels.metadata_documents())["info"]["scales"][1:]
    return {**info, "scales": [*without_scales(info, replaced)["scales"], *added]}


def without_scales(info: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The info less the scales `keys` (levels an addition replaces)."""
    return {**info, "scales": [s for s in info["scales"] if str(s.get("key")) not in keys]}


def renamed_levels(levels: ConversionPlan, keys: dict[str, str]) -> ConversionPlan:
    """The pyramid with its new levels keyed anew where `keys` (old -> new) says: a level
    that replaces one of the same resolution is written beside it, never over it, while the
    info still names the old one."""
    if not keys:
        return levels

    def renamed(plan: ConversionPlan) -> ConversionPlan:
        return dataclasses.replace(plan, layout=plan.layout.renamed(keys))

    upper = tuple(renamed(level) for level in levels.upper)
    return dataclasses.replace(renamed(levels), upper=upper)


def _level_options(options: ConvertOptions, key: str, **chosen: Any) -> ConvertOptions:
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


def _open(dest: str, key: str, options: ConvertOptions) -> Source:
    return open_source(dest, scale_key=key, storage_options=options.storage_options,
                       fill_missing=options.fill_missing)  # fmt: skip


def _checked(plan: ConversionPlan, key: str, base: Source) -> ConversionPlan:
    """The pyramid, its base never written; refused where no level fits above the level
    read."""
    if plan.pyramid is None or plan.level_count < 2:
        raise PlanError(
            f"{{mips}}: level {key} ({xyz(base.shape_xyz)} voxels) is too small for a level "
            "above it",
            mips=NAMED,
        )
    return dataclasses.replace(plan, writes_base=False)
