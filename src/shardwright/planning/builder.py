"""Making a volume's plan: open the source, refuse what cannot be done, decide the geometry,
sample the encoding, choose the sharding, and add the pyramid's levels."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from shardwright.codecs import byte_codec
from shardwright.errors import PlanError, ShardwrightWarning
from shardwright.formats.precomputed_info import PrecomputedInfo, PrecomputedScale
from shardwright.formats.vocabulary import VolumeType, names
from shardwright.formats.zarr3_metadata import ZarrArrayMetadata
from shardwright.options import ConvertOptions
from shardwright.planning import capabilities, checks, geometry, pyramid, sharding
from shardwright.planning.geometry import Geometry, output_axes, to_axes, to_zarr_order
from shardwright.planning.levels import add_levels
from shardwright.planning.text import xyz
from shardwright.planning.volume import ConversionPlan
from shardwright.sources import Source, open_source


def make_plan(
    source: str | Source, dest: str, options: ConvertOptions | None = None
) -> ConversionPlan:
    """Open the source, validate every choice and decide geometry and sharding."""
    given = options or ConvertOptions()
    checks.check_options_for_format(given)
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
    options = dataclasses.replace(
        options, encoding=options.encoding or _default_encoding(options.format, layer_type, dtype)
    )
    if options.format == "precomputed":
        checks.check_block_size(given, options.encoding)
    chunk = geometry.chunk_size(options.chunk_size, size)
    resolution = tuple(float(r) for r in (options.resolution or src.hints.resolution or (1, 1, 1)))
    if options.resolution is None and src.hints.resolution is None:
        warnings.warn(
            ShardwrightWarning(
                f"{src.url} records no voxel size: writing 1,1,1 nm; give the real one "
                "(x,y,z in nanometres) with --resolution"
            ),
            stacklevel=2,
        )
    checks.check_resolution(resolution)
    rx, ry, rz = resolution
    offset = tuple(int(v) for v in (options.voxel_offset or src.hints.voxel_offset or (0, 0, 0)))
    checks.check_voxel_offset(offset, size)
    levels = pyramid.requested(options, layer_type, dtype, size, chunk)
    geo = Geometry(
        source=src,
        dest=dest,
        options=options,
        layer_type=layer_type,
        dtype=dtype,
        num_channels=int(src.num_channels),
        size=size,
        chunk_size=chunk,
        voxel_offset=pyramid.triple(offset),
        resolution=(rx, ry, rz),
        pyramid=levels[0] if levels is not None else None,
    )
    plan = plan_precomputed(geo) if options.format == "precomputed" else plan_zarr3(geo)
    if levels is not None:
        plan = add_levels(plan, levels[1])
    if options.engine == "gpu":
        capabilities.check_gpu_plan(plan)
    return plan


LABEL_DTYPES = (np.dtype(np.uint32), np.dtype(np.uint64))  # what compressed_segmentation takes


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


def _default_encoding(output_format: str, layer_type: str, dtype: np.dtype) -> str:
    """compressed_segmentation for precomputed label volumes (what Neuroglancer and Igneous
    users expect of a segmentation), raw otherwise."""
    if output_format == "precomputed" and layer_type == "segmentation" and dtype in LABEL_DTYPES:
        return "compressed_segmentation"
    return "raw"


def plan_precomputed(geo: Geometry) -> ConversionPlan:
    """A precomputed volume's plan: its scale, chunk encoding and sharding spec."""
    options = geo.options
    compression = options.compression or ("none" if options.encoding in ("jpeg", "png") else "gzip")
    if compression not in ("none", "gzip"):
        raise PlanError(f"precomputed supports --compression none or gzip, not {compression!r}")
    block = None
    if options.encoding == "compressed_segmentation":
        block = options.compressed_segmentation_block_size
    try:
        scale = PrecomputedScale(
            key=sharding.scale_key(options, geo.resolution),
            size=geo.size,
            resolution=geo.resolution,
            chunk_size=geo.chunk_size,
            encoding=options.encoding or "raw",  # decided in make_plan
            voxel_offset=geo.voxel_offset,
            compressed_segmentation_block_size=block,
        )
    except (ValueError, TypeError) as exc:
        raise PlanError(str(exc)) from exc
    encoding = scale.chunk_encoding(options.jpeg_quality)
    encoding.check(geo.dtype, geo.num_channels, geo.layer_type)
    checks.check_layer_dtype(geo.layer_type, geo.dtype)
    gzip = byte_codec("gzip", level=options.compression_level) if compression == "gzip" else None

    def encode(block_xyzc: np.ndarray) -> bytes:
        data = encoding.encode(block_xyzc)
        return gzip.compress(data) if gzip else data

    ratio, absent = sharding.sample_ratio(geo.source, geo.chunk_size, geo.size, encode)
    checks.check_sampled_missing(geo.source.url, absent, options.fill_missing)
    budget, raw_chunk = options.memory_budget, geo.raw_chunk_bytes
    max_chunks, step = pyramid.box_limits(geo.pyramid, budget, geo.chunk_size, raw_chunk, True)
    spec, scattered, box = sharding.choose_sharding(
        options,
        geo.grid_shape,
        raw_chunk * ratio,
        "gzip" if gzip else "raw",
        max_chunks=max_chunks,
        step=step,
    )
    if geo.pyramid is not None:
        if scattered:
            raise PlanError(
                "pyramids need spatial-box shards (identity hash): these sharding bits "
                "scatter chunks across shards; drop --shard-bits or give more "
                "preshift + minishard bits"
            )
        pyramid.check_aligned(0, box, geo.grid_shape, step)
    scale = dataclasses.replace(scale, sharding=spec)
    info = PrecomputedInfo(
        type=geo.layer_type,
        data_type=geo.dtype.name,
        num_channels=geo.num_channels,
        scales=(scale,),
    )
    # Scattered shards are read chunk by chunk; box shards in epochs within the budget.
    epoch = (1, 1, 1) if scattered else geometry.epoch_shape(box, raw_chunk, geo.epoch_budget, step)
    return ConversionPlan(
        **geo.plan_fields(),
        encoded_ratio=ratio,
        sampled_absent=(absent.missing, absent.looked_at),
        shard_shape_chunks=box,
        scattered=scattered,
        epoch_shape_chunks=epoch,
        info=info,
    )


def plan_zarr3(geo: Geometry) -> ConversionPlan:
    """A zarr3 volume's plan: its array metadata and shard shape."""
    options = geo.options
    if options.encoding != "raw":
        raise PlanError(
            f"--encoding {options.encoding} is a precomputed chunk encoding; zarr3 "
            "output stores raw chunks with --compression none|gzip|zstd|blosc"
        )
    checks.check_layer_dtype(geo.layer_type, geo.dtype)
    compression = options.compression or "gzip"
    chunk = geo.chunk_size
    axes = output_axes(geo.source.axes, geo.num_channels)
    compressor = sharding.zarr_compressor(compression, options.compression_level)
    codec = compressor.codec(geo.dtype.itemsize) if compressor else None

    def encode(block_xyzc: np.ndarray) -> bytes:
        data = (
            to_zarr_order(block_xyzc, axes)
            .astype(block_xyzc.dtype.newbyteorder("<"), copy=False)
            .tobytes()
        )
        return codec.compress(data) if codec else data

    ratio, absent = sharding.sample_ratio(geo.source, chunk, geo.size, encode)
    checks.check_sampled_missing(geo.source.url, absent, options.fill_missing)
    raw_chunk = geo.raw_chunk_bytes
    step = (
        pyramid.alignment_step(chunk, geo.pyramid.factor) if geo.pyramid is not None else (1, 1, 1)
    )
    if options.shard_shape is not None:
        shard = tuple(int(s) for s in options.shard_shape)
        if len(shard) != 3 or any(s <= 0 or s % c for s, c in zip(shard, chunk, strict=True)):
            raise PlanError(
                f"--shard-shape {xyz(shard)} must be a positive multiple of the "
                f"chunk size {xyz(chunk)} in every axis (x,y,z)"
            )
        box = pyramid.triple(s // c for s, c in zip(shard, chunk, strict=True))
    else:
        max_chunks, _ = pyramid.box_limits(
            geo.pyramid, options.memory_budget, chunk, raw_chunk, base=True
        )
        box = sharding.zarr_box(options, geo.grid_shape, raw_chunk * ratio, max_chunks, step)
    if geo.pyramid is not None:
        pyramid.check_aligned(0, box, geo.grid_shape, step)
    shard_voxels = tuple(b * c for b, c in zip(box, chunk, strict=True))
    channels = geo.num_channels
    try:
        meta = ZarrArrayMetadata(
            shape=to_axes(geo.size, channels, axes),
            data_type=geo.dtype.name,
            shard_shape=to_axes(shard_voxels, channels, axes),
            chunk_shape=to_axes(chunk, channels, axes),
            fill_value=0,
            dimension_names=tuple(axes),
            compressor=compressor,
            index_location=options.index_location or "end",
        )
    except ValueError as exc:
        raise PlanError(f"cannot describe the zarr3 array: {exc}") from exc
    epoch = geometry.epoch_shape(box, raw_chunk, geo.epoch_budget, step)
    return ConversionPlan(
        **geo.plan_fields(),
        encoded_ratio=ratio,
        sampled_absent=(absent.missing, absent.looked_at),
        shard_shape_chunks=box,
        scattered=False,
        epoch_shape_chunks=epoch,
        zarr=meta,
    )
