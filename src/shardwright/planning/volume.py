"""A volume's plan: what is decided before any byte is written, and what follows from it.

`ConversionPlan` holds a volume's geometry, its output format (`layout`: a `VolumeLayout`,
`planning/layout.py`; each format's own is in its folder of `formats/`), the shard and epoch
shapes and, for pyramids, the plans of the levels above; from them it derives the shard list
(a generator: a million shards are a few numbers, not a million objects), the epochs of a
shard, the memory a task needs, which tasks feed which between pyramid levels, and the
metadata documents. `builder.py` makes plans.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from shardwright.common import downsample
from shardwright.common.boxes import intersect
from shardwright.common.vocabulary import DatasetKind
from shardwright.planning import pyramid, report
from shardwright.planning.base import Plan
from shardwright.planning.geometry import Geometry
from shardwright.planning.pyramid import Box
from shardwright.sources import missing
from shardwright.sources.base import location_of

if TYPE_CHECKING:
    from shardwright.planning.layout import ByteStage, Document, VolumeLayout

# Box shards made per batch by `ConversionPlan.shards()`: arrays of this many rows at a time.
SHARD_BATCH = 4096


@dataclass(frozen=True)
class ShardTask:
    """One output object and the chunks (grid coordinates x, y, z) that go into it."""

    key: str
    chunk_start: tuple[int, int, int]
    chunk_stop: tuple[int, int, int]
    shard_number: int | None = None  # precomputed
    scattered: bool = False  # chunks are spread through the grid (non-box sharding)
    level: int = 0  # pyramid level (0: the base)

    @property
    def chunk_count(self) -> int:
        return math.prod(b - a for a, b in zip(self.chunk_start, self.chunk_stop, strict=True))


@dataclass(frozen=True, kw_only=True)
class ConversionPlan(Geometry):
    """A volume's conversion, decided (a `base.Plan`): its geometry, its output format and
    sharding (`layout`), shard and epoch shapes, and on the base of a pyramid the plans of
    the levels above."""

    encoded_ratio: float
    sampled_absent: tuple[int, int] = (0, 0)  # source chunks the sample found absent, of all
    shard_shape_chunks: tuple[int, int, int]  # box mode; for scattered shards: the whole grid
    scattered: bool
    epoch_shape_chunks: tuple[int, int, int]
    layout: VolumeLayout
    level: int = 0  # which pyramid level this plan describes (0: the base)
    upper: tuple[ConversionPlan, ...] = ()  # on the base plan: the plans of levels 1, 2, ...
    # False: the base is a level stored already (levels added in place), read to build the
    # levels above and never written.
    writes_base: bool = True
    # Meshes / skeletons converted in the same job (objects.ObjectPlan, --with-meshes,
    # --with-skeletons): each writes its own directory, info and manifest below DEST.
    companions: tuple[Plan, ...] = ()

    dataset: ClassVar[str] = DatasetKind.VOLUME
    preparing_unit: ClassVar[str] = "blocks"
    in_place: ClassVar[bool] = False
    spools: ClassVar[bool] = False
    holds_gil: ClassVar[bool] = False

    # -- geometry -------------------------------------------------------------------------------
    @property
    def format(self) -> str:
        """Its output format's name (a conversion's `--format`; `zarr2` for the levels added
        to an OME-Zarr 0.4 group)."""
        return self.layout.format

    @property
    def chunk_count(self) -> int:
        return math.prod(self.grid_shape)

    @property
    def shard_grid_shape(self) -> tuple[int, int, int]:
        return pyramid.triple(
            math.ceil(g / s) for g, s in zip(self.grid_shape, self.shard_shape_chunks, strict=True)
        )

    @property
    def shard_total(self) -> int:
        return sum(self.level_plan(k).shard_count for k in range(self.level_count))

    @property
    def preparing_tasks(self) -> int:
        return 0

    @property
    def shard_count(self) -> int:
        if self.scattered:
            return len(self.layout.scattered_shards())
        return math.prod(self.shard_grid_shape)

    @property
    def chunks_per_shard(self) -> int:
        return (
            math.prod(self.shard_shape_chunks)
            if not self.scattered
            else max(1, math.ceil(self.chunk_count / max(1, self.shard_count)))
        )

    @property
    def estimated_shard_bytes(self) -> int:
        return int(self.chunks_per_shard * self.raw_chunk_bytes * self.encoded_ratio)

    @property
    def epoch_bytes(self) -> int:
        return math.prod(self.epoch_shape_chunks) * self.raw_chunk_bytes

    @property
    def spool_budget(self) -> int:
        """Encoded bytes a shard task keeps in memory before spilling to local disk."""
        return self.options.budget.spool(pyramid=self.pyramid is not None)

    # -- what shard tasks encode with, resolved from the options ---------------------------
    @property
    def compression_level(self) -> int | None:
        """The byte codec's level (None: the codec's default)."""
        return self.options.compression_level

    @property
    def byte_stage(self) -> ByteStage:
        """What each encoded chunk's bytes go through before they are stored."""
        return self.layout.byte_stage(self.compression_level)

    @property
    def peak_task_bytes(self) -> int:
        """Modelled peak: one epoch read + its chunk copies + encoded chunks held in memory.

        Pyramid tasks also hold their reduced output for the next level and a reduction slab;
        an upper-level task holds its region twice (inputs and assembled) instead of epochs.
        """
        held = min(self.estimated_shard_bytes, self.spool_budget)
        if self.pyramid is None:
            return 2 * self.epoch_bytes + held
        unit = self.epoch_bytes if self.level == 0 else self.region_bytes
        reduce = 3 * min(self.reduce_slab_bytes, unit) if self.image_bytes else 0
        return 2 * unit + held + self.image_bytes + reduce

    @property
    def source_url(self) -> str | None:
        return location_of(self.source)

    @property
    def source_bytes(self) -> int:
        """Raw bytes of the source volume (what the job reads)."""
        return math.prod(self.size) * self.num_channels * self.dtype.itemsize

    def for_shard_tasks(self) -> ConversionPlan:
        """The plan each shard task receives: companions run their own tasks."""
        return dataclasses.replace(self, companions=())

    # -- pyramid levels -------------------------------------------------------------------------
    @property
    def level_count(self) -> int:
        return 1 if self.pyramid is None else self.pyramid.levels

    def level_plan(self, level: int) -> ConversionPlan:
        """The plan of one pyramid level (call it on the base plan; level 0 is the base)."""
        if level == self.level:
            return self
        if self.level != 0 or not 0 < level <= len(self.upper):
            raise IndexError(f"no pyramid level {level} in a plan of {self.level_count} level(s)")
        return self.upper[level - 1]

    @property
    def region_bytes(self) -> int:
        """Raw bytes of this level's largest shard region."""
        return self.chunks_per_shard * self.raw_chunk_bytes

    @property
    def image_bytes(self) -> int:
        """Raw bytes a shard task of this level hands to the next level (0 at the top)."""
        if self.pyramid is None or self.level + 1 >= self.pyramid.levels:
            return 0
        extent = [
            min(b * c, s)
            for b, c, s in zip(self.shard_shape_chunks, self.chunk_size, self.size, strict=True)
        ]
        reduced = downsample.reduced_shape(tuple(extent), self.pyramid.step(self.level))
        return math.prod(reduced) * self.num_channels * self.dtype.itemsize

    @property
    def reduce_slab_bytes(self) -> int:
        if self.pyramid is None:
            return 0
        return self.options.budget.reduction_slab()

    def voxel_box(self, task: ShardTask) -> Box:
        """[start, stop) voxels of a box shard of this level, truncated at the volume's end."""
        start = tuple(a * c for a, c in zip(task.chunk_start, self.chunk_size, strict=True))
        stop = tuple(
            min(b * c, s)
            for b, c, s in zip(task.chunk_stop, self.chunk_size, self.size, strict=True)
        )
        return pyramid.triple(start), pyramid.triple(stop)

    def tasks_overlapping(self, box: Box) -> list[ShardTask]:
        """This level's box shards that hold any voxel of `box`."""
        shard_ranges = []
        for d in range(3):
            chunk, step = self.chunk_size[d], self.shard_shape_chunks[d]
            first_chunk, end_chunk = box[0][d] // chunk, -(-box[1][d] // chunk)
            first, end = first_chunk // step, -(-end_chunk // step)
            shard_ranges.append(range(first * step, min(end * step, self.grid_shape[d]), step))
        starts = [(x0, y0, z0) for z0, y0, x0 in itertools.product(*reversed(shard_ranges))]
        return self._box_tasks(np.array(starts, dtype=np.int64).reshape(-1, 3))

    def producers(self, task: ShardTask) -> list[ShardTask]:
        """The tasks of the level below whose reduced voxels make up `task`'s region."""
        if task.level == 0:
            return []
        assert self.pyramid is not None
        here, below = self.level_plan(task.level), self.level_plan(task.level - 1)
        region = pyramid.preimage(here.voxel_box(task), self.pyramid.step(below.level), below.size)
        return below.tasks_overlapping(region)

    def consumers(self, task: ShardTask) -> list[tuple[ShardTask, Box]]:
        """The tasks of the level above, each with the part of `task`'s reduced voxels it
        takes (in the level above's voxels)."""
        if self.pyramid is None or task.level + 1 >= self.pyramid.levels:
            return []
        return self.takers(task.level, self.level_plan(task.level).voxel_box(task))

    def takers(self, level: int, box: Box) -> list[tuple[ShardTask, Box]]:
        """The tasks of the level above `level` that take a part of `box`'s reduced voxels
        (`box`: a block-aligned box of `level`'s voxels), each with that part (in the level
        above's voxels): a shard task's consumers, or an addition's block group's."""
        assert self.pyramid is not None
        above = self.level_plan(level + 1)
        reduced = pyramid.image(box, self.pyramid.step(level))
        out = []
        for other in above.tasks_overlapping(reduced):
            part = intersect(reduced, above.voxel_box(other))
            assert part is not None
            out.append((other, part))
        return out

    def metadata_document(self) -> Document:
        """The dataset's metadata object: (key, JSON), `info` or `zarr.json`."""
        return self.metadata_documents()[-1]

    def metadata_documents(self) -> list[Document]:
        """Every metadata object, the root one last (`info`; zarr3: each level's array and the
        OME-Zarr group, or the one array)."""
        return self.layout.metadata_documents(self)

    # -- shards ---------------------------------------------------------------------------------
    def shards(self) -> Iterator[ShardTask]:
        """Every non-empty shard, generated lazily in a fixed order (z outermost, x fastest).

        Box shards are made in batches: their starts, stops, shard numbers and keys are
        computed as arrays, a batch at a time (a million shards: a few seconds, in bounded
        memory)."""
        if self.scattered:
            yield from self._scattered_shards()
            return
        counts = self.shard_grid_shape
        total = math.prod(counts)
        for first in range(0, total, SHARD_BATCH):
            flat = np.arange(first, min(first + SHARD_BATCH, total), dtype=np.int64)
            # Shard-grid coordinates of each flat index, x fastest (C order over z, y, x).
            cells = np.stack(np.unravel_index(flat, counts[::-1])[::-1], axis=1)
            yield from self._box_tasks(cells * np.asarray(self.shard_shape_chunks))

    def _box_tasks(self, starts: np.ndarray) -> list[ShardTask]:
        """The box shards whose first chunks are the rows of `starts` ((N, 3), x, y, z: each a
        multiple of the shard shape)."""
        stops = np.minimum(starts + np.asarray(self.shard_shape_chunks), self.grid_shape)
        keys, numbers = self.layout.box_shard_keys(starts, self.shard_shape_chunks, self.grid_shape)
        return [
            ShardTask(key, (a, b, c), (x, y, z), shard_number=number, level=self.level)
            for key, (a, b, c), (x, y, z), number in zip(
                keys, starts.tolist(), stops.tolist(), numbers, strict=True
            )
        ]

    def _scattered_shards(self) -> Iterator[ShardTask]:
        for key, number in self.layout.scattered_shards():
            yield ShardTask(key, (0, 0, 0), self.grid_shape, shard_number=number, scattered=True)

    def scattered_chunk_coords(self, shard_number: int) -> np.ndarray:
        """(N, 3) grid coordinates of the chunks of one scattered shard."""
        return self.layout.scattered_chunk_coords(shard_number, self.grid_shape)

    # -- epochs ---------------------------------------------------------------------------------
    def epochs(self, task: ShardTask) -> Iterator[Box]:
        """Chunk-grid boxes tiling a box shard, each within the epoch budget (z outermost)."""
        step = self.epoch_shape_chunks
        ranges = [
            range(a, b, s) for a, b, s in zip(task.chunk_start, task.chunk_stop, step, strict=True)
        ]
        for z0, y0, x0 in itertools.product(ranges[2], ranges[1], ranges[0]):
            start = (x0, y0, z0)
            stop = tuple(
                min(a + s, b) for a, s, b in zip(start, step, task.chunk_stop, strict=True)
            )
            yield start, pyramid.triple(stop)

    # -- report ---------------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.source.url,
            "source_axes": self.source.axes,  # how it was read: `view SRC DEST` reads it so
            "source_scale": self.options.source_scale,  # and `verify --against SRC` too
            "destination": self.dest,
            "format": self.format,
            "layer_type": self.layer_type,
            "data_type": self.dtype.name,
            "channels": self.num_channels,
            "size_xyz": list(self.size),
            "resolution_xyz": _numbers(self.resolution),
            "voxel_offset_xyz": list(self.voxel_offset),
            "placement": self.placed.to_json(),
            "chunk_size_xyz": list(self.chunk_size),
            "grid_xyz": list(self.grid_shape),
            "chunks": self.chunk_count,
            "encoded_ratio_sampled": round(self.encoded_ratio, 4),
            "source_chunks_absent_sampled": list(self.sampled_absent),
            "shard_shape_chunks_xyz": None if self.scattered else list(self.shard_shape_chunks),
            "shards": self.shard_count,
            "chunks_per_shard": self.chunks_per_shard,
            "estimated_bytes_per_shard": self.estimated_shard_bytes,
            "epoch_shape_chunks_xyz": list(self.epoch_shape_chunks),
            "memory_budget_per_task": self.options.memory_budget,
            "estimated_peak_bytes_per_task": self.peak_task_bytes,
        }
        out |= self.layout.describe(self)
        if self.pyramid is not None and self.level == 0:
            out["pyramid"] = self.pyramid.to_json()
            out["levels"] = [self.level_plan(k).describe_level() for k in range(self.level_count)]
        if self.companions:
            out["companions"] = [companion.describe() for companion in self.companions]
        return out

    def describe_level(self) -> dict[str, Any]:
        """One pyramid level: geometry, sharding and memory (a row of the plan report)."""
        out: dict[str, Any] = {
            "level": self.level,
            "key": self.layout.level_key,
            "size_xyz": list(self.size),
            "chunk_size_xyz": list(self.chunk_size),
            "resolution_xyz": _numbers(self.resolution),
            "voxel_offset_xyz": list(self.voxel_offset),
            "shard_shape_chunks_xyz": list(self.shard_shape_chunks),
            "shards": self.shard_count,
            "chunks_per_shard": self.chunks_per_shard,
            "estimated_bytes_per_shard": self.estimated_shard_bytes,
            "handed_up_bytes_per_task": self.image_bytes,
            "estimated_peak_bytes_per_task": self.peak_task_bytes,
        }
        return out | self.layout.describe_level()

    def report(self) -> str:
        return report.volume_report(
            self.describe(),
            self.epoch_bytes,
            [c.report() for c in self.companions],
            missing.fill_of(self.source),
            self.placed.unit if self.layout.records_unit else "nanometer",
        )


def _numbers(values: tuple[float, ...]) -> list[int | float]:
    """Whole numbers as integers (`4`, not `4.0`), as the metadata writes them."""
    return [int(v) if float(v).is_integer() else v for v in values]
