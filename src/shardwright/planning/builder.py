"""Making a volume's plan: open the source, refuse what cannot be done, decide the geometry,
sample the encoding, choose the sharding, and add the pyramid's levels."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from shardwright.common.vocabulary import VolumeType, names
from shardwright.errors import NAMED, PlanError, ShardwrightWarning
from shardwright.formats.precomputed.info import LABEL_DTYPES
from shardwright.options import ConvertOptions
from shardwright.planning import capabilities, checks, geometry, pyramid
from shardwright.planning.formats import check_options_for_format, conversion_formats
from shardwright.planning.geometry import DEFAULT, OPTION, Geometry, Placed
from shardwright.planning.levels import add_levels
from shardwright.planning.volume import ConversionPlan
from shardwright.sources import Source, open_source


def make_plan(
    source: str | Source,
    dest: str,
    options: ConvertOptions | None = None,
    *,
    planner: Callable[[Geometry], ConversionPlan] | None = None,
) -> ConversionPlan:
    """Open the source, validate every choice and decide geometry and sharding; `planner`:
    the format's plan from the geometry, where it is not the options' format's (the Zarr v2
    levels added to an OME-Zarr 0.4 group)."""
    given = options or ConvertOptions()
    check_options_for_format(given)
    options = given.resolved()
    src = open_source(  # a Source as it is; a URL or an array in memory opened
        source,
        axes=options.source_axes,
        scale_key=options.source_scale,
        storage_options=options.source_storage_options,
        fill_missing=options.fill_missing,
    )
    size = pyramid.triple(int(s) for s in src.shape_xyz)
    dtype = np.dtype(src.dtype)
    checks.check_size(size, src.url)
    layer_type = _layer_type(options, src.hints.layer_type, dtype)
    output = conversion_formats()[options.format]
    encoding = options.encoding or output.default_encoding(layer_type, dtype)
    options = dataclasses.replace(options, encoding=encoding)
    output.check_encoding(given, encoding)
    chunk = geometry.chunk_size(options.chunk_size, size)
    resolution, offset, placed = _placement(options, src)
    checks.check_resolution(resolution)
    checks.check_voxel_offset(offset, size)
    levels = pyramid.requested(
        options,
        layer_type,
        dtype,
        size,
        chunk,
        resolution=resolution,
        # the source's own pyramid, for its own voxel size (one given is followed instead)
        source_factor=src.hints.pyramid_factor if placed.resolution_from != OPTION else None,
        where=src.hints.placed_by or "the source",
    )
    geo = Geometry(
        source=src,
        dest=dest,
        options=options,
        layer_type=layer_type,
        dtype=dtype,
        num_channels=int(src.num_channels),
        size=size,
        chunk_size=chunk,
        voxel_offset=offset,
        resolution=resolution,
        placed=placed,
        pyramid=levels[0] if levels is not None else None,
    )
    plan = (planner or output.plan_volume)(geo)
    if levels is not None:
        plan = add_levels(plan, levels[1])
    if options.engine == "gpu":
        capabilities.check_gpu_plan(plan)
    return plan


def _placement(
    options: ConvertOptions, src: Source
) -> tuple[tuple[float, float, float], pyramid.Triple, Placed]:
    """Voxel size and offset: the options' where given, else the source's own (refused where
    it cannot be carried exactly), else 1 nm and 0 (a voxel size guessed is warned of)."""
    hints = src.hints
    if options.resolution is None and hints.resolution_refusal:
        raise PlanError(hints.resolution_refusal, resolution=NAMED, voxel_offset=NAMED)
    if options.voxel_offset is None and hints.offset_refusal:
        raise PlanError(hints.offset_refusal, resolution=NAMED, voxel_offset=NAMED)
    where = hints.placed_by or "the source"
    checks.check_axis_order("resolution", options.resolution, hints.resolution, where)
    checks.check_axis_order("voxel_offset", options.voxel_offset, hints.voxel_offset, where)
    resolution, resolution_from = _chosen(options.resolution, hints.resolution, (1, 1, 1), where)
    if resolution_from == DEFAULT:
        warnings.warn(
            ShardwrightWarning(
                f"{src.url} records no voxel size: writing 1,1,1 nm; give the real one "
                "(x,y,z in nanometres) with {resolution}",
                resolution=NAMED,
            ),
            stacklevel=3,
        )
    offset, offset_from = _chosen(options.voxel_offset, hints.voxel_offset, (0, 0, 0), where)
    rx, ry, rz = (float(r) for r in resolution)
    placed = Placed.of(hints, resolution_from, offset_from)
    return (rx, ry, rz), pyramid.triple(int(v) for v in offset), placed


def _chosen(
    given: Sequence[float] | None,
    recorded: Sequence[float] | None,
    default: Sequence[float],
    where: str,
) -> tuple[Sequence[float], str]:
    """A value given as an option, else the source's (recorded `where`), else the default;
    with where it came from."""
    if given is not None:
        return given, OPTION
    if recorded is not None:
        return recorded, where
    return default, DEFAULT


def _layer_type(options: ConvertOptions, hinted: str | None, dtype: np.dtype) -> str:
    """The layer type asked for; for auto, what the source says, else what its voxels suggest
    (connectomics label volumes are uint32 or uint64; images are narrower, or floats)."""
    if options.layer_type not in ("auto", None):
        layer_type = options.layer_type
    elif hinted is not None:
        layer_type = hinted
    elif options.encoding == "compressed_segmentation" or dtype in LABEL_DTYPES:
        layer_type = "segmentation"
    else:
        layer_type = "image"
    if layer_type not in names(VolumeType):
        raise PlanError(f"layer type must be image or segmentation, got {layer_type!r}")
    return layer_type
