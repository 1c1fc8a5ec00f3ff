"""Meshes and skeletons made from the segmentation, planned with the volume they come from.

The level meshed (`--mesh-level`, default the finest) is cut into blocks (`--mesh-block`);
one block task per block reads it once and makes both its surfaces and its skeletons; one
task per output shard then joins each segment's pieces into its multi-resolution mesh or
skeleton. The sharding of each output must be fixed before the blocks run (a block groups
its pieces by the shard their segment hashes to), and how many segments the volume holds is
not known then: the plan estimates it from a few sampled blocks (more segments than there
are is harmless: smaller minishards).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from shardwright.common.vocabulary import DatasetKind
from shardwright.errors import NAMED, PlanError
from shardwright.formats.precomputed.meshes import IDENTITY_TRANSFORM, MULTILOD_TYPE
from shardwright.formats.precomputed.sharding import ShardingSpec
from shardwright.formats.precomputed.skeletons import SKELETON_TYPE
from shardwright.generation.exchange import MESH, SKELETON, SpooledShardTask
from shardwright.generation.grid import BlockGrid, choose_group, three
from shardwright.generation.surfaces import QUANTIZATION_BITS
from shardwright.generation.tracing import RADIUS_ATTRIBUTE, Tracing
from shardwright.options import ConvertOptions
from shardwright.planning.base import ExchangePlan
from shardwright.planning.objects import MULTILOD, SKELETONS, STORED_IN, choose_sharding
from shardwright.planning.pyramid import level_resolution, scale_of
from shardwright.planning.text import counted, human_bytes, xyz
from shardwright.planning.volume import ConversionPlan
from shardwright.sources import Source
from shardwright.sources.base import location_of
from shardwright.version import install_command

DIRECTORIES = {MESH: "mesh", SKELETON: "skeletons"}
DEFAULT_BLOCK = (128, 128, 128)
GROUPS_PER_CORE = 2  # block groups (tasks) at least, per core of the machine planning
SAMPLED_BLOCKS = 4
SAMPLE_EDGE = 64  # base voxels along each axis of a block's sampled corner
BYTES_PER_SEGMENT = {MESH: 16 * 1024, SKELETON: 2 * 1024}  # to size shards before any exists
NEEDED = ("zmesh", "kimimaro", "DracoPy")  # the meshes extra
SEGMENTATION_METHOD = "mode"
# Measured on a 128^3 block of ~200 neurite-like segments: ~2 triangles per voxel before
# simplification (zmesh holds ~20 bytes each), the distance transform's float32 and TEASAR's.
BYTES_PER_BLOCK_VOXEL = 48  # how a block of an upper level is reduced, as the pyramid does


@dataclass(frozen=True)
class Generation:
    """What both outputs share: the block grid, how surfaces are simplified, which segments."""

    grid: BlockGrid
    level: int
    steps: tuple[tuple[int, int, int], ...]  # the pyramid's factors of the levels below `level`
    # (a block is reduced by each in turn)
    max_error: float  # nm, at the finest level of detail
    lods: int | None  # None: each segment's own count (until one fragment covers it)
    dust_threshold: int
    object_ids: frozenset[int] | None
    outputs: tuple[int, ...]  # MESH and / or SKELETON, the blocks make what these need
    shardings: dict[int, ShardingSpec]
    exchange: str  # the destination whose `.shardwright/exchange/` holds the block spools
    estimated_segments: int
    tracing: Tracing  # how skeletons are traced
    scale: str | None = None  # the stored scale read, where blocks read a dataset as it is

    def wants(self, segment: int) -> bool:
        return segment != 0 and (self.object_ids is None or segment in self.object_ids)


@dataclass(frozen=True)
class GeneratedPlan(ExchangePlan):
    """One generated output (meshes or skeletons) of a volume's job: a `base.Plan`. The
    first output's plan also runs the block tasks (`runs_blocks`)."""

    output: int  # MESH or SKELETON
    dest: str
    options: ConvertOptions
    source: Source
    generation: Generation
    runs_blocks: bool
    # Its block tasks also hand an addition's new levels their reduced voxels (the level
    # meshed is the one the levels are reduced from): the addition's stream runs them,
    # between the levels' tasks, so that the volume is read once; this plan's stream runs
    # only its shards.
    feeds_levels: bool = False

    dataset: ClassVar[str] = DatasetKind.GENERATED
    preparing_unit: ClassVar[str] = "blocks"
    in_place: ClassVar[bool] = False
    spools: ClassVar[bool] = True
    holds_gil: ClassVar[bool] = True
    companions: ClassVar[tuple[()]] = ()

    @property
    def kind(self) -> str:
        return MULTILOD if self.output == MESH else SKELETONS

    @property
    def sharding(self) -> ShardingSpec:
        return self.generation.shardings[self.output]

    @property
    def info(self) -> dict[str, Any]:
        sharding = self.sharding.to_json()
        if self.output == MESH:
            return {
                "@type": MULTILOD_TYPE,
                "vertex_quantization_bits": QUANTIZATION_BITS,
                "transform": list(IDENTITY_TRANSFORM),
                "lod_scale_multiplier": 1.0,
                "sharding": sharding,
            }
        return {
            "@type": SKELETON_TYPE,
            "transform": list(IDENTITY_TRANSFORM),
            "vertex_attributes": [RADIUS_ATTRIBUTE],
            "sharding": sharding,
        }

    @property
    def source_url(self) -> str | None:
        return location_of(self.source)

    @property
    def source_bytes(self) -> int:
        """Bytes the block tasks read (the run with the blocks reads the level once)."""
        if not self.runs_blocks:
            return 0
        base = [s * f for s, f in zip(self.generation.grid.shape, self.generation.grid.factor,
                                      strict=True)]  # fmt: skip
        return math.prod(base) * self.source.dtype.itemsize

    @property
    def block_count(self) -> int:
        return self.generation.grid.block_count if self.runs_blocks else 0

    @property
    def shard_count(self) -> int:
        """Shards expected (segments hash evenly; the count is known once blocks ran)."""
        return min(self.sharding.num_shards, max(1, self.generation.estimated_segments))

    @property
    def preparing_tasks(self) -> int:
        return self.block_count

    @property
    def shard_total(self) -> int:
        """Tasks of this output, as progress counts them: its blocks and its shards."""
        return self.preparing_tasks + self.shard_count

    @property
    def block_task_bytes(self) -> int:
        """Modelled peak of a block task: its labels (read at the base resolution, then
        reduced) and what marching cubes, the distance transform and TEASAR hold per voxel."""
        return _block_task_bytes(self.generation.grid, self.source.dtype.itemsize)

    def shards(self) -> Iterator[SpooledShardTask]:
        """Known only from the blocks' spools: the job asks its exchange (jobs/)."""
        return iter(())

    def for_shard_tasks(self) -> GeneratedPlan:
        return self

    def metadata_documents(self) -> list[tuple[str, dict[str, Any]]]:
        return [("info", self.info)]

    def describe(self) -> dict[str, Any]:
        g = self.generation
        return {
            "source": self.source_url,
            "destination": self.dest,
            "format": STORED_IN,
            "object_type": self.info["@type"],
            "generated_from_level": g.level,
            "generated_from_scale": g.scale,
            "fill_missing": self.options.fill_missing,
            "resolution_nm": list(g.grid.resolution),
            "grid_origin_nm": list(g.grid.origin_nm),
            "block_xyz": list(g.grid.block),
            "blocks": g.grid.block_count,
            "block_group_xyz": list(g.grid.group),
            "block_groups": g.grid.group_count,
            "max_error_nm": g.max_error,
            "lods": g.lods if g.lods is not None else "auto",
            "dust_threshold": g.dust_threshold,
            "object_ids": sorted(g.object_ids) if g.object_ids is not None else None,
            "estimated_segments": g.estimated_segments,
            "sharding": self.sharding.to_json(),
            "memory_budget": self.options.memory_budget,
            "block_task_bytes": self.block_task_bytes,
            **(
                {
                    "teasar": dict(g.tracing.teasar),
                    "tick_threshold": g.tracing.tick_threshold,
                    "whole_pass_voxels": g.tracing.whole_pass_voxels,
                }
                if self.output == SKELETON
                else {}
            ),
        }

    def report(self) -> str:
        g = self.generation
        spec = self.sharding
        what = (
            f"multi-resolution meshes (Draco, {QUANTIZATION_BITS}-bit), levels of detail "
            f"{g.lods if g.lods is not None else 'auto'}, error {g.max_error:g} nm doubling per "
            "level"
            if self.output == MESH
            else "TEASAR skeletons (kimimaro), radius attribute"
        )
        kind = "mesh" if self.output == MESH else "skeleton"
        each = f"each of {g.dust_threshold:,} voxels or more" if g.dust_threshold > 1 else "each"
        lines = [
            f"generated    {self.dest}: {what}",
            f"  from       {f'scale {g.scale}' if g.scale else f'level {g.level}'} of the volume "
            f"({xyz(g.grid.shape)} voxels of "
            f"{xyz(g.grid.resolution)} nm), {g.grid.block_count:,} blocks of {xyz(g.grid.block)} "
            f"in {counted(g.grid.group_count, 'task')} of {xyz(g.grid.group)} blocks",
            f"  segments   ~{g.estimated_segments:,} present (estimated from sampled blocks), "
            f"{each} gets its {kind}; the job counts them",
            *([_tracing_line(g.tracing)] if self.output == SKELETON else []),
            f"  sharding   {spec.hash}, minishard {spec.minishard_bits}, shard {spec.shard_bits} "
            f"({spec.num_shards:,} shards)",
        ]
        if self.runs_blocks:
            lines.append(
                f"  exchange   one spool object per block under {g.exchange}/.shardwright/"
                f"exchange/, ~{human_bytes(_exchange_estimate(g))} in all, removed after the "
                "manifests; meshing and skeletons run on the CPU workers, ~"
                f"{human_bytes(self.block_task_bytes)} per block task"
            )
        return "\n".join(lines)


def _tracing_line(tracing: Tracing) -> str:
    """The plan's line on how skeletons are traced: TEASAR's parameters, by their options."""
    t = dict(tracing.teasar)
    ticks = (f"branches under {tracing.tick_threshold:g} nm removed" if tracing.tick_threshold
             else "no branch removed (--tick-threshold)")  # fmt: skip
    return (
        f"  tracing    TEASAR ball {t['scale']:g} x radius + {t['const']:g} nm (--teasar-scale, "
        f"--teasar-const); somata over {t['soma_acceptance_threshold']:g} nm (looked for over "
        f"{t['soma_detection_threshold']:g}, ball {t['soma_invalidation_scale']:g} x radius + "
        f"{t['soma_invalidation_const']:g} nm); {ticks}; a segment whose box has up to "
        f"{tracing.whole_pass_voxels:,} voxels (the memory budget) traced whole, larger ones "
        "block by block and joined"
    )


def _block_task_bytes(grid: BlockGrid, itemsize: int) -> int:
    read = math.prod(b + 1 for b in grid.block)
    return read * (math.prod(grid.factor) * itemsize + BYTES_PER_BLOCK_VOXEL)


def _kept_bytes(grid: BlockGrid, group: tuple[int, int, int], itemsize: int) -> int:
    """The most chunk bytes a group task keeps for its next blocks: a layer of its chunks
    one block deep, stored raw at worst (chunks are taken to be no larger than blocks)."""
    x, y, _ = ((g + 1) * b * f for g, b, f in zip(group, grid.block, grid.factor, strict=True))
    return x * y * grid.block[2] * grid.factor[2] * itemsize


def _exchange_estimate(g: Generation) -> int:
    return sum(BYTES_PER_SEGMENT[o] for o in g.outputs) * g.estimated_segments * 2


@dataclass(frozen=True)
class Labels:
    """What meshes and skeletons are made from: the segmentation's source, the dataset they go
    beside (`dest`: its `mesh/` and `skeletons/`), its geometry, and the pyramid a level
    above the source's own is reduced by (a conversion's `--mips`; none for a dataset read as
    it is stored)."""

    source: Source
    dest: str
    size: tuple[int, int, int]
    resolution: tuple[float, float, float]
    voxel_offset: tuple[int, int, int]
    level_count: int = 1
    steps: tuple[tuple[int, int, int], ...] = ()  # each level's factor to the next
    scale: str | None = None  # a dataset's scale read as stored (an addition's)

    @classmethod
    def of_volume(cls, volume: ConversionPlan) -> Labels:
        steps = volume.pyramid.steps if volume.pyramid is not None else ()
        return cls(volume.source, volume.dest, three(volume.size), three(volume.resolution),
                   three(volume.voxel_offset), volume.level_count, steps)  # fmt: skip


def with_generated(volume: ConversionPlan, options: ConvertOptions) -> ConversionPlan:
    """The volume plan with the meshes / skeletons the options ask to make from it."""
    check_segmentation(volume.layer_type, volume.dtype, volume.num_channels, GENERATING)
    check_meshes_extra()
    if not volume.layout.names_companions:
        raise PlanError(
            "{generate_meshes} / {generate_skeletons} write precomputed meshes and skeletons "
            "beside a precomputed volume: use {format} precomputed",
            generate_meshes=NAMED,
            generate_skeletons=NAMED,
            format=NAMED,
        )
    plans = generated_plans(Labels.of_volume(volume), options)
    return dataclasses.replace(
        volume, layout=volume.layout.naming(directory_names(plans)),
        companions=(*volume.companions, *plans),
    )  # fmt: skip


GENERATING = ("generate_meshes", "generate_skeletons")  # the options that ask for them


def check_segmentation(
    layer_type: str | None, dtype: np.dtype, channels: int, asked: tuple[str, ...]
) -> None:
    """Refuse what no single-channel segmentation is, naming the options (`asked`) that
    need one."""
    named = " / ".join(f"{{{option}}}" for option in asked)
    if layer_type != "segmentation" or dtype.kind not in "ui":
        kind = layer_type or "volume"
        raise PlanError(
            f"{named} need a segmentation (integer labels), "
            f"not {'an' if kind[0] in 'aeiou' else 'a'} {kind} of {dtype}",
            **dict.fromkeys(asked, NAMED),
        )
    if channels != 1:
        raise PlanError(
            f"{named} need a single-channel segmentation", **dict.fromkeys(asked, NAMED)
        )


def check_meshes_extra() -> None:
    """Refuse to mesh without the meshes extra's packages, naming how to install them."""
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        raise PlanError(
            f"{{generate_meshes}} / {{generate_skeletons}} need {', '.join(missing)}: "
            + install_command("meshes"),
            generate_meshes=NAMED,
            generate_skeletons=NAMED,
        )


def directory_names(plans: tuple[GeneratedPlan, ...]) -> dict[str, str]:
    """What the volume's `info` names: `mesh` and / or `skeletons`, each its directory."""
    return {"mesh" if p.output == MESH else "skeletons": DIRECTORIES[p.output] for p in plans}


def generated_plans(labels: Labels, options: ConvertOptions) -> tuple[GeneratedPlan, ...]:
    """The meshes / skeletons the options ask to make from `labels`, each to its directory
    below `labels.dest` (the first output's plan runs the block tasks)."""
    grid = _grid(labels, options)
    needed = _block_task_bytes(grid, labels.source.dtype.itemsize)
    if needed > options.memory_budget:
        raise PlanError(
            f"a block task of {xyz(grid.block)} voxels needs ~{human_bytes(needed)}, more than "
            f"{{memory_budget}} {human_bytes(options.memory_budget)}: pass a smaller "
            "{mesh_block} or a larger budget",
            memory_budget=NAMED,
            mesh_block=NAMED,
        )
    outputs = tuple(
        o for o, asked in ((MESH, options.generate_meshes),
                           (SKELETON, options.generate_skeletons)) if asked
    )  # fmt: skip
    segments = _estimate_segments(labels.source, grid, options)
    plain = dataclasses.replace(
        options, compression=None, shard_bits=None, minishard_bits=None, preshift_bits=None,
        hash=None,
    )  # fmt: skip
    shardings = {
        o: choose_sharding(plain, MULTILOD if o == MESH else SKELETONS, segments,
                           segments * BYTES_PER_SEGMENT[o])
        for o in outputs
    }  # fmt: skip
    dests = {o: f"{labels.dest.rstrip('/')}/{DIRECTORIES[o]}" for o in outputs}
    generation = Generation(
        grid=grid,
        level=options.mesh_level,
        steps=labels.steps[: options.mesh_level],
        max_error=min(grid.resolution) if options.mesh_max_error is None
        else float(options.mesh_max_error),
        lods=None if options.mesh_lods == "auto" else int(options.mesh_lods),
        dust_threshold=options.dust_threshold,
        object_ids=None if options.object_ids is None else frozenset(options.object_ids),
        outputs=outputs,
        shardings=shardings,
        exchange=dests[outputs[0]],
        estimated_segments=segments,
        tracing=Tracing(tuple(options.teasar().items()), float(options.tick_threshold),
                        options.budget.traced_voxels()),  # fmt: skip
        scale=labels.scale,
    )  # fmt: skip
    return tuple(
        GeneratedPlan(o, dests[o], options, labels.source, generation, i == 0)
        for i, o in enumerate(outputs)
    )


def _grid(labels: Labels, options: ConvertOptions) -> BlockGrid:
    level = options.mesh_level
    if level >= labels.level_count:
        raise PlanError(
            f"{{mesh_level}} {level}: the volume has {labels.level_count} level(s); pass "
            "{mips} to build the pyramid it is made from",
            mesh_level=NAMED,
            mips=NAMED,
        )
    factor = scale_of(labels.steps, level)
    resolution = three(level_resolution(labels.resolution, labels.steps, level))
    shape = three(-(-s // f) for s, f in zip(labels.size, factor, strict=True))
    block = three(
        max(2, min(b, s)) for b, s in zip(options.mesh_block or DEFAULT_BLOCK, shape, strict=True)
    )
    origin = three(
        o * r0 + 0.5 * r
        for o, r0, r in zip(labels.voxel_offset, labels.resolution, resolution, strict=True)
    )
    grid = BlockGrid(shape, block, resolution, factor, origin)
    itemsize = labels.source.dtype.itemsize
    alone = _block_task_bytes(grid, itemsize)

    def fits(group: tuple[int, int, int]) -> bool:
        return alone + _kept_bytes(grid, group, itemsize) <= options.memory_budget

    least = GROUPS_PER_CORE * (os.cpu_count() or 1)
    return dataclasses.replace(grid, group=choose_group(grid.counts, least, fits))


def _estimate_segments(source: Source, grid: BlockGrid, options: ConvertOptions) -> int:
    """Segments in the volume, from the distinct ids of a corner of a few blocks spread
    across it, scaled up by the voxels of the block each stands for (ids are not spread
    evenly: larger than the count, which is harmless: see the module's docstring). A corner
    of SAMPLE_EDGE voxels is about one chunk: the plan reads a few chunks, not blocks."""
    if options.object_ids is not None:
        return len(options.object_ids)
    positions = list(grid.positions())
    picks = sorted({int(p) for p in np.linspace(0, len(positions) - 1,
                                                min(SAMPLED_BLOCKS, len(positions)))})  # fmt: skip
    scaled = 0.0
    for i in picks:
        base_start, base_stop = grid.base_box(*grid.core(positions[i]), source.shape_xyz)
        sample_stop = three(
            min(b, a + SAMPLE_EDGE) for a, b in zip(base_start, base_stop, strict=True)
        )
        labels = source.read(base_start, sample_stop)
        share = math.prod(b - a for a, b in zip(base_start, base_stop, strict=True)) / max(
            1, math.prod(b - a for a, b in zip(base_start, sample_stop, strict=True))
        )
        scaled += np.count_nonzero(np.unique(labels)) * share
    return max(1, math.ceil(scaled * len(positions) / max(1, len(picks))))
