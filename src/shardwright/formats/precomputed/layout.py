"""Neuroglancer precomputed output (`neuroglancer_uint64_sharded_v1`): one `info` naming every
scale; shards named by the high bits of a chunk's compressed Morton code (box shards) or by
its murmurhash (scattered shards); chunks encoded raw, compressed_segmentation or jpeg/png, and
gzip as the shard's `data_encoding`."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from shardwright.codecs import ChunkEncoding, byte_codec
from shardwright.common.vocabulary import OutputFormat
from shardwright.errors import NAMED, OptionError, PlanError, ShardwrightWarning, within
from shardwright.formats.precomputed.info import (
    DATA_TYPES,
    LABEL_DTYPES,
    PrecomputedInfo,
    PrecomputedScale,
)
from shardwright.formats.precomputed.morton import compressed_morton_code
from shardwright.formats.precomputed.segment_properties import SEGMENT_PROPERTIES
from shardwright.formats.precomputed.sharding import ShardingSpec
from shardwright.planning import checks, geometry, pyramid, sharding
from shardwright.planning.layout import ByteStage, Document, LevelGeometry
from shardwright.planning.pyramid import Triple
from shardwright.planning.text import xyz
from shardwright.planning.volume import ConversionPlan

if TYPE_CHECKING:
    from shardwright.options import ConvertOptions
    from shardwright.planning.geometry import Geometry

# Chunk encodings the GPU engine encodes on the device.
GPU_ENCODINGS = ("raw", "compressed_segmentation")


@dataclass(frozen=True)
class PrecomputedLayout:
    """A precomputed volume level: the dataset's `info` and which of its scales this is.
    `jpeg_quality` is not recorded in `info`: the plan keeps it for the encoder."""

    info: PrecomputedInfo
    level: int = 0
    jpeg_quality: int | None = None
    segment_properties: dict[str, Any] | None = None  # its document, where the job writes one

    format: ClassVar[str] = OutputFormat.PRECOMPUTED
    names_companions: ClassVar[bool] = True
    sharded: ClassVar[bool] = True
    records_unit: ClassVar[bool] = False

    @property
    def scale(self) -> PrecomputedScale:
        return self.info.scales[self.level]

    @property
    def sharding(self) -> ShardingSpec:
        spec = self.scale.sharding
        assert spec is not None, "a planned precomputed scale is sharded"
        return spec

    @property
    def chunk_encoding(self) -> ChunkEncoding:
        """This level's chunk encoder, its options (jpeg quality) applied."""
        return self.scale.chunk_encoding(self.jpeg_quality)

    @property
    def level_key(self) -> str:
        return self.scale.key

    @property
    def prefix(self) -> str:
        """Where this level's shards live in DEST: under its scale key."""
        return f"{self.scale.key}/"

    @property
    def encodes_jpeg(self) -> bool:
        return any(s.encoding == "jpeg" for s in self.info.scales)

    def gpu_refusal(self) -> str | None:
        if self.scale.encoding in GPU_ENCODINGS:
            return None
        return (
            f"the GPU engine encodes {' and '.join(GPU_ENCODINGS)}; "
            f"use the CPU engine for {self.scale.encoding}"
        )

    def byte_stage(self, compression_level: int | None) -> ByteStage:
        encoding = self.sharding.data_encoding
        codec = byte_codec(encoding, level=compression_level)
        if codec is None:
            return ByteStage(None, None, False, None)
        return ByteStage(encoding, compression_level, False, codec.compress)

    def box_shard_keys(
        self, starts: np.ndarray, shard_shape: Triple, grid: Triple
    ) -> tuple[list[str], list[int | None]]:
        # The shard number is the Morton code's bits above preshift + minishard.
        spec = self.sharding
        codes = compressed_morton_code(starts, grid)
        numbers = (codes >> np.uint64(spec.preshift_bits + spec.minishard_bits)).tolist()
        return [self.prefix + spec.shard_filename(n) for n in numbers], numbers

    @functools.cached_property
    def _scattered_numbers(self) -> list[int]:
        """The hashed shards that hold at least one chunk (one vectorized scan, then kept)."""
        return self.scale.shard_numbers()

    def scattered_shards(self) -> list[tuple[str, int]]:
        return [(self.prefix + self.sharding.shard_filename(n), n) for n in self._scattered_numbers]

    def scattered_chunk_coords(self, shard_number: int, grid: Triple) -> np.ndarray:
        found = []
        offset = 0
        for shard in self.scale.chunk_shard_numbers():
            hits = np.flatnonzero(shard == np.uint64(shard_number)) + offset
            found.append(np.stack(np.unravel_index(hits, grid, order="F"), axis=1))
            offset += shard.size
        return np.concatenate(found).astype(np.int64)

    def metadata_documents(self, plan: ConversionPlan) -> list[Document]:
        if self.segment_properties is None:
            return [("info", self.info.to_json())]
        return [(f"{SEGMENT_PROPERTIES}/info", self.segment_properties),
                ("info", self.info.to_json())]  # fmt: skip

    def with_segment_properties(self, document: dict[str, Any]) -> PrecomputedLayout:
        """The layout whose info names a segment properties folder holding `document`."""
        extra = {**self.info.extra, "segment_properties": SEGMENT_PROPERTIES}
        info = dataclasses.replace(self.info, extra=extra)
        return dataclasses.replace(self, info=info, segment_properties=document)

    def plan_level(self, options: ConvertOptions, geometry: LevelGeometry) -> tuple[Triple, Any]:
        self._warn_misplaced(geometry)
        spec, _, box = sharding.choose_sharding(
            options, geometry.grid, geometry.encoded_chunk_bytes, self.sharding.data_encoding,
            max_chunks=geometry.max_chunks, step=geometry.step,
        )  # fmt: skip
        try:
            scale = dataclasses.replace(
                self.scale,
                key=pyramid.scale_key(geometry.resolution),
                size=geometry.size,
                resolution=geometry.resolution,
                chunk_size=geometry.chunk_size,
                voxel_offset=geometry.voxel_offset,
                sharding=spec,
            )
        except ValueError as exc:
            raise within(exc, f"pyramid level {geometry.level}: ") from exc
        return box, scale

    def _warn_misplaced(self, geometry: LevelGeometry) -> None:
        """A level's offset is whole voxels of that level: the base offset divided by the
        level's factor, rounded down as Igneous does. Where that division is not exact,
        Neuroglancer draws the level beside its data: said, with what places it exactly."""
        base = self.scale
        factors = [
            round(rk / r0) for rk, r0 in zip(geometry.resolution, base.resolution, strict=True)
        ]
        off = [o % f for o, f in zip(base.voxel_offset, factors, strict=True)]
        if not any(off):
            return
        shift = xyz(f"{o * r:g}" for o, r in zip(off, base.resolution, strict=True))
        warnings.warn(
            ShardwrightWarning(
                f"pyramid level {geometry.level}: its voxel offset "
                f"{xyz(geometry.voxel_offset, ',')} is the base offset "
                f"{xyz(base.voxel_offset, ',')} divided by {xyz(factors, ',')} rounded down "
                f"(precomputed offsets are whole voxels of each level): Neuroglancer draws "
                f"it {shift} nm (x,y,z) from its data; a base offset divisible by "
                f"{xyz(factors, ',')} places every level exactly (zarr3 output's OME-Zarr "
                "translations place levels exactly)"
            ),
            stacklevel=2,
        )

    def with_levels(self, parts: list[Any]) -> list[PrecomputedLayout]:
        try:
            info = dataclasses.replace(self.info, scales=(self.scale, *parts))
        except ValueError as exc:
            raise within(exc, "pyramid scales: ") from exc
        return [dataclasses.replace(self, info=info, level=k) for k in range(len(parts) + 1)]

    def renamed(self, keys: dict[str, str]) -> PrecomputedLayout:
        """This level's layout, its info's scales keyed anew where `keys` (old -> new) says
        (an addition's level that replaces one of the same resolution)."""
        scales = tuple(dataclasses.replace(s, key=keys.get(s.key, s.key)) for s in self.info.scales)
        return dataclasses.replace(self, info=dataclasses.replace(self.info, scales=scales))

    def naming(self, names: dict[str, Any]) -> PrecomputedLayout:
        return dataclasses.replace(self, info=dataclasses.replace(self.info, **names))

    def describe(self, plan: ConversionPlan) -> dict[str, Any]:
        spec = self.sharding
        return {
            "scale_key": self.scale.key,
            "encoding": self.scale.encoding,
            "sharding": spec.to_json(),
            "shard_index_bytes": spec.shard_index_nbytes,
            "minishard_index_bytes": 24 * (1 << spec.preshift_bits) if not plan.scattered else None,
        }

    def describe_level(self) -> dict[str, Any]:
        return {"sharding": self.sharding.to_json()}


# The options only precomputed output takes (zarr3 refuses them).
OWN_OPTIONS = ("scale_key", "preshift_bits", "minishard_bits", "shard_bits", "hash",
               "jpeg_quality", "compressed_segmentation_block_size")  # fmt: skip


def check_options(options: ConvertOptions) -> None:
    """What precomputed output refuses of its own options: a jpeg quality without jpeg, a
    block size without compressed_segmentation, a compression level for jpeg or png chunks
    (which are not compressed again)."""
    if options.jpeg_quality is not None and options.encoding != "jpeg":
        chosen = options.encoding or "the default"
        raise OptionError(
            f"{{jpeg_quality}} applies to {{encoding}}, not {chosen}",
            jpeg_quality=NAMED,
            encoding="jpeg",
        )
    checks.check_block_size(options, options.encoding)
    if (
        options.compression_level is not None
        and options.compression is None
        and options.encoding in ("jpeg", "png")
    ):
        raise OptionError(
            f"{{compression_level}}: {options.encoding} chunks are not compressed again "
            + ("(use {jpeg_quality})" if options.encoding == "jpeg" else "(png compresses itself)"),
            compression_level=NAMED,
            jpeg_quality=NAMED,
        )


def default_encoding(layer_type: str, dtype: np.dtype) -> str:
    """compressed_segmentation for label volumes (what Neuroglancer and Igneous users expect
    of a segmentation), raw otherwise."""
    if layer_type == "segmentation" and dtype in LABEL_DTYPES:
        return "compressed_segmentation"
    return "raw"


def plan_volume(geo: Geometry) -> ConversionPlan:
    """A precomputed volume's plan: its scale, chunk encoding and sharding spec."""
    options = geo.options
    if geo.dtype.name not in DATA_TYPES:
        raise PlanError(
            f"precomputed output cannot hold {geo.dtype.name} voxels (its data types: "
            f"{', '.join(DATA_TYPES)}); zarr3 output holds every Zarr v3 core data type: "
            "pass {format}",
            format="zarr3",
        )
    compression = options.compression or ("none" if options.encoding in ("jpeg", "png") else "gzip")
    if compression not in ("none", "gzip"):
        raise OptionError(
            "precomputed supports {compression} none or gzip, not " + repr(compression),
            compression=NAMED,
        )
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
        raise within(exc) from exc
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
    max_chunks, step = pyramid.box_limits(geo.pyramid, 0, budget, geo.chunk_size, raw_chunk)
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
                "scatter chunks across shards; drop {shard_bits} or give more "
                "preshift + minishard bits",
                shard_bits=NAMED,
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
        layout=PrecomputedLayout(info, jpeg_quality=options.jpeg_quality),
    )
