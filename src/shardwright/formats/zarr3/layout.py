"""Zarr v3 output with `sharding_indexed`: one array per level (`k/` of an OME-Zarr group, the
default, or the one array at DEST with `--zarr-layout array`); shards named by their grid
position (`c/z/y/x`, the axes the source had); inner chunks raw, then a byte codec
(gzip, zstd, blosc) and optionally a crc32c."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar

import numpy as np

from shardwright.common.vocabulary import OutputFormat
from shardwright.errors import NAMED, Alias, OptionError, PlanError, ShardwrightWarning, within
from shardwright.formats.precomputed.info import DATA_TYPES as NEUROGLANCER_DATA_TYPES
from shardwright.formats.zarr3 import ome_zarr
from shardwright.formats.zarr3.chunks import InnerChunkChain
from shardwright.formats.zarr3.metadata import ZarrArrayMetadata
from shardwright.planning import checks, geometry, pyramid, sharding
from shardwright.planning.geometry import output_axes, to_axes, to_zarr_order
from shardwright.planning.layout import ByteStage, Document, LevelGeometry
from shardwright.planning.pyramid import Triple
from shardwright.planning.text import xyz
from shardwright.planning.volume import ConversionPlan
from shardwright.sources.units import nm_per

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from shardwright.options import ConvertOptions
    from shardwright.planning.geometry import Geometry


@dataclass(frozen=True)
class Zarr3Layout:
    """A zarr3 volume level: its array's metadata, the array's axis order (`zyx`, `czyx`...)
    and channel count, and whether the arrays sit in an OME-Zarr group."""

    meta: ZarrArrayMetadata
    axes: str
    channels: int = 1
    ome_group: bool = True
    level: int = 0
    level_name: str = ""  # before the number in a level's path (`s` where a group has s0, s1)
    level_suffix: str = ""  # after it: `-2` for a level replacing one of the same number

    format: ClassVar[str] = OutputFormat.ZARR3
    names_companions: ClassVar[bool] = False
    sharded: ClassVar[bool] = True
    records_unit: ClassVar[bool] = True

    @property
    def level_key(self) -> str:
        return f"{self.level_name}{self.level}{self.level_suffix}"

    @property
    def prefix(self) -> str:
        """Where this level's array lives in DEST: `k/` in an OME-Zarr group, or the root."""
        return f"{self.level_key}/" if self.ome_group else ""

    @property
    def encodes_jpeg(self) -> bool:
        return False

    def gpu_refusal(self) -> str | None:
        return None  # inner chunks are raw: the device scatters them, nvCOMP compresses

    def renamed(self, keys: dict[str, str]) -> Zarr3Layout:
        return level_renamed(self, self.level_key, keys)

    def byte_stage(self, compression_level: int | None) -> ByteStage:
        """The compressor's own level is in the metadata (`compression_level` made it)."""
        chain, compressor = InnerChunkChain.of(self.meta), self.meta.compressor
        return ByteStage(
            None if compressor is None else compressor.name,
            None if compressor is None else compressor.level,
            chain.checksum,
            chain.encode_bytes if chain.changes_bytes else None,
        )

    def box_shard_keys(
        self, starts: np.ndarray, shard_shape: Triple, grid: Triple
    ) -> tuple[list[str], list[int | None]]:
        shard_xyz = starts // np.asarray(shard_shape)
        by_axis = {"x": shard_xyz[:, 0], "y": shard_xyz[:, 1], "z": shard_xyz[:, 2]}
        by_axis["c"] = np.zeros(len(starts), np.int64)
        coords = np.stack([by_axis[a] for a in self.axes], axis=1)
        keys = [self.prefix + key for key in self.meta.chunk_keys(coords)]
        return keys, [None] * len(keys)

    def scattered_shards(self) -> list[tuple[str, int]]:
        return []  # zarr3 shards are boxes of the chunk grid

    def scattered_chunk_coords(self, shard_number: int, grid: Triple) -> np.ndarray:
        raise PlanError("zarr3 shards are boxes of the chunk grid, never hashed")

    def metadata_documents(self, plan: ConversionPlan) -> list[Document]:
        """Each level's `k/zarr.json` and the OME-Zarr multiscales group `zarr.json` (one
        level or many), or with `--zarr-layout array` the one array's `zarr.json`."""
        if not self.ome_group:
            return [("zarr.json", self.meta.to_json())]
        docs: list[Document] = []
        datasets: list[tuple[str, list[float], list[float]]] = []
        for k in range(plan.level_count):
            layout = plan.level_plan(k).layout
            assert isinstance(layout, Zarr3Layout), "every level of a dataset has its format"
            docs.append((f"{k}/zarr.json", layout.meta.to_json()))
            datasets.append((str(k), *self.transforms(plan, k)))
        group = ome_zarr.multiscales_group(
            self.axes,
            datasets,
            method=None if plan.pyramid is None else plan.pyramid.method,
            label=plan.layer_type == "segmentation",
            unit=plan.placed.unit,
        )
        docs.append(("zarr.json", group))
        return docs

    def transforms(self, plan: ConversionPlan, k: int) -> tuple[list[float], list[float]]:
        """Level k's OME-Zarr scale and translation, in array order and the unit written:
        voxel centres, level k's voxel 0 averaging base voxels 0 .. f**k - 1."""
        nm = nm_per(plan.placed.unit) or 1.0  # nanometres per unit written
        level = plan.level_plan(k)
        shift = [
            ((o + sub) * r0 + (rk - r0) / 2) / nm
            for o, sub, r0, rk in zip(
                plan.voxel_offset,
                plan.placed.subvoxel_offset,
                plan.resolution,
                level.resolution,
                strict=True,
            )
        ]
        scale = to_axes([float(r) / nm for r in level.resolution], 1.0, self.axes)
        return list(scale), list(to_axes(shift, 0.0, self.axes))

    def plan_level(self, options: ConvertOptions, geometry: LevelGeometry) -> tuple[Triple, Any]:
        box = sharding.zarr_box(
            options, geometry.grid, geometry.encoded_chunk_bytes, geometry.max_chunks,
            geometry.step,
        )  # fmt: skip
        shard = [b * c for b, c in zip(box, geometry.chunk_size, strict=True)]
        meta = dataclasses.replace(
            self.meta,
            shape=to_axes(geometry.size, self.channels, self.axes),
            shard_shape=to_axes(shard, self.channels, self.axes),
            chunk_shape=to_axes(geometry.chunk_size, self.channels, self.axes),
        )
        return box, meta

    def with_levels(self, parts: list[Any]) -> list[Zarr3Layout]:
        return [self] + [
            dataclasses.replace(self, meta=meta, level=k) for k, meta in enumerate(parts, 1)
        ]

    def with_segment_properties(self, document: dict[str, Any]) -> Zarr3Layout:
        raise PlanError(
            "{segment_properties} are written for precomputed segmentations (drop {format})",
            segment_properties=NAMED, format="zarr3",
        )  # fmt: skip

    def naming(self, names: dict[str, Any]) -> Zarr3Layout:
        refuse_companions()

    def describe(self, plan: ConversionPlan) -> dict[str, Any]:
        return {
            "zarr_axes": self.axes,
            "zarr_shape": list(self.meta.shape),
            "zarr_shard_shape": list(self.meta.shard_shape),
            "zarr_chunk_shape": list(self.meta.chunk_shape),
            "shard_index_bytes": 16 * plan.chunks_per_shard + 4,
        }

    def describe_level(self) -> dict[str, Any]:
        return {}


Level = TypeVar("Level", bound="DataclassInstance")


def level_renamed(layout: Level, key: str, keys: dict[str, str]) -> Level:
    """An OME-Zarr group's level array (0.5 or 0.4), key `key`, with the key `keys` gives it
    (`s2` -> `s2-2`: written beside the array it replaces)."""
    if key not in keys:
        return layout
    return dataclasses.replace(layout, level_suffix=keys[key][len(key) :])


def refuse_companions() -> NoReturn:
    """An OME-Zarr group's metadata names no mesh or skeleton directory: a precomputed
    volume's does."""
    raise PlanError(
        "{with_meshes} / {with_skeletons} need a precomputed volume source",
        with_meshes=NAMED,
        with_skeletons=NAMED,
    )


OWN_OPTIONS = ("shard_shape", "index_location", "zarr_layout")  # what precomputed refuses


def check_options(options: ConvertOptions) -> None:
    """A bare array (`--zarr-layout array`) holds no pyramid."""
    if options.zarr_layout == "array" and options.mips not in (None, 0):
        raise OptionError(
            "{zarr_layout} writes one bare array; a pyramid ({mips}) needs {ome}",
            zarr_layout="array",
            mips=NAMED,
            ome=Alias("zarr_layout", "ome"),
        )


def plan_volume(geo: Geometry) -> ConversionPlan:
    """A zarr3 volume's plan: its array metadata and shard shape."""
    options = geo.options
    if options.encoding != "raw":
        raise OptionError(
            "{encoding} is a precomputed chunk encoding; zarr3 output stores raw chunks with "
            "{compression} none|gzip|zstd|blosc",
            encoding=options.encoding,
            compression=NAMED,
        )
    checks.check_layer_dtype(geo.layer_type, geo.dtype)
    if geo.dtype.name not in NEUROGLANCER_DATA_TYPES:
        warnings.warn(
            ShardwrightWarning(
                f"Neuroglancer cannot display {geo.dtype.name} voxels (it reads "
                f"{', '.join(NEUROGLANCER_DATA_TYPES)}); TensorStore and zarr-python read this "
                "zarr3 output exactly"
            ),
            stacklevel=4,
        )
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
        pyramid.alignment_step(chunk, geo.pyramid.step(0)) if geo.pyramid is not None else (1, 1, 1)
    )
    if options.shard_shape is not None:
        shard = tuple(int(s) for s in options.shard_shape)
        if len(shard) != 3 or any(s <= 0 or s % c for s, c in zip(shard, chunk, strict=True)):
            raise OptionError(
                "{shard_shape} must be a positive multiple of the "
                f"chunk size {xyz(chunk)} in every axis (x,y,z)",
                shard_shape=shard,
            )
        box = pyramid.triple(s // c for s, c in zip(shard, chunk, strict=True))
    else:
        max_chunks, _ = pyramid.box_limits(geo.pyramid, 0, options.memory_budget, chunk, raw_chunk)
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
            fill_value=np.zeros((), geo.dtype).item(),  # 0 of its kind: False, 0, 0.0, 0j
            dimension_names=tuple(axes),
            compressor=compressor,
            index_location=options.index_location or "end",
        )
    except ValueError as exc:
        raise within(exc, "cannot describe the zarr3 array: ") from exc
    epoch = geometry.epoch_shape(box, raw_chunk, geo.epoch_budget, step)
    return ConversionPlan(
        **geo.plan_fields(),
        encoded_ratio=ratio,
        sampled_absent=(absent.missing, absent.looked_at),
        shard_shape_chunks=box,
        scattered=False,
        epoch_shape_chunks=epoch,
        layout=Zarr3Layout(meta, axes, channels=channels, ome_group=options.zarr_layout != "array"),
    )


# -- levels added to an OME-Zarr group that exists (adding.py) --------------------
def levels_in_group(
    plan: ConversionPlan, group: dict[str, Any], dest: str, name: str, offset: int
) -> ConversionPlan:
    """A pyramid whose base is the group's coarsest dataset (`name` + `offset`: `s2`), its
    level arrays named on from it; refused where their axes would not be the group's."""
    layout = plan.layout
    assert isinstance(layout, Zarr3Layout)
    axes = [str(a.get("name")) for a in group["attributes"]["ome"]["multiscales"][0]["axes"]]
    if "".join(axes) != layout.axes:
        raise PlanError(
            f"{dest}: the group's axes are {','.join(axes)}; the levels shardwright writes "
            f"would be {','.join(layout.axes)}: it adds levels only where they are the same"
        )

    def renamed(level: ConversionPlan) -> ConversionPlan:
        assert isinstance(level.layout, Zarr3Layout)
        named = dataclasses.replace(level.layout, level=offset + level.level, level_name=name)
        return dataclasses.replace(level, layout=named)

    return dataclasses.replace(renamed(plan), upper=tuple(renamed(u) for u in plan.upper))


def group_with_levels(
    group: dict[str, Any], levels: ConversionPlan, replaced: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The group with a dataset per added level after its own (less those `replaced`), each
    with its scale and translation (every other member kept)."""
    layout = levels.layout
    assert isinstance(layout, Zarr3Layout)
    multiscale = dict(group["attributes"]["ome"]["multiscales"][0])
    added = []
    for k in range(1, levels.level_count):
        scale, shift = layout.transforms(levels, k)
        added.append(ome_zarr.added_dataset(levels.level_plan(k).layout.level_key, scale, shift))
    kept = [d for d in multiscale["datasets"] if str(d.get("path")) not in replaced]
    multiscale["datasets"] = [*kept, *added]
    ome = {**group["attributes"]["ome"]}
    ome["multiscales"] = [multiscale, *ome["multiscales"][1:]]
    return {**group, "attributes": {**group["attributes"], "ome": ome}}


def level_arrays(levels: ConversionPlan) -> list[Document]:
    """Each added level's array metadata (`k/zarr.json`), written before the group names it."""
    out: list[Document] = []
    for k in range(1, levels.level_count):
        layout = levels.level_plan(k).layout
        assert isinstance(layout, Zarr3Layout)
        out.append((f"{layout.level_key}/zarr.json", layout.meta.to_json()))
    return out
