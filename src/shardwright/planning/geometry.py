"""The geometry every volume plan starts from, and the arithmetic on it.

`Geometry` is what is decided about a volume before sharding: the source and destination,
the options, layer type, data type, channels, size, chunk size, offset, resolution and the
pyramid asked for. The sharding choice (`sharding.py`) and the plan builders (`builder.py`,
`levels.py`) read it; `ConversionPlan` extends it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from shardwright.errors import PlanError
from shardwright.options import ConvertOptions
from shardwright.planning.pyramid import Pyramid, Triple
from shardwright.planning.text import xyz
from shardwright.sources import Source, SourceHints
from shardwright.sources.units import NANOMETER

DEFAULT_CHUNK: Triple = (64, 64, 64)
OPTION = "option"  # a voxel size or offset given with --resolution / --voxel-offset
DEFAULT = "default"  # none given, none recorded: 1 nm, offset 0


@dataclass(frozen=True)
class Placed:
    """Where a volume's voxel size and offset came from (OPTION, DEFAULT, or the source's
    metadata that recorded them: "OME-Zarr 0.4 dataset '0'"), the length unit OME-Zarr
    output writes them in (the source's own where it named one), and the fraction of a voxel
    OME-Zarr output adds to the offset (a coarser dataset of a source's centred pyramid)."""

    resolution_from: str = DEFAULT
    voxel_offset_from: str = DEFAULT
    unit: str = NANOMETER
    subvoxel_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)  # SourceHints'
    # The source's own values and the metadata that recorded them, beside any an option
    # replaced: what the plan prints and the manifest keeps next to the override.
    source_resolution: tuple[float, float, float] | None = None
    source_voxel_offset: tuple[int, int, int] | None = None
    source_placed_by: str | None = None

    @classmethod
    def of(cls, hints: SourceHints, resolution_from: str, voxel_offset_from: str) -> Placed:
        """What the source's `hints` leave to the output once each value's origin is known:
        its unit unless the voxel size was given (in nm), its sub-voxel offset only where
        both voxel size and offset are the source's own."""
        given = OPTION in (resolution_from, voxel_offset_from)
        return cls(
            resolution_from=resolution_from,
            voxel_offset_from=voxel_offset_from,
            unit=hints.unit if hints.unit is not None and resolution_from != OPTION else NANOMETER,
            subvoxel_offset=(None if given else hints.subvoxel_offset) or (0.0, 0.0, 0.0),
            source_resolution=hints.resolution,
            source_voxel_offset=hints.voxel_offset,
            source_placed_by=hints.placed_by,
        )

    def to_json(self) -> dict[str, Any]:
        """Where each value came from; beside a value an option replaced, the source's."""
        out: dict[str, Any] = {
            "resolution_from": self.resolution_from,
            "voxel_offset_from": self.voxel_offset_from,
            "unit": self.unit,
            "subvoxel_offset_xyz": list(self.subvoxel_offset),
        }
        for field, own, where in (
            ("resolution", self.source_resolution, self.resolution_from),
            ("voxel_offset", self.source_voxel_offset, self.voxel_offset_from),
        ):
            if where == OPTION and own is not None:
                out[f"source_{field}_xyz"] = [int(v) if float(v).is_integer() else v for v in own]
                out["source_placed_by"] = self.source_placed_by
        return out


@dataclass(frozen=True)
class Geometry:
    """A volume's layout, decided from the source and the options (x, y, z order)."""

    source: Source
    dest: str
    options: ConvertOptions
    layer_type: str
    dtype: np.dtype
    num_channels: int
    size: Triple
    chunk_size: Triple
    voxel_offset: Triple
    resolution: tuple[float, float, float]
    pyramid: Pyramid | None = None  # None: a single level, written exactly as without pyramids
    placed: Placed = Placed()

    @property
    def grid_shape(self) -> Triple:
        """Chunks per axis."""
        x, y, z = (math.ceil(s / c) for s, c in zip(self.size, self.chunk_size, strict=True))
        return (x, y, z)

    @property
    def raw_chunk_bytes(self) -> int:
        return math.prod(self.chunk_size) * self.num_channels * self.dtype.itemsize

    @property
    def epoch_budget(self) -> int:
        """Raw bytes of one epoch: a quarter of the budget, an eighth with pyramids (whose
        tasks also hold reduced output and a reduction slab)."""
        return self.options.budget.epoch(pyramid=self.pyramid is not None)

    def plan_fields(self) -> dict[str, Any]:
        """The fields as keyword arguments, for the `ConversionPlan` that extends them."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def chunk_size(requested: tuple[int, int, int] | None, size: tuple[int, ...]) -> Triple:
    """The chunk size asked for, checked against the volume; by default 64^3 clipped to it."""
    if requested is None:
        x, y, z = (min(c, s) for c, s in zip(DEFAULT_CHUNK, size, strict=True))
        return (x, y, z)
    if len(requested) != 3 or any(int(c) <= 0 for c in requested):
        raise PlanError(f"chunk size must be three positive integers x,y,z, got {requested}")
    if any(c > s for c, s in zip(requested, size, strict=True)):
        raise PlanError(
            f"chunk size {xyz(requested)} does not fit the volume size {xyz(size)} (x,y,z)"
        )
    return (int(requested[0]), int(requested[1]), int(requested[2]))


def epoch_shape(
    shard_chunks: tuple[int, ...],
    raw_chunk: int,
    budget: int,
    step: Triple = (1, 1, 1),
) -> Triple:
    """Largest sub-box of a shard (in chunks) whose raw bytes fit the epoch budget.

    Splits z first, then y, then x: a C-order (z, y, x) source reads whole z-slabs
    contiguously. Extents stay multiples of `step` (pyramids: whole downsampling blocks).
    """
    shape = list(shard_chunks)
    for dim in (2, 1, 0):
        while shape[dim] > step[dim] and math.prod(shape) * raw_chunk > budget:
            shape[dim] = max(step[dim], math.ceil(shape[dim] / 2 / step[dim]) * step[dim])
    return (shape[0], shape[1], shape[2])


def output_axes(source_axes: str, num_channels: int) -> str:
    """Zarr output's axes, as OME-Zarr 0.5 orders them: a channel axis first where there are
    channels, then the space axes in the source's order (a time point and a single channel
    are no axes of a volume; a 2-D image's one slice is a z axis before them)."""
    space = "".join(a for a in source_axes if a in "xyz")
    space = space if "z" in space else "z" + space
    return "c" + space if num_channels > 1 else space


T = TypeVar("T")


def to_axes(values_xyz: Sequence[T], channel_value: T, axes: str) -> tuple[T, ...]:
    """x, y, z values (and one for c) in the order of a zarr array's `axes` (`"zyx"`,
    `"czyx"`, ...): a shape, a chunk shape, a chunk's position, a scale. The one place the
    output's axis order is applied to values."""
    lookup = {"x": values_xyz[0], "y": values_xyz[1], "z": values_xyz[2], "c": channel_value}
    return tuple(lookup[a] for a in axes)


def to_zarr_order(block_xyzc: np.ndarray, axes: str) -> np.ndarray:
    """View an [x, y, z, c] block in the zarr output's axis order (c dropped when absent)."""
    if "c" not in axes:
        return np.transpose(block_xyzc[..., 0], tuple("xyz".index(a) for a in axes))
    return np.transpose(block_xyzc, tuple("xyzc".index(a) for a in axes))
