"""Decide a conversion before any byte is written: geometry, sharding, shards, memory.

Sharding is sized by *encoded* bytes (a few chunks are sampled and encoded), within a per-task
memory budget. Precomputed volumes use the identity hash with enough preshift + minishard bits
that every shard is a spatial box of chunks (2**a x 2**b x 2**c, the low bits of the compressed
Morton code), so a shard task reads one box. Other sharding choices still work: their shards are
"scattered" and the task reads chunk by chunk. The shard list is a generator: a plan with a
million shards holds a few numbers, not a million objects.

Pyramids (`--mips`): every level is planned like the base (chunk size clipped to the level,
sharding chosen per level), with shard and epoch boxes on whole downsampling blocks so each task
reduces its own voxels exactly, and sized so that what a task hands to the next level fits the
budget. The base plan carries the upper levels' plans (`level_plan(k)`), and says which tasks
feed which (`producers`, `consumers`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwright import checks, downsample, pyramid
from shardwright.codecs import byte_codec
from shardwright.errors import PlanError
from shardwright.formats import ome_zarr
from shardwright.formats.morton import compressed_morton_code, grid_bits, morton_bit_dims
from shardwright.formats.precomputed_info import PrecomputedInfo, PrecomputedScale
from shardwright.formats.sharding import ShardingSpec
from shardwright.formats.zarr3_codecs import Compressor
from shardwright.formats.zarr3_metadata import ZarrArrayMetadata
from shardwright.options import ConvertOptions
from shardwright.pyramid import Pyramid
from shardwright.sources import Source, open_source

DEFAULT_CHUNK = (64, 64, 64)
# Index sizes readers fetch cheaply (ARCHITECTURE: minishard index <~ 32 KiB, shard index
# <~ 8 KiB): at most 2**10 chunks per minishard (24 KiB) and 2**9 minishards (8 KiB).
MAX_PRESHIFT = 10
MAX_MINISHARD = 9
SAMPLE_CHUNKS = 6
# Pyramid memory shares of the per-task budget: what a base task hands to the next level
# (1/4), the region an upper-level task holds (1/8, held twice: its inputs and the assembled
# region), the slab a reduction works on (1/32, at most 2 MiB: cache-sized slabs reduce
# fastest; mode sorts a copy of it).
PYRAMID_IMAGE_SHARE = 4
PYRAMID_REGION_SHARE = 8
REDUCE_SLAB_SHARE = 32
REDUCE_SLAB_MAX = 2 * 1024**2


Box = tuple[tuple[int, int, int], tuple[int, int, int]]


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


@dataclass(frozen=True)
class ConversionPlan:
    source: Source
    dest: str
    options: ConvertOptions
    layer_type: str
    dtype: np.dtype
    num_channels: int
    size: tuple[int, int, int]
    chunk_size: tuple[int, int, int]
    voxel_offset: tuple[int, int, int]
    resolution: tuple[float, float, float]
    encoded_ratio: float
    shard_shape_chunks: tuple[int, int, int]  # box mode; for scattered shards: the whole grid
    scattered: bool
    epoch_shape_chunks: tuple[int, int, int]
    info: PrecomputedInfo | None = None
    zarr: ZarrArrayMetadata | None = None
    level: int = 0  # which pyramid level this plan describes (0: the base)
    pyramid: Pyramid | None = None  # None: a single level, written exactly as without pyramids
    upper: tuple[ConversionPlan, ...] = ()  # on the base plan: the plans of levels 1, 2, ...
    # Meshes / skeletons converted in the same job (objects.ObjectPlan, --with-meshes,
    # --with-skeletons): each writes its own directory, info and manifest below DEST.
    companions: tuple[Any, ...] = ()

    # -- geometry -------------------------------------------------------------------------------
    @property
    def format(self) -> str:
        return self.options.format

    @property
    def scale(self) -> PrecomputedScale:
        assert self.info is not None
        return self.info.scales[self.level]

    @property
    def sharding(self) -> ShardingSpec:
        spec = self.scale.sharding
        assert spec is not None
        return spec

    @property
    def grid_shape(self) -> tuple[int, int, int]:
        return tuple(math.ceil(s / c) for s, c in zip(self.size, self.chunk_size, strict=True))  # type: ignore[return-value]

    @property
    def chunk_count(self) -> int:
        return math.prod(self.grid_shape)

    @property
    def raw_chunk_bytes(self) -> int:
        return math.prod(self.chunk_size) * self.num_channels * self.dtype.itemsize

    @property
    def shard_grid_shape(self) -> tuple[int, int, int]:
        return tuple(
            math.ceil(g / s)
            for g, s in zip(
                self.grid_shape,
                self.shard_shape_chunks,  # type: ignore[return-value]
                strict=True,
            )
        )

    @property
    def shard_count(self) -> int:
        if self.scattered:
            return len(self._scattered_shard_numbers_present)
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
        return self.options.memory_budget // (2 if self.pyramid is None else 4)

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
        reduced = downsample.reduced_shape(tuple(extent), self.pyramid.factor)
        return math.prod(reduced) * self.num_channels * self.dtype.itemsize

    @property
    def reduce_slab_bytes(self) -> int:
        if self.pyramid is None:
            return 0
        return min(self.options.memory_budget // REDUCE_SLAB_SHARE, REDUCE_SLAB_MAX)

    def voxel_box(self, task: ShardTask) -> Box:
        """[start, stop) voxels of a box shard of this level, truncated at the volume's end."""
        start = tuple(a * c for a, c in zip(task.chunk_start, self.chunk_size, strict=True))
        stop = tuple(
            min(b * c, s)
            for b, c, s in zip(task.chunk_stop, self.chunk_size, self.size, strict=True)
        )
        return start, stop  # type: ignore[return-value]

    def tasks_overlapping(self, box: Box) -> list[ShardTask]:
        """This level's box shards that hold any voxel of `box`."""
        shard_ranges = []
        for d in range(3):
            chunk, step = self.chunk_size[d], self.shard_shape_chunks[d]
            first_chunk, end_chunk = box[0][d] // chunk, -(-box[1][d] // chunk)
            first, end = first_chunk // step, -(-end_chunk // step)
            shard_ranges.append(range(first * step, min(end * step, self.grid_shape[d]), step))
        return [
            self._box_task((x0, y0, z0))
            for z0, y0, x0 in itertools.product(*reversed(shard_ranges))
        ]

    def producers(self, task: ShardTask) -> list[ShardTask]:
        """The tasks of the level below whose reduced voxels make up `task`'s region."""
        if task.level == 0:
            return []
        assert self.pyramid is not None
        here, below = self.level_plan(task.level), self.level_plan(task.level - 1)
        region = pyramid.preimage(here.voxel_box(task), self.pyramid.factor, below.size)
        return below.tasks_overlapping(region)

    def consumers(self, task: ShardTask) -> list[tuple[ShardTask, Box]]:
        """The tasks of the level above, each with the part of `task`'s reduced voxels it
        takes (in the level above's voxels)."""
        if self.pyramid is None or task.level + 1 >= self.pyramid.levels:
            return []
        here, above = self.level_plan(task.level), self.level_plan(task.level + 1)
        reduced = pyramid.image(here.voxel_box(task), self.pyramid.factor)
        out = []
        for other in above.tasks_overlapping(reduced):
            part = pyramid.intersect(reduced, above.voxel_box(other))
            assert part is not None
            out.append((other, part))
        return out

    @property
    def scale_prefix(self) -> str:
        return f"{self.scale.key}/" if self.info is not None else ""

    def metadata_document(self) -> tuple[str, dict[str, Any]]:
        """The dataset's metadata object: (key, JSON), `info` or `zarr.json`."""
        return self.metadata_documents()[-1]

    def metadata_documents(self) -> list[tuple[str, dict[str, Any]]]:
        """Every metadata object, the root one last: `info`; `zarr.json`; or, for a zarr3
        pyramid, each level's `k/zarr.json` and the OME-Zarr multiscales group `zarr.json`."""
        if self.info is not None:
            return [("info", self.info.to_json())]
        assert self.zarr is not None
        if self.pyramid is None:
            return [("zarr.json", self.zarr.to_json())]
        docs: list[tuple[str, dict[str, Any]]] = []
        datasets = []
        for k in range(self.level_count):
            level = self.level_plan(k)
            assert level.zarr is not None
            docs.append((f"{k}/zarr.json", level.zarr.to_json()))
            scale = dict(zip("xyz", level.resolution, strict=True), c=1.0)
            # Voxel centres: level k's voxel 0 averages base voxels 0 .. f**k - 1.
            shift = {
                a: o * r0 + (rk - r0) / 2
                for a, o, r0, rk in zip(
                    "xyz", self.voxel_offset, self.resolution, level.resolution, strict=True
                )
            }
            shift["c"] = 0.0
            axes = self.zarr_axes
            datasets.append((str(k), [scale[a] for a in axes], [shift[a] for a in axes]))
        group = ome_zarr.multiscales_group(self.zarr_axes, datasets, method=self.pyramid.method)
        docs.append(("zarr.json", group))
        return docs

    # -- shards ---------------------------------------------------------------------------------
    def shards(self) -> Iterator[ShardTask]:
        """Every non-empty shard, generated lazily in a fixed order."""
        if self.scattered:
            yield from self._scattered_shards()
            return
        grid = self.grid_shape
        ranges = [range(0, g, s) for g, s in zip(grid, self.shard_shape_chunks, strict=True)]
        for z0 in ranges[2]:
            for y0 in ranges[1]:
                for x0 in ranges[0]:
                    yield self._box_task((x0, y0, z0))

    def _box_task(self, start: tuple[int, int, int]) -> ShardTask:
        """The box shard whose first chunk is `start` (a multiple of the shard shape)."""
        stop = tuple(
            min(a + s, g)
            for a, s, g in zip(start, self.shard_shape_chunks, self.grid_shape, strict=True)
        )
        number = self._box_shard_number(start)
        return ShardTask(
            self._box_key(start, number),
            start,
            stop,  # type: ignore[arg-type]
            shard_number=number,
            level=self.level,
        )

    def _box_shard_number(self, start: tuple[int, int, int]) -> int | None:
        """Precomputed: the shard number is the Morton code's bits above preshift+minishard."""
        if self.info is None:
            return None
        code = int(compressed_morton_code(np.array([start]), self.grid_shape)[0])
        spec = self.sharding
        return code >> (spec.preshift_bits + spec.minishard_bits)

    def _box_key(self, start: tuple[int, int, int], number: int | None) -> str:
        if number is not None:
            return self.scale_prefix + self.sharding.shard_filename(number)
        assert self.zarr is not None
        shard_xyz = [a // s for a, s in zip(start, self.shard_shape_chunks, strict=True)]
        return self.zarr_prefix + self.zarr.chunk_key(tuple(_to_axes(shard_xyz, 0, self.zarr_axes)))

    @property
    def zarr_prefix(self) -> str:
        """Where this level's zarr3 array lives in DEST: the root, or `k/` in a pyramid."""
        return "" if self.pyramid is None else f"{self.level}/"

    @property
    def zarr_axes(self) -> str:
        return _output_axes(self.source.axes, self.num_channels)

    @functools.cached_property
    def _scattered_shard_numbers_present(self) -> list[int]:
        """The hashed shards that hold at least one chunk (one vectorized scan, then kept)."""
        return self.scale.shard_numbers()

    def _scattered_shards(self) -> Iterator[ShardTask]:
        for number in self._scattered_shard_numbers_present:
            yield ShardTask(
                self.scale_prefix + self.sharding.shard_filename(number),
                (0, 0, 0),
                self.grid_shape,
                shard_number=number,
                scattered=True,
            )

    def scattered_chunk_coords(self, shard_number: int) -> np.ndarray:
        """(N, 3) grid coordinates of the chunks of one scattered shard."""
        grid = self.grid_shape
        found = []
        offset = 0
        for shard in self.scale.chunk_shard_numbers():
            hits = np.flatnonzero(shard == np.uint64(shard_number)) + offset
            found.append(np.stack(np.unravel_index(hits, grid, order="F"), axis=1))
            offset += shard.size
        return np.concatenate(found).astype(np.int64)

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
            yield start, stop  # type: ignore[misc]

    # -- report ---------------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source": self.source.url,
            "destination": self.dest,
            "format": self.format,
            "layer_type": self.layer_type,
            "data_type": self.dtype.name,
            "channels": self.num_channels,
            "size_xyz": list(self.size),
            "chunk_size_xyz": list(self.chunk_size),
            "grid_xyz": list(self.grid_shape),
            "chunks": self.chunk_count,
            "encoded_ratio_sampled": round(self.encoded_ratio, 4),
            "shard_shape_chunks_xyz": None if self.scattered else list(self.shard_shape_chunks),
            "shards": self.shard_count,
            "chunks_per_shard": self.chunks_per_shard,
            "estimated_bytes_per_shard": self.estimated_shard_bytes,
            "epoch_shape_chunks_xyz": list(self.epoch_shape_chunks),
            "memory_budget_per_task": self.options.memory_budget,
            "estimated_peak_bytes_per_task": self.peak_task_bytes,
        }
        if self.info is not None:
            spec = self.sharding
            out["scale_key"] = self.scale.key
            out["encoding"] = self.scale.encoding
            out["sharding"] = spec.to_json()
            out["shard_index_bytes"] = spec.shard_index_nbytes
            out["minishard_index_bytes"] = (
                24 * (1 << spec.preshift_bits) if not self.scattered else None
            )
        if self.zarr is not None:
            out["zarr_axes"] = self.zarr_axes
            out["zarr_shape"] = list(self.zarr.shape)
            out["zarr_shard_shape"] = list(self.zarr.shard_shape)
            out["zarr_chunk_shape"] = list(self.zarr.chunk_shape)
            out["shard_index_bytes"] = 16 * self.chunks_per_shard + 4
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
            "key": self.scale.key if self.info is not None else str(self.level),
            "size_xyz": list(self.size),
            "chunk_size_xyz": list(self.chunk_size),
            "resolution_xyz": [int(r) if float(r).is_integer() else r for r in self.resolution],
            "voxel_offset_xyz": list(self.voxel_offset),
            "shard_shape_chunks_xyz": list(self.shard_shape_chunks),
            "shards": self.shard_count,
            "chunks_per_shard": self.chunks_per_shard,
            "estimated_bytes_per_shard": self.estimated_shard_bytes,
            "handed_up_bytes_per_task": self.image_bytes,
            "estimated_peak_bytes_per_task": self.peak_task_bytes,
        }
        if self.info is not None:
            out["sharding"] = self.sharding.to_json()
        return out

    def report(self) -> str:
        d = self.describe()
        lines = [
            f"source       {d['source']}",
            f"destination  {d['destination']}  ({d['format']})",
            f"volume       {_xyz(d['size_xyz'])} voxels, {d['data_type']} x {d['channels']} "
            f"channel(s), {d['layer_type']}",
            f"chunks       {_xyz(d['chunk_size_xyz'])} voxels; grid {_xyz(d['grid_xyz'])} = "
            f"{d['chunks']:,} chunks; sampled encoded/raw ratio {d['encoded_ratio_sampled']}",
        ]
        if self.scattered:
            lines.append(
                f"shards       {d['shards']:,} hashed shards (chunks scattered in space), "
                f"~{d['chunks_per_shard']:,} chunks each"
            )
        else:
            lines.append(
                f"shards       {d['shards']:,} shards of "
                f"{_xyz(d['shard_shape_chunks_xyz'])} chunks "
                f"({d['chunks_per_shard']:,} chunks)"
            )
        lines.append(f"bytes/shard  ~{_bytes(d['estimated_bytes_per_shard'])} encoded")
        if self.info is not None:
            spec = self.sharding
            lines.append(
                f"sharding     {spec.hash}, preshift {spec.preshift_bits}, minishard "
                f"{spec.minishard_bits} ({spec.num_minishards} per shard), shard "
                f"{spec.shard_bits}; data {spec.data_encoding}, index "
                f"{spec.minishard_index_encoding}"
            )
            minishard = d["minishard_index_bytes"]
            lines.append(
                f"indexes      shard index {_bytes(d['shard_index_bytes'])}"
                + (f", minishard index <= {_bytes(minishard)}" if minishard else "")
            )
            lines.append(f"scale        {self.scale.key}, encoding {self.scale.encoding}")
        else:
            lines.append(
                f"zarr         axes {d['zarr_axes']}, shape {d['zarr_shape']}, shard "
                f"{d['zarr_shard_shape']}, chunk {d['zarr_chunk_shape']}; "
                f"shard index {_bytes(d['shard_index_bytes'])}"
            )
        if self.pyramid is not None and self.level == 0:
            lines.append(
                f"pyramid      {self.pyramid.levels} levels, factor {_xyz(self.pyramid.factor)}, "
                f"downsample {self.pyramid.method}; source read once, levels chained"
            )
            for row in d["levels"]:
                lines.append(
                    f"level {row['level']:<6} {row['key']}: {_xyz(row['size_xyz'])} voxels, "
                    f"chunk {_xyz(row['chunk_size_xyz'])}, {row['shards']:,} shard(s) of "
                    f"{_xyz(row['shard_shape_chunks_xyz'])} chunks, "
                    f"~{_bytes(row['estimated_bytes_per_shard'])}/shard, peak per task ~"
                    f"{_bytes(row['estimated_peak_bytes_per_task'])}"
                )
        lines.append(
            f"memory       epoch {_xyz(d['epoch_shape_chunks_xyz'])} chunks "
            f"({_bytes(self.epoch_bytes)}); peak per task ~"
            f"{_bytes(d['estimated_peak_bytes_per_task'])} of "
            f"{_bytes(d['memory_budget_per_task'])} budget"
        )
        for companion in self.companions:
            lines += ["", companion.report()]
        return "\n".join(lines)


def _xyz(values: Any) -> str:
    return " x ".join(str(v) for v in values)


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def _output_axes(source_axes: str, num_channels: int) -> str:
    """Zarr output keeps the source's axis order (a source without 'c' has one channel)."""
    if "c" not in source_axes and num_channels != 1:
        raise PlanError(f"source axes {source_axes!r} have no 'c' but {num_channels} channels")
    return source_axes


def _to_axes(xyz: Any, channel_value: int, axes: str) -> list[int]:
    lookup = {"x": xyz[0], "y": xyz[1], "z": xyz[2], "c": channel_value}
    return [lookup[a] for a in axes]


# -- planning ------------------------------------------------------------------------------------
def make_plan(
    source: str | Source, dest: str, options: ConvertOptions | None = None
) -> ConversionPlan:
    """Open the source, validate every choice and decide geometry and sharding."""
    checks.check_options_for_format(options or ConvertOptions())
    options = (options or ConvertOptions()).resolved()
    src = (
        source
        if not isinstance(source, str)
        else open_source(
            source,
            axes=options.source_axes,
            scale_key=options.source_scale,
            storage_options=options.source_storage_options,
        )
    )
    size = tuple(int(s) for s in src.shape_xyz)
    dtype = np.dtype(src.dtype)
    channels = int(src.num_channels)
    checks.check_size(size, src.url)
    layer_type = (
        options.layer_type
        or src.hints.layer_type
        or ("segmentation" if options.encoding == "compressed_segmentation" else "image")
    )
    if layer_type not in ("image", "segmentation"):
        raise PlanError(f"layer type must be image or segmentation, got {layer_type!r}")
    chunk = _chunk_size(options.chunk_size, size)
    resolution = tuple(float(r) for r in (options.resolution or src.hints.resolution or (1, 1, 1)))
    checks.check_resolution(resolution)
    offset = tuple(int(v) for v in (options.voxel_offset or src.hints.voxel_offset or (0, 0, 0)))
    checks.check_voxel_offset(offset, size)
    grid = tuple(math.ceil(s / c) for s, c in zip(size, chunk, strict=True))
    raw_chunk = math.prod(chunk) * channels * dtype.itemsize

    common: dict[str, Any] = dict(
        source=src,
        dest=dest,
        options=options,
        layer_type=layer_type,
        dtype=dtype,
        num_channels=channels,
        size=size,
        chunk_size=chunk,
        voxel_offset=offset,
        resolution=resolution,
    )
    levels = _pyramid_request(options, layer_type, dtype, size, chunk)  # type: ignore[arg-type]
    if levels is not None:
        common["pyramid"] = levels[0]
    if options.format == "precomputed":
        plan = _plan_precomputed(common, grid, raw_chunk)
    else:
        plan = _plan_zarr3(common, grid, raw_chunk)
    if levels is not None:
        plan = _add_levels(plan, levels[1])
    if options.engine == "gpu":
        from shardwright.engine.gpu import check_gpu_plan

        check_gpu_plan(plan)
    return plan


def _chunk_size(
    requested: tuple[int, int, int] | None, size: tuple[int, ...]
) -> tuple[int, int, int]:
    if requested is None:
        return tuple(min(c, s) for c, s in zip(DEFAULT_CHUNK, size, strict=True))  # type: ignore[return-value]
    if len(requested) != 3 or any(int(c) <= 0 for c in requested):
        raise PlanError(f"chunk size must be three positive integers x,y,z, got {requested}")
    if any(c > s for c, s in zip(requested, size, strict=True)):
        raise PlanError(
            f"chunk size {_xyz(requested)} does not fit the volume size {_xyz(size)} (x,y,z)"
        )
    return tuple(int(c) for c in requested)  # type: ignore[return-value]


def _epoch_shape(
    shard_chunks: tuple[int, ...],
    raw_chunk: int,
    budget: int,
    step: tuple[int, int, int] = (1, 1, 1),
) -> tuple[int, int, int]:
    """Largest sub-box of a shard (in chunks) whose raw bytes fit the epoch budget.

    Splits z first, then y, then x: a C-order (z, y, x) source reads whole z-slabs
    contiguously. Extents stay multiples of `step` (pyramids: whole downsampling blocks).
    """
    shape = list(shard_chunks)
    for dim in (2, 1, 0):
        while shape[dim] > step[dim] and math.prod(shape) * raw_chunk > budget:
            shape[dim] = max(step[dim], math.ceil(shape[dim] / 2 / step[dim]) * step[dim])
    return tuple(shape)  # type: ignore[return-value]


# -- pyramids ------------------------------------------------------------------------------------
def _pyramid_request(
    options: ConvertOptions,
    layer_type: str,
    dtype: np.dtype,
    size: tuple[int, int, int],
    chunk: tuple[int, int, int],
) -> tuple[Pyramid, list[tuple[int, int, int]]] | None:
    """The pyramid asked for (and every level's size), validated; None without --mips."""
    if options.mips in (None, 0):
        if options.factor is not None or options.downsample is not None:
            raise PlanError("--factor and --downsample shape a pyramid: add --mips N or auto")
        return None
    if options.hash not in (None, "identity"):
        raise PlanError(
            f"pyramids need spatial-box shards (identity hash), not {options.hash}: each "
            "shard task reduces its own box for the next level"
        )
    try:
        factor = downsample.check_factor(options.factor or (2, 2, 2))
        method = options.downsample or downsample.default_method(layer_type)
        downsample.check_method(method, dtype, layer_type)
        sizes = pyramid.level_sizes(size, factor, options.mips, chunk)
    except ValueError as exc:
        raise PlanError(str(exc)) from exc
    return Pyramid(factor, method, len(sizes)), sizes


def _pyramid_box_limits(
    plan_fields: dict[str, Any], chunk: tuple[int, int, int], raw_chunk: int, base: bool
) -> tuple[int | None, tuple[int, int, int]]:
    """(most chunks per shard, alignment step in chunks) for one level's shards.

    A base task's reduced output (1/prod(factor) of its region) and an upper task's region
    must fit their shares of the budget; shard extents stay whole downsampling blocks.
    """
    pyr: Pyramid | None = plan_fields.get("pyramid")
    if pyr is None:
        return None, (1, 1, 1)
    budget = plan_fields["options"].memory_budget
    if base:
        limit = math.prod(pyr.factor) * budget // PYRAMID_IMAGE_SHARE
    else:
        limit = budget // PYRAMID_REGION_SHARE
    return max(1, limit // raw_chunk), pyramid.alignment_step(chunk, pyr.factor)


def _check_aligned(level: int, box: tuple[int, ...], grid: tuple[int, ...], step: Any) -> None:
    if not pyramid.box_aligned(box, grid, step):
        raise PlanError(
            f"pyramid level {level}: shards of {_xyz(box)} chunks would split downsampling "
            f"blocks between shards; give shard sizes that are multiples of "
            f"{_xyz(step)} chunks (or use a chunk size divisible by the factor)"
        )


def _add_levels(base: ConversionPlan, sizes: list[tuple[int, int, int]]) -> ConversionPlan:
    """The base plan with the plans of every level above it (and, for precomputed, an `info`
    listing every scale)."""
    pyr = base.pyramid
    assert pyr is not None
    options = base.options
    budget = options.memory_budget
    if base.image_bytes > budget // 2:
        raise PlanError(
            f"pyramid level 0: shards hand {_bytes(base.image_bytes)} to the next level, more "
            f"than half the {_bytes(budget)} memory budget allows; use a chunk size divisible "
            "by the factor, smaller shards or a larger --memory-budget"
        )
    # Explicit sharding choices are for the base level; upper levels are planned here.
    auto = dataclasses.replace(
        options, preshift_bits=None, minishard_bits=None, shard_bits=None, shard_shape=None
    )
    fields: dict[str, Any] = {"pyramid": pyr, "options": options}
    levels: list[dict[str, Any]] = []
    for k in range(1, len(sizes)):
        size = sizes[k]
        chunk = pyramid.triple(min(c, s) for c, s in zip(base.chunk_size, size, strict=True))
        grid = tuple(math.ceil(s / c) for s, c in zip(size, chunk, strict=True))
        raw_chunk = math.prod(chunk) * base.num_channels * base.dtype.itemsize
        max_chunks, step = _pyramid_box_limits(fields, chunk, raw_chunk, base=False)
        if k + 1 == len(sizes):
            step = (1, 1, 1)  # the top level is not reduced further
        x, y, z = pyramid.level_resolution(base.resolution, pyr.factor, k)
        resolution = (x, y, z)
        level: dict[str, Any] = dict(
            level=k,
            size=size,
            chunk_size=chunk,
            resolution=resolution,
            voxel_offset=pyramid.level_offset(base.voxel_offset, pyr.factor, k),
        )
        if base.info is not None:
            spec, _, box = _choose_sharding(
                auto, grid, raw_chunk * base.encoded_ratio, base.sharding.data_encoding,
                max_chunks=max_chunks, step=step,
            )  # fmt: skip
            try:
                level["scale"] = dataclasses.replace(
                    base.scale,
                    key=pyramid.scale_key(resolution),
                    size=size,
                    resolution=resolution,
                    chunk_size=chunk,
                    voxel_offset=level["voxel_offset"],
                    sharding=spec,
                )
            except ValueError as exc:
                raise PlanError(f"pyramid level {k}: {exc}") from exc
        else:
            assert base.zarr is not None
            box = _zarr_box(auto, grid, raw_chunk * base.encoded_ratio, max_chunks, step)
            by_axis = dict(zip("xyz", size, strict=True), c=base.num_channels)
            by_chunk = dict(zip("xyz", chunk, strict=True), c=base.num_channels)
            by_shard = {a: b * c for a, b, c in zip("xyz", box, chunk, strict=True)}
            by_shard["c"] = base.num_channels
            axes = base.zarr_axes
            level["zarr"] = dataclasses.replace(
                base.zarr,
                shape=tuple(by_axis[a] for a in axes),
                shard_shape=tuple(by_shard[a] for a in axes),
                chunk_shape=tuple(by_chunk[a] for a in axes),
            )
        _check_aligned(k, box, grid, step)
        if math.prod(box) * raw_chunk > budget // 2:
            raise PlanError(
                f"pyramid level {k}: shards of {_xyz(box)} chunks "
                f"({_bytes(math.prod(box) * raw_chunk)}) are needed to keep downsampling "
                f"blocks whole, more than half the {_bytes(budget)} memory budget; use a chunk "
                "size divisible by the factor or a larger --memory-budget"
            )
        level["shard_shape_chunks"] = box
        level["epoch_shape_chunks"] = box  # an upper task holds its whole region
        levels.append(level)
    info = base.info
    if info is not None:
        try:
            info = dataclasses.replace(
                info, scales=(base.scale, *(level.pop("scale") for level in levels))
            )
        except ValueError as exc:
            raise PlanError(f"pyramid scales: {exc}") from exc
    upper = tuple(
        dataclasses.replace(base, info=info, scattered=False, upper=(), **level) for level in levels
    )
    return dataclasses.replace(base, info=info, upper=upper)


def _sample_ratio(
    src: Source, chunk: tuple[int, int, int], size: tuple[int, ...], encode: Any
) -> float:
    """Encoded/raw ratio over a few chunks spread through the volume (corners and centre).

    The samples are read and encoded concurrently: remote reads overlap instead of queueing,
    and the codecs, which release the GIL, share the cores.
    """
    grid = [math.ceil(s / c) for s, c in zip(size, chunk, strict=True)]
    picks = {tuple(g // 2 for g in grid), (0, 0, 0), tuple(g - 1 for g in grid)}
    rng = np.random.default_rng(0)
    while len(picks) < min(SAMPLE_CHUNKS, math.prod(grid)):
        picks.add(tuple(int(rng.integers(0, g)) for g in grid))

    def sample(cell: tuple[int, ...]) -> tuple[int, int]:
        start = tuple(g * c for g, c in zip(cell, chunk, strict=True))
        stop = tuple(min(a + c, s) for a, c, s in zip(start, chunk, size, strict=True))
        block = src.read(start, stop)  # type: ignore[arg-type]
        return block.nbytes, len(encode(block))

    with ThreadPoolExecutor(max_workers=len(picks)) as pool:
        sizes = list(pool.map(sample, sorted(picks)))
    raw = sum(r for r, _ in sizes)
    encoded = sum(e for _, e in sizes)
    return max(encoded / max(raw, 1), 1e-3)


def _scale_key(options: ConvertOptions, resolution: tuple[float, ...]) -> str:
    if options.scale_key is not None:
        checks.check_scale_key(options.scale_key)
        return options.scale_key
    return "_".join(str(int(r)) if float(r).is_integer() else str(r) for r in resolution)


def _plan_precomputed(
    common: dict[str, Any], grid: tuple[int, ...], raw_chunk: int
) -> ConversionPlan:
    options: ConvertOptions = common["options"]
    compression = options.compression or ("none" if options.encoding in ("jpeg", "png") else "gzip")
    if compression not in ("none", "gzip"):
        raise PlanError(f"precomputed supports --compression none or gzip, not {compression!r}")
    block = None
    if options.encoding == "compressed_segmentation":
        block = options.compressed_segmentation_block_size
    try:
        scale = PrecomputedScale(
            key=_scale_key(options, common["resolution"]),
            size=common["size"],
            resolution=common["resolution"],
            chunk_size=common["chunk_size"],
            encoding=options.encoding,
            voxel_offset=common["voxel_offset"],
            compressed_segmentation_block_size=block,
        )
    except (ValueError, TypeError) as exc:
        raise PlanError(str(exc)) from exc
    encoding = scale.chunk_encoding(options.jpeg_quality)
    encoding.check(common["dtype"], common["num_channels"], common["layer_type"])
    checks.check_layer_dtype(common["layer_type"], common["dtype"])
    gzip = byte_codec("gzip", level=options.compression_level) if compression == "gzip" else None

    def encode(block_xyzc: np.ndarray) -> bytes:
        data = encoding.encode(block_xyzc)
        return gzip.compress(data) if gzip else data

    ratio = _sample_ratio(common["source"], common["chunk_size"], common["size"], encode)
    max_chunks, step = _pyramid_box_limits(common, common["chunk_size"], raw_chunk, base=True)
    spec, scattered, box = _choose_sharding(
        options,
        grid,
        raw_chunk * ratio,
        "gzip" if gzip else "raw",
        max_chunks=max_chunks,
        step=step,
    )
    if "pyramid" in common:
        if scattered:
            raise PlanError(
                "pyramids need spatial-box shards (identity hash): these sharding bits "
                "scatter chunks across shards; drop --shard-bits or give more "
                "preshift + minishard bits"
            )
        _check_aligned(0, box, grid, step)
    scale = dataclasses.replace(scale, sharding=spec)
    info = PrecomputedInfo(
        type=common["layer_type"],
        data_type=common["dtype"].name,
        num_channels=common["num_channels"],
        scales=(scale,),
    )
    # Scattered shards are read chunk by chunk; box shards in epochs within the budget.
    epoch = (
        (1, 1, 1)
        if scattered
        else _epoch_shape(box, raw_chunk, _epoch_budget(options, common), step)
    )
    return ConversionPlan(
        **common,
        encoded_ratio=ratio,
        shard_shape_chunks=box,
        scattered=scattered,
        epoch_shape_chunks=epoch,
        info=info,
    )


def _epoch_budget(options: ConvertOptions, common: dict[str, Any]) -> int:
    """Raw bytes of one epoch: a quarter of the budget, an eighth with pyramids (whose tasks
    also hold reduced output and a reduction slab)."""
    return options.memory_budget // (8 if "pyramid" in common else 4)


def _choose_sharding(
    options: ConvertOptions,
    grid: tuple[int, ...],
    encoded_chunk: float,
    data_encoding: str,
    max_chunks: int | None = None,
    step: tuple[int, int, int] = (1, 1, 1),
) -> tuple[ShardingSpec, bool, tuple[int, int, int]]:
    """Sharding spec, whether shards are scattered, and the shard box in chunks.

    Pyramids pass `max_chunks` (what a task may hold) and `step` (box extents that keep
    downsampling blocks whole: the box grows until aligned, or spans the axis).
    """
    try:
        total = sum(grid_bits(grid))
    except ValueError as exc:
        raise PlanError(str(exc)) from exc
    dims = morton_bit_dims(grid)
    fit = int(math.floor(math.log2(max(options.target_shard_bytes / encoded_chunk, 1))))
    if max_chunks is not None:
        fit = min(fit, max(0, max_chunks.bit_length() - 1))
    parallel = total - math.ceil(math.log2(max(options.min_shards, 1)))
    p = max(0, min(fit, parallel, total, MAX_PRESHIFT + MAX_MINISHARD))
    while p < min(total, MAX_PRESHIFT + MAX_MINISHARD) and not pyramid.box_aligned(
        _morton_box(dims, p, grid), grid, step
    ):
        p += 1
    preshift = min(MAX_PRESHIFT, p // 2)
    minishard = p - preshift
    if minishard > MAX_MINISHARD:
        minishard, preshift = MAX_MINISHARD, p - MAX_MINISHARD
    if options.preshift_bits is not None:
        preshift = options.preshift_bits
    if options.minishard_bits is not None:
        minishard = options.minishard_bits
    low = min(preshift + minishard, total) if min(preshift, minishard) >= 0 else 0
    shard_bits = options.shard_bits if options.shard_bits is not None else total - low
    hash_name = options.hash or "identity"
    try:
        spec = ShardingSpec(
            preshift_bits=preshift,
            hash=hash_name,
            minishard_bits=minishard,
            shard_bits=shard_bits,
            minishard_index_encoding="gzip",
            data_encoding=data_encoding,
        )
    except ValueError as exc:
        raise PlanError(f"impossible sharding parameters: {exc}") from exc
    scattered = hash_name != "identity" or shard_bits < total - low
    return spec, scattered, _morton_box(dims, low, grid)


def _morton_box(dims: list[int], low: int, grid: tuple[int, ...]) -> tuple[int, int, int]:
    """The box of chunks sharing a compressed Morton code's bits above the lowest `low`."""
    box = [1, 1, 1]
    for dim in dims[:low]:
        box[dim] *= 2
    return tuple(min(b, g) for b, g in zip(box, grid, strict=True))  # type: ignore[return-value]


def _plan_zarr3(common: dict[str, Any], grid: tuple[int, ...], raw_chunk: int) -> ConversionPlan:
    options: ConvertOptions = common["options"]
    if options.encoding != "raw":
        raise PlanError(
            f"--encoding {options.encoding} is a precomputed chunk encoding; zarr3 "
            "output stores raw chunks with --compression none|gzip|zstd|blosc"
        )
    checks.check_layer_dtype(common["layer_type"], common["dtype"])
    compression = options.compression or "gzip"
    chunk = common["chunk_size"]
    src: Source = common["source"]
    axes = _output_axes(src.axes, common["num_channels"])
    compressor = _zarr_compressor(compression, options.compression_level)
    codec = compressor.codec(common["dtype"].itemsize) if compressor else None

    def encode(block_xyzc: np.ndarray) -> bytes:
        data = (
            to_zarr_order(block_xyzc, axes)
            .astype(block_xyzc.dtype.newbyteorder("<"), copy=False)
            .tobytes()
        )
        return codec.compress(data) if codec else data

    ratio = _sample_ratio(src, chunk, common["size"], encode)
    if options.shard_shape is not None:
        shard = tuple(int(s) for s in options.shard_shape)
        if len(shard) != 3 or any(s <= 0 or s % c for s, c in zip(shard, chunk, strict=True)):
            raise PlanError(
                f"--shard-shape {_xyz(shard)} must be a positive multiple of the "
                f"chunk size {_xyz(chunk)} in every axis (x,y,z)"
            )
        box = tuple(s // c for s, c in zip(shard, chunk, strict=True))
    else:
        max_chunks, step = _pyramid_box_limits(common, chunk, raw_chunk, base=True)
        box = _zarr_box(options, grid, raw_chunk * ratio, max_chunks, step)
    if "pyramid" in common:
        _check_aligned(0, box, grid, pyramid.alignment_step(chunk, common["pyramid"].factor))
    shard_voxels = tuple(b * c for b, c in zip(box, chunk, strict=True))
    lookup_shape = dict(zip("xyz", common["size"], strict=True), c=common["num_channels"])
    lookup_chunk = dict(zip("xyz", chunk, strict=True), c=common["num_channels"])
    lookup_shard = dict(zip("xyz", shard_voxels, strict=True), c=common["num_channels"])
    try:
        meta = ZarrArrayMetadata(
            shape=tuple(lookup_shape[a] for a in axes),
            data_type=common["dtype"].name,
            shard_shape=tuple(lookup_shard[a] for a in axes),
            chunk_shape=tuple(lookup_chunk[a] for a in axes),
            fill_value=0,
            dimension_names=tuple(axes),
            compressor=compressor,
            index_location=options.index_location or "end",
        )
    except ValueError as exc:
        raise PlanError(f"cannot describe the zarr3 array: {exc}") from exc
    step = (
        pyramid.alignment_step(chunk, common["pyramid"].factor)
        if "pyramid" in common
        else (1, 1, 1)
    )
    epoch = _epoch_shape(box, raw_chunk, _epoch_budget(options, common), step)
    return ConversionPlan(
        **common,
        encoded_ratio=ratio,
        shard_shape_chunks=box,
        scattered=False,
        epoch_shape_chunks=epoch,
        zarr=meta,
    )


def _zarr_box(
    options: ConvertOptions,
    grid: tuple[int, ...],
    encoded_chunk: float,
    max_chunks: int | None = None,
    step: tuple[int, int, int] = (1, 1, 1),
) -> tuple[int, int, int]:
    """Zarr3 shard shape in chunks: doubled axis by axis while shards stay under the target
    size (and `max_chunks`) and there are at least `min_shards`; then, for pyramids, grown
    until its extents keep downsampling blocks whole (multiples of `step`, or the axis)."""
    box_list = [1, 1, 1]
    grown = True
    while grown:
        grown = False
        for dim in (0, 1, 2):
            doubled = 2 * math.prod(box_list)
            shards_after = math.prod(
                math.ceil(g / (b * (2 if d == dim else 1)))
                for d, (g, b) in enumerate(zip(grid, box_list, strict=True))
            )
            if (
                box_list[dim] < grid[dim]
                and doubled * encoded_chunk <= options.target_shard_bytes
                and (max_chunks is None or doubled <= max_chunks)
                and shards_after >= options.min_shards
            ):
                box_list[dim] *= 2
                grown = True
    for dim in (0, 1, 2):
        if box_list[dim] % step[dim] and box_list[dim] < grid[dim]:
            box_list[dim] = min(grid[dim], math.lcm(box_list[dim], step[dim]))
    return tuple(box_list)  # type: ignore[return-value]


def _zarr_compressor(compression: str, level: int | None) -> Compressor | None:
    try:
        if compression == "none":
            return None
        if compression == "gzip":
            return Compressor.gzip(6 if level is None else level)
        if compression == "zstd":
            return Compressor.zstd(3 if level is None else level)
        return Compressor.blosc(clevel=5 if level is None else level)
    except ValueError as exc:
        raise PlanError(f"bad --compression-level for {compression}: {exc}") from exc


def to_zarr_order(block_xyzc: np.ndarray, axes: str) -> np.ndarray:
    """View an [x, y, z, c] block in the zarr output's axis order (c dropped when absent)."""
    if "c" not in axes:
        return np.transpose(block_xyzc[..., 0], tuple("xyz".index(a) for a in axes))
    return np.transpose(block_xyzc, tuple("xyzc".index(a) for a in axes))
