"""Zarr v2 levels added to an OME-Zarr 0.4 group (adding.py): one array per
level beside the group's, unsharded (Zarr v2 has no shards), each chunk one object that one
task writes.

An added level's task is one chunk of the new array: the smallest box of the level's chunks
that keeps downsampling blocks whole (one chunk, where the chunk size is a multiple of the
factor). The array takes the group's axes (`tczyx` as bioformats2raw writes them: its one time
point and every channel in each chunk), and the data type, compressor, fill value, order and
key separator of the array it is reduced from (`array.py`). The group's `.zattrs`
gains a dataset per level, its scale and translation derived from the coarsest dataset's own
by the group's rule (voxel centres lined up, as the format asks: level k's voxel 0 summarises
that dataset's voxels 0 .. f - 1; or every level at one origin, where its datasets are so).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from shardwright.common.vocabulary import OutputFormat
from shardwright.errors import NAMED, PlanError, within
from shardwright.formats.zarr2.array import Zarr2Array
from shardwright.formats.zarr3 import ome_zarr
from shardwright.formats.zarr3.layout import level_renamed, refuse_companions
from shardwright.planning import geometry, pyramid, sharding
from shardwright.planning.layout import ByteStage, Document, LevelGeometry
from shardwright.planning.pyramid import Triple
from shardwright.planning.volume import ConversionPlan
from shardwright.sources.ome import dataset_affine

if TYPE_CHECKING:
    from shardwright.options import ConvertOptions
    from shardwright.planning.geometry import Geometry

AXES = "tczyx"  # the axis names an OME-Zarr 0.4 group's arrays may have, at most one each


@dataclass(frozen=True)
class Zarr2Layout:
    """A Zarr v2 level: its array's metadata, the group's axes in array order and the channel
    count; the level's path is `level_name` + number + `level_suffix`, as in a zarr3 group."""

    array: Zarr2Array
    axes: str
    channels: int = 1
    level: int = 0
    level_name: str = ""
    level_suffix: str = ""

    format: ClassVar[str] = OutputFormat.ZARR2
    names_companions: ClassVar[bool] = False
    sharded: ClassVar[bool] = False
    records_unit: ClassVar[bool] = True

    @property
    def level_key(self) -> str:
        return f"{self.level_name}{self.level}{self.level_suffix}"

    @property
    def encodes_jpeg(self) -> bool:
        return False

    def gpu_refusal(self) -> str | None:
        return None  # the device reduces; each chunk object is encoded on the host

    def renamed(self, keys: dict[str, str]) -> Zarr2Layout:
        return level_renamed(self, self.level_key, keys)

    def byte_stage(self, compression_level: int | None) -> ByteStage:
        """Each chunk's compressor runs in `array.py`, on the whole chunk."""
        compressor = self.array.compressor
        return ByteStage(None if compressor is None else str(compressor.get("id")), None,
                         False, None)  # fmt: skip

    def along(self, xyz: tuple[int, ...] | list[int], channel: int, time: int) -> list[int]:
        """x, y, z values and the channel's and time's in the array's axis order (a 2-D
        image's arrays have no z: its one slice)."""
        lookup = {"x": xyz[0], "y": xyz[1], "z": xyz[2], "c": channel, "t": time}
        return [lookup[a] for a in self.axes]

    def in_array_order(self, block_xyzc: np.ndarray) -> np.ndarray:
        """A block [x, y, z, c] viewed in the array's axis order (an axis the array lacks,
        z of a 2-D image or c of one channel, has one element and is dropped; t is added)."""
        kept = [a for a in self.axes if a != "t"]
        lacking = [a for a in "xyzc" if a not in kept]
        view = np.transpose(block_xyzc, ["xyzc".index(a) for a in [*kept, *lacking]])
        view = view.reshape(view.shape[: len(kept)])
        return np.expand_dims(view, self.axes.index("t")) if "t" in self.axes else view

    def box_shard_keys(
        self, starts: np.ndarray, shard_shape: Triple, grid: Triple
    ) -> tuple[list[str], list[int | None]]:
        positions = starts // np.asarray(shard_shape)
        keys = [
            f"{self.level_key}/{self.array.chunk_key(self.along(p, 0, 0))}"
            for p in positions.tolist()
        ]
        return keys, [None] * len(keys)

    def scattered_shards(self) -> list[tuple[str, int]]:
        return []

    def scattered_chunk_coords(self, shard_number: int, grid: Triple) -> np.ndarray:
        raise PlanError("zarr v2 chunks are boxes of the grid, never hashed")

    def metadata_documents(self, plan: ConversionPlan) -> list[Document]:
        """Each level's `.zarray` (the group's `.zattrs` is the addition's to write)."""
        return [
            (f"{level.layout.level_key}/.zarray", _layout(level).array.to_json())
            for level in (plan.level_plan(k) for k in range(plan.level_count))
        ]

    def plan_level(self, options: ConvertOptions, geometry: LevelGeometry) -> tuple[Triple, Any]:
        """The level's task: the fewest chunks that keep downsampling blocks whole (one
        object of the array, whose chunk it is)."""
        box = tuple(min(s, g) for s, g in zip(geometry.step, geometry.grid, strict=True))
        chunk = [b * c for b, c in zip(box, geometry.chunk_size, strict=True)]
        array = self.array.sized(
            self.along(geometry.size, self.channels, 1), self.along(chunk, self.channels, 1)
        )
        return (box[0], box[1], box[2]), array

    def with_levels(self, parts: list[Any]) -> list[Zarr2Layout]:
        return [self] + [
            dataclasses.replace(self, array=array, level=k) for k, array in enumerate(parts, 1)
        ]

    def with_segment_properties(self, document: dict[str, Any]) -> Zarr2Layout:
        raise PlanError(
            "{segment_properties} are written for precomputed segmentations",
            segment_properties=NAMED,
        )

    def naming(self, names: dict[str, Any]) -> Zarr2Layout:
        refuse_companions()

    def describe(self, plan: ConversionPlan) -> dict[str, Any]:
        return {
            "zarr_axes": self.axes,
            "zarr_shape": list(self.array.shape),
            "zarr_chunk_shape": list(self.array.chunks),
            "zarr_compressor": self.array.compressor,
        }

    def describe_level(self) -> dict[str, Any]:
        return {}


def group_axes(zattrs: dict[str, Any]) -> str:
    """The axis names of an OME-Zarr 0.4 group's first multiscale, in array order."""
    axes = zattrs["multiscales"][0].get("axes") or []
    return "".join(str(a.get("name") if isinstance(a, dict) else a) for a in axes)


def xyz_of(axes: str, values: Any) -> Triple:
    """x, y, z of values given in array order (1 for an axis the array lacks)."""
    given = dict(zip(axes, [int(v) for v in values or ()], strict=False))
    return (given.get("x", 1), given.get("y", 1), given.get("z", 1))


def _layout(plan: ConversionPlan) -> Zarr2Layout:
    layout = plan.layout
    assert isinstance(layout, Zarr2Layout), "every level of a dataset has its format"
    return layout


def plan_volume(geo: Geometry, zarray: dict[str, Any], axes: str) -> ConversionPlan:
    """The plan whose base is the existing array `zarray` (read, never written) of a group
    whose axes are `axes`: the base's tasks are boxes the memory budget sizes, its levels'
    are those of `Zarr2Layout.plan_level`."""
    if sorted(axes) != sorted(set(axes)) or not set(axes) <= set(AXES) or "x" not in axes:
        raise PlanError(
            f"{geo.source.url}: the group's axes are {','.join(axes)}; shardwright adds "
            f"levels to groups whose axes are some of {','.join(AXES)}, each once"
        )
    try:
        template = Zarr2Array.like(zarray)
    except (ValueError, KeyError) as exc:
        raise within(exc, f"{geo.source.url}/.zarray: levels cannot be stored like it: ") from exc
    layout = Zarr2Layout(template, axes, channels=geo.num_channels)
    size = layout.along(geo.size, geo.num_channels, 1)
    if len(zarray.get("shape") or ()) != len(axes) or list(zarray["shape"]) != size:
        raise PlanError(
            f"{geo.source.url}/.zarray: its shape {zarray.get('shape')} is not the group's "
            f"axes {','.join(axes)} over {size}"
        )
    chunk, raw_chunk = geo.chunk_size, geo.raw_chunk_bytes
    budget = geo.options.memory_budget
    max_chunks, step = pyramid.box_limits(geo.pyramid, 0, budget, chunk, raw_chunk)
    box = sharding.zarr_box(geo.options, geo.grid_shape, raw_chunk, max_chunks, step)
    epoch = geometry.epoch_shape(box, raw_chunk, geo.epoch_budget, step)
    layout = dataclasses.replace(
        layout, array=template.sized(size, layout.along(chunk, geo.num_channels, 1))
    )
    return ConversionPlan(
        **geo.plan_fields(),
        encoded_ratio=1.0,
        sampled_absent=(0, 0),
        shard_shape_chunks=box,
        scattered=False,
        epoch_shape_chunks=epoch,
        layout=layout,
    )


# -- the levels named in the group's `.zattrs` (adding.py) ------------------------
def levels_in_group(plan: ConversionPlan, name: str, offset: int) -> ConversionPlan:
    """A pyramid whose base is the group's coarsest dataset (`name` + `offset`: `s2`), its
    level arrays named on from it."""

    def renamed(level: ConversionPlan) -> ConversionPlan:
        named = dataclasses.replace(_layout(level), level=offset + level.level, level_name=name)
        return dataclasses.replace(level, layout=named)

    return dataclasses.replace(renamed(plan), upper=tuple(renamed(u) for u in plan.upper))


def zattrs_with_levels(
    zattrs: dict[str, Any], levels: ConversionPlan, replaced: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The group's attributes with a dataset per added level after its own (less those
    `replaced`); every other member kept."""
    layout, pyr = _layout(levels), levels.pyramid
    assert pyr is not None
    multiscale = dict(zattrs["multiscales"][0])
    kept = [d for d in multiscale["datasets"] if str(d.get("path")) not in replaced]
    top_scale, top_shift = dataset_affine(kept[-1], len(layout.axes))
    centring = _centring(kept, layout.axes)
    total = [1, 1, 1]
    added = []
    for k in range(1, levels.level_count):
        total = [t * s for t, s in zip(total, pyr.step(k - 1), strict=True)]
        factor = layout.along(total, 1, 1)
        scale = [s * f for s, f in zip(top_scale, factor, strict=True)]
        shift = [o + (s - t) * centring for o, s, t in zip(top_shift, scale, top_scale,
                                                             strict=True)]  # fmt: skip
        added.append(ome_zarr.added_dataset(levels.level_plan(k).layout.level_key, scale, shift))
    multiscale["datasets"] = [*kept, *added]
    return {**zattrs, "multiscales": [multiscale, *zattrs["multiscales"][1:]]}


def level_arrays(levels: ConversionPlan) -> list[Document]:
    """Each added level's `.zarray`, written before the group names it."""
    return levels.layout.metadata_documents(levels)[1:]


def _centring(datasets: list[dict[str, Any]], axes: str) -> float:
    """The group's own rule for a level's translation: how far it moves per unit its scale
    grows, from its two coarsest datasets along the space axes that step between them (0.5:
    voxel centres line up, the format's rule, and what applies where the group does not
    say; 0: every level starts at the same point, as bioformats2raw writes them)."""
    if len(datasets) < 2:
        return 0.5
    pair = (dataset_affine(dataset, len(axes)) for dataset in datasets[-2:])
    (finer, finer_shift), (coarser, coarser_shift) = pair
    rules = {
        round((b - a) / (s - f), 9)
        for a, b, f, s, axis in zip(finer_shift, coarser_shift, finer, coarser, axes, strict=True)
        if axis in "xyz" and s != f
    }
    return rules.pop() if len(rules) == 1 else 0.5
