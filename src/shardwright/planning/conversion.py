"""What a source is planned as: a mesh or skeleton directory, or a volume with, when asked,
its segmentation's meshes and skeletons in the same job (converted from the directories its
info names, or made from its voxels)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from shardwright.common import deadlines
from shardwright.common.urls import absolute
from shardwright.errors import NAMED, PlanError
from shardwright.options import ConvertOptions
from shardwright.planning.annotations import AnnotationPlan, make_annotation_plan
from shardwright.planning.builder import make_plan
from shardwright.planning.generated import with_generated
from shardwright.planning.objects import ObjectPlan, make_object_plan, object_source_info
from shardwright.planning.volume import ConversionPlan
from shardwright.sources import Source
from shardwright.sources.tables import segment_properties_of
from shardwright.sources.tables_open import holds_parquet, is_table
from shardwright.stores import open_store


def plan_conversion(
    source: str | Source | Any, dest: str, options: ConvertOptions
) -> ConversionPlan | ObjectPlan | AnnotationPlan:
    """A table (CSV, Parquet, a DataFrame) gets an AnnotationPlan; a mesh or skeleton
    directory (its `info` says which) an ObjectPlan; a volume a ConversionPlan, with its
    meshes / skeletons alongside when the options ask for them."""
    deadlines.set_timeout(options.timeout)  # this process's, and its workers'
    # Local paths absolute: workers on a cluster resolve them in folders of their own.
    dest = absolute(dest)
    source = absolute(source) if isinstance(source, str) else source
    described = (options.annotation_type or options.relationships or options.properties
                 or options.enums)  # fmt: skip
    if is_table(source) or (described and holds_parquet(source, options.source_storage_options)):
        return make_annotation_plan(source, dest, options)
    if described:
        raise PlanError(
            "{annotation_type}, {relationships}, {properties} and {enums} describe a table's "
            f"annotations (.csv, .parquet, a folder of Parquet files or a DataFrame); {source} "
            "is no table",
            annotation_type=NAMED, relationships=NAMED, properties=NAMED, enums=NAMED,
        )  # fmt: skip
    info = object_source_info(source, options.source_storage_options)
    if info is not None:
        if (
            options.with_meshes
            or options.with_skeletons
            or options.generate_meshes
            or (options.generate_skeletons)
        ):
            raise PlanError(
                "{with_meshes} / {with_skeletons} / {generate_meshes} / {generate_skeletons} "
                "go with a segmentation volume",
                with_meshes=NAMED, with_skeletons=NAMED, generate_meshes=NAMED,
                generate_skeletons=NAMED,
            )  # fmt: skip
        return make_object_plan(str(source), dest, options, info)
    if (options.with_meshes and options.generate_meshes) or (
        options.with_skeletons and options.generate_skeletons
    ):
        raise PlanError(
            "{with_meshes} / {with_skeletons} convert existing meshes or skeletons and "
            "{generate_meshes} / {generate_skeletons} make new ones: both would write the "
            "same directory; choose one",
            with_meshes=NAMED, with_skeletons=NAMED, generate_meshes=NAMED,
            generate_skeletons=NAMED,
        )  # fmt: skip
    volume = make_plan(source, dest, options)
    if options.segment_properties is not None:
        volume = _with_segment_properties(volume, options)
    if options.with_meshes or options.with_skeletons:
        volume = with_companions(volume, source, dest, options)
    if options.generate_meshes or options.generate_skeletons:
        volume = with_generated(volume, options)
    return volume


def with_companions(
    volume: ConversionPlan, source: str | Source, dest: str, options: ConvertOptions
) -> ConversionPlan:
    """The volume plan plus the plans of the meshes / skeletons its source `info` names,
    each to the same sub-directory of DEST, which the volume's `info` then names too."""
    if not isinstance(source, str) or not volume.layout.names_companions:
        raise PlanError(
            "{with_meshes} / {with_skeletons} need a precomputed volume source",
            with_meshes=NAMED,
            with_skeletons=NAMED,
        )
    store = open_store(source, options.source_storage_options)
    try:
        source_info = json.loads(store.read("info"))
    except FileNotFoundError:
        raise PlanError(f"{source} has no info: only precomputed volumes name meshes") from None
    wanted = [("mesh", options.with_meshes), ("skeletons", options.with_skeletons)]
    companions: list[ObjectPlan] = []
    names: dict[str, Any] = {}
    for member, asked in wanted:
        if not asked:
            continue
        name = source_info.get(member)
        if not isinstance(name, str) or not name or name.startswith("/") or ".." in name:
            option = "with_meshes" if member == "mesh" else "with_skeletons"
            raise PlanError(
                f"{{{option}}}: {source}/info names no {member} directory", **{option: NAMED}
            )
        path, out = f"{source.rstrip('/')}/{name}", f"{dest.rstrip('/')}/{name}"
        info = object_source_info(path, options.source_storage_options)
        if info is None:
            raise PlanError(f"{path} has no mesh or skeleton info")
        companions.append(make_object_plan(path, out, options, info))
        names[member] = name
    return dataclasses.replace(
        volume,
        layout=volume.layout.naming(names),
        companions=tuple(companions),
    )


def _with_segment_properties(volume: ConversionPlan, options: ConvertOptions) -> ConversionPlan:
    """The volume whose info names the segment properties the job writes beside it."""
    if volume.layer_type != "segmentation":
        raise PlanError(
            "{segment_properties} describe the segments of a precomputed segmentation",
            segment_properties=NAMED,
        )
    table = str(options.segment_properties)
    import dask

    with dask.config.set(scheduler="threads"):  # read here, as the annotations' plan does
        document = segment_properties_of(table, options.source_storage_options, table)
    return dataclasses.replace(volume, layout=volume.layout.with_segment_properties(document))
