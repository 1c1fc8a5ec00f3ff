"""What an addition asks of an OME-Zarr 0.5 group (`additions/`): its new Zarr v3 level
arrays above the coarsest dataset, sharded as shardwright writes them, numbered on from it,
their axes the group's; each array's `zarr.json`, then the group's naming them."""

from __future__ import annotations

from typing import Any

from shardwright.common.vocabulary import OutputFormat
from shardwright.errors import PlanError
from shardwright.formats.zarr3.layout import (
    Zarr3Layout,
    group_with_levels,
    level_arrays,
    levels_in_group,
)
from shardwright.formats.zarr3.ome_zarr import dataset_paths
from shardwright.options import ConvertOptions
from shardwright.planning.builder import make_plan
from shardwright.planning.formats import FormatAdding
from shardwright.planning.upper_levels import above_base, group_base, level_options, numbered
from shardwright.planning.volume import ConversionPlan
from shardwright.stores import Store


def plan_levels(
    dest: str,
    group: dict[str, Any],
    store: Store,
    options: ConvertOptions,
    replaced: tuple[str, ...],
) -> ConversionPlan:
    """The levels above the group's coarsest dataset (less the levels it `replaced`,
    shardwright's, its last). A dataset numbered `s2-2` is level 2 written again beside the
    one it replaced."""
    ome = (group.get("attributes") or {}).get("ome")
    if not dataset_paths(group) or not isinstance(ome, dict):
        raise PlanError(f"{dest}/zarr.json is no OME-Zarr 0.5 multiscales group")
    paths, name = numbered(dest, dataset_paths(group) or [], replaced)
    base = group_base(dest, paths, options, replaced)
    layer_type = "segmentation" if "image-label" in ome else "image"
    options = level_options(options, paths[-1], format=OutputFormat.ZARR3, layer_type=layer_type)
    plan = above_base(make_plan(base, dest, options), paths[-1], base)
    return levels_in_group(plan, group, dest, name, len(paths) - 1)


def check_root(group: Any, dest: str) -> None:
    """Refuse a `zarr.json` that is no group (a bare array has no levels to add to)."""
    if not (isinstance(group, dict) and group.get("node_type") == "group"):
        raise PlanError(
            f"{dest}/zarr.json is no group: shardwright adds levels to an OME-Zarr group"
        )


ADDING = FormatAdding(
    what=lambda group: "an OME-Zarr 0.5 group",
    check_root=check_root,
    plan_levels=plan_levels,
    level_documents=level_arrays,
    with_levels=lambda group, levels, replaced: (
        group if levels is None else group_with_levels(group, levels, replaced)
    ),
    names_companions=Zarr3Layout.names_companions,
)
