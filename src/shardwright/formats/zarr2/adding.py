"""What an addition asks of an OME-Zarr 0.4 group (`additions/`): its new Zarr v2 arrays
above the coarsest dataset, stored as that dataset's array is, chunk by chunk, numbered on
from it, along the group's axes (`layout.py`); each array's `.zarray`, then the group's
`.zattrs` naming them."""

from __future__ import annotations

import json
from typing import Any

from shardwright.common.vocabulary import OutputFormat
from shardwright.errors import PlanError
from shardwright.formats.zarr2 import layout
from shardwright.formats.zarr2.array import as_group_document
from shardwright.formats.zarr3.ome_zarr import dataset_paths
from shardwright.generation.grid import three
from shardwright.options import ConvertOptions
from shardwright.planning.builder import make_plan
from shardwright.planning.formats import FormatAdding
from shardwright.planning.upper_levels import above_base, group_base, level_options, numbered
from shardwright.planning.volume import ConversionPlan
from shardwright.stores import Store


def plan_levels(
    dest: str, zattrs: dict[str, Any], store: Store, options: ConvertOptions,
    replaced: tuple[str, ...],
) -> ConversionPlan:  # fmt: skip
    """The levels above the group's coarsest dataset (`zattrs`: the group's attributes;
    less the levels it `replaced`, shardwright's, its last)."""
    paths, name = numbered(dest, dataset_paths(as_group_document(zattrs)) or [], replaced)
    base = group_base(dest, paths, options, replaced)
    zarray = _zarray(store, dest, paths[-1])
    axes = layout.group_axes(zattrs)
    chunks = layout.xyz_of(axes, zarray.get("chunks"))
    chunk = three(min(c, n) for c, n in zip(chunks, base.shape_xyz, strict=True))
    layer_type = "segmentation" if "image-label" in zattrs else "image"
    # Where the levels sit is derived from the coarsest dataset's transforms by the group's
    # own rule (layout.zattrs_with_levels), not from an offset: none is asked of it.
    options = level_options(options, paths[-1], format=OutputFormat.ZARR3, layer_type=layer_type,
                            chunk_size=chunk, voxel_offset=(0, 0, 0))  # fmt: skip
    plan = make_plan(base, dest, options,
                     planner=lambda geo: layout.plan_volume(geo, zarray, axes))  # fmt: skip
    return layout.levels_in_group(above_base(plan, paths[-1], base), name, len(paths) - 1)


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


def check_root(zattrs: Any, dest: str) -> None:
    """An OME-Zarr 0.4 group's attributes, refused where they are another version's or no
    multiscales (a bioformats2raw container: its image is its series `0/`)."""
    if not isinstance(zattrs, dict):
        raise PlanError(f"{dest}/.zattrs is no JSON object")
    multiscales = zattrs.get("multiscales")
    if not multiscales and "bioformats2raw.layout" in zattrs:
        raise PlanError(
            f"{dest} is a bioformats2raw container: its image is the group {dest}/0; add the "
            "levels to that"
        )
    if not isinstance(multiscales, list) or not multiscales or not isinstance(multiscales[0], dict):
        raise PlanError(f"{dest}/.zattrs lists no OME-Zarr multiscales: no levels to add to")
    version = str(multiscales[0].get("version", "")) or "none given"
    if version != "0.4":
        raise PlanError(
            f"{dest}: its multiscales are OME-Zarr {version}; shardwright adds levels to "
            "OME-Zarr 0.4 groups (Zarr v2) and 0.5 groups (Zarr v3)"
        )


ADDING = FormatAdding(
    what=lambda zattrs: "an OME-Zarr 0.4 group (Zarr v2)",
    check_root=check_root,
    plan_levels=plan_levels,
    level_documents=layout.level_arrays,
    with_levels=lambda zattrs, levels, replaced: (
        zattrs if levels is None else layout.zattrs_with_levels(zattrs, levels, replaced)
    ),
    names_companions=layout.Zarr2Layout.names_companions,
)
