"""What is added to a dataset that already exists, ours or another tool's, without copying a
voxel (`shardwright convert DEST --generate-meshes --generate-skeletons --segment-properties
TABLE --mips N`, any of them): to a precomputed segmentation its meshes, skeletons and
segment properties; to a precomputed volume or an OME-Zarr group (0.5: Zarr v3 arrays; 0.4:
Zarr v2 arrays, chunk by chunk), levels above its coarsest.

Meshes and skeletons are made by block tasks that read the scale meshed (planning/
generated.py) and written below the dataset (`mesh/`, `skeletons/`) as datasets of their
own; segment properties are one document; levels are a pyramid whose base is the coarsest
level, read and never written (additions/levels.py), planned by the dataset's format
(`formats/<name>/adding.py`, found by the format whose metadata document the dataset has).
The dataset's own objects are never written: only its metadata document (its root: `info`,
`zarr.json` or `.zattrs`), last, naming what was added, in one write conditional on the
version read here (lifecycle/addition.py), and `.shardwright/` beside its objects. What
cannot be done is refused here, before anything is written (additions/checks.py).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from shardwright.additions.checks import (
    PROPERTIES_KEY,
    check_directory,
    check_finished,
    check_levels_only,
    check_options,
    check_properties,
    properties_of,
    read_root,
    root_document,
)
from shardwright.additions.levels import plan_added_levels
from shardwright.common import deadlines
from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.common.urls import absolute
from shardwright.common.vocabulary import DatasetKind
from shardwright.errors import PlanError, SourceError
from shardwright.formats.precomputed.segment_properties import SEGMENT_PROPERTIES
from shardwright.generation.exchange import MESH, SKELETON
from shardwright.lifecycle.addition import root_before, sha256
from shardwright.lifecycle.manifest import metadata_text
from shardwright.options import ConvertOptions
from shardwright.planning.feeding import feeding
from shardwright.planning.formats import FormatAdding, driver, reader_of
from shardwright.planning.generated import (
    DIRECTORIES,
    GeneratedPlan,
    Labels,
    check_meshes_extra,
    check_segmentation,
    directory_names,
    generated_plans,
)
from shardwright.planning.text import counted, human_bytes, xyz
from shardwright.planning.volume import ConversionPlan
from shardwright.sources import Source, open_source
from shardwright.sources.precomputed import PrecomputedSource
from shardwright.stores import open_store
from shardwright.stores.base import Expected


@dataclass(frozen=True)
class AdditionPlan:
    """What a job adds to the dataset at `dest` (a `base.Plan`): its own shards are those of
    the levels it adds; its companions (meshes, skeletons) are datasets of their own."""

    dest: str
    options: ConvertOptions
    root: str  # the dataset's metadata document, written last: `info`, `zarr.json`, `.zattrs`
    source: Source  # what is read: the scale meshed, or the coarsest level (levels alone)
    root_read: bytes  # the root as it was before this addition (what is compared at the end)
    version: Expected | None  # its version as looked up when planned (S3's ETag, GCS's generation)
    ours: bool  # a dataset shardwright converted (its manifest follows the new root)
    companions: tuple[GeneratedPlan, ...] = ()
    properties: dict[str, Any] | None = None  # the segment properties document, if asked
    # Levels added above the coarsest: a pyramid whose base is that level, read and never
    # written (`writes_base` False); its upper levels are the new scales or arrays.
    levels: ConversionPlan | None = None
    # Levels shardwright added before that these replace (`overwrite`): the info names the
    # new ones instead, and their objects are deleted after it does.
    replaces: tuple[str, ...] = ()

    dataset: ClassVar[str] = DatasetKind.ADDITION
    preparing_unit: ClassVar[str] = "blocks"
    in_place: ClassVar[bool] = True
    spools: ClassVar[bool] = False
    holds_gil: ClassVar[bool] = False
    preparing_tasks: ClassVar[int] = 0  # the block tasks it may run count as its meshes'

    @property
    def format(self) -> str:
        return self.source_format if self.levels is None else self.levels.format

    @property
    def source_format(self) -> str:
        """The format of the dataset added to: the one whose metadata document its root is."""
        found = reader_of({self.root: None})
        assert found is not None, "an addition's root is a format's document (checks.read_root)"
        return found[0]

    @property
    def adding(self) -> FormatAdding:
        """What an addition asks of the format of the dataset added to."""
        adding = driver(self.source_format).adding
        assert adding is not None, "an addition's root is that of a format added to (read_root)"
        return adding

    @property
    def new_levels(self) -> list[ConversionPlan]:
        """The plans of the levels this addition writes (above the one it reads)."""
        if self.levels is None:
            return []
        return [self.levels.level_plan(k) for k in range(1, self.levels.level_count)]

    @property
    def feeding_blocks(self) -> GeneratedPlan | None:
        """The meshes' (or skeletons') plan whose block tasks are also the levels' base
        tasks, where they are: this addition's stream runs them (planning/feeding.py)."""
        first = self.companions[0] if self.companions else None
        return first if first is not None and first.feeds_levels else None

    @property
    def shard_count(self) -> int:
        return sum(level.shard_count for level in self.new_levels)

    @property
    def shard_total(self) -> int:
        """The shards of the new levels (the base's tasks store none: progress counts these)."""
        return self.shard_count

    @property
    def source_url(self) -> str:
        return self.dest

    @property
    def source_bytes(self) -> int:
        """What the levels' base tasks read (the companions' block tasks count their own,
        those that feed the levels too)."""
        if self.levels is None or self.feeding_blocks is not None:
            return 0
        return self.levels.source_bytes

    @property
    def spool_budget(self) -> int:
        return self.options.memory_budget if self.levels is None else self.levels.spool_budget

    @property
    def names(self) -> dict[str, str]:
        """What the info names once the job is done: each added directory."""
        named = directory_names(self.companions)
        if self.properties is not None:
            named["segment_properties"] = SEGMENT_PROPERTIES
        return named

    @property
    def documents(self) -> list[tuple[str, bytes]]:
        """What is written just before the root that names it: segment properties, the new
        level arrays' metadata."""
        out = []
        if self.properties is not None:
            out.append((PROPERTIES_KEY, metadata_text(self.properties).encode()))
        if self.levels is not None:
            arrays = self.adding.level_documents(self.levels)
            out += [(key, metadata_text(doc).encode()) for key, doc in arrays]
        return out

    @property
    def root_after(self) -> bytes:
        """The root as the job leaves it: the added directories named, the added levels
        after the dataset's own (every other member as it was)."""
        named = {**json.loads(self.root_read), **self.names}
        return metadata_text(self.adding.with_levels(named, self.levels, self.replaces)).encode()

    def shards(self) -> Iterator[Any]:
        for level in self.new_levels:
            yield from level.shards()

    def for_shard_tasks(self) -> AdditionPlan | ConversionPlan:
        """The levels' pyramid, which its tasks run (the rest is the coordinator's)."""
        return self if self.levels is None else self.levels.for_shard_tasks()

    def metadata_documents(self) -> list[tuple[str, dict[str, Any]]]:
        """None at the job's start: the root is written last (lifecycle/addition.py)."""
        return []

    def describe(self) -> dict[str, Any]:
        pyramid = None if self.levels is None else self.levels.pyramid
        return {
            "format": self.format,
            "destination": self.dest,
            "source": self.dest,
            "dataset_written_by": "shardwright" if self.ours else "another tool",
            "root": self.root,
            "root_sha256_before": sha256(self.root_read),
            "root_sha256_after": sha256(self.root_after),
            "adds": self.names,
            "levels_from": None if self.levels is None else self.levels.layout.level_key,
            "replaces": list(self.replaces),
            "levels": [level.describe_level() for level in self.new_levels],
            "levels_factors": None if pyramid is None else [list(s) for s in pyramid.steps],
            "levels_method": None if pyramid is None else pyramid.method,
            "fill_missing": self.options.fill_missing,
        }

    def report(self) -> str:
        what = self.adding.what(json.loads(self.root_read))
        written_by = (
            "converted by shardwright"
            if self.ours
            else "written by another tool: it gains only .shardwright/ beside its objects"
        )
        lines = [f"addition     {self.dest}: {what} {written_by}"]
        if self.companions:
            lines.append(_read_line(self.source, self.companions[0]))
        if self.properties is not None:
            count = len(self.properties["inline"]["ids"])
            lines.append(f"  properties {counted(count, 'segment')}' labels and numbers, one "
                         f"document ({human_bytes(len(self.documents[0][1]))})")  # fmt: skip
        if self.levels is not None:
            steps = self.levels.pyramid.steps if self.levels.pyramid is not None else ()
            lines += [_level_line(level, steps[level.level - 1]) for level in self.new_levels]
        if self.replaces:
            lines.append(
                f"  replaces   level{'s' if len(self.replaces) > 1 else ''} "
                f"{', '.join(self.replaces)} shardwright added (--overwrite): the info names "
                "the new ones instead, then the old ones' shards are deleted"
            )
        if self.levels is not None:
            base, pyramid = self.levels, self.levels.pyramid
            assert pyramid is not None
            how = (
                f"read once, ~{human_bytes(base.peak_task_bytes)} per task"
                if self.feeding_blocks is None
                else "by the meshes' block tasks as they read it: the scale is read once for all"
            )
            lines.append(
                f"  from       level {base.layout.level_key} ({xyz(base.size)} voxels), each "
                f"level reduced from the one below ({pyramid.method}; factors "
                f"{pyramid.factor_from}) {how}"
            )
        adds = [f"{name}/" for name in self.names.values()]
        adds += [f"level {level.layout.level_key}" for level in self.new_levels]
        lines += [
            f"  adds       {', '.join(adds)}; then, last, its {self.root} names them (one "
            "write, only if it is still as read now)",
            "  keeps      every object the dataset has now, byte for byte",
        ]
        return "\n".join([*lines, *(c.report() for c in self.companions)])


def plan_addition(
    dest: str,
    options: ConvertOptions,
    properties: dict[str, Any] | None = None,
    *,
    overwrite: bool = False,
) -> AdditionPlan:
    """The addition the options ask of the dataset at `dest` (see the module's docstring);
    `properties`: a segment properties document made already (else the options' table);
    `overwrite`: levels shardwright added are made again from the level below them, under
    new keys where theirs are taken (as a stopped addition that did so is resumed)."""
    deadlines.set_timeout(options.timeout)
    dest = absolute(dest).rstrip("/")
    asked = check_options(options, properties is not None)
    options = dataclasses.replace(options, source_storage_options=options.storage_options)
    store = open_store(dest, options.storage_options)
    (reader, adding), root, current = read_root(store, dest)
    before = root_before(store, current)
    document = root_document(before, dest, root, adding)
    check_finished(store, dest)
    version = store.expected(root) if before == current else None
    ours = store.exists(MANIFEST_KEY)
    if not adding.names_companions:
        check_levels_only(asked, dest, adding.what(document))
        pyramid, gone = plan_added_levels(store, dest, (reader, adding), document, options,
                                          overwrite)  # fmt: skip
        return AdditionPlan(dest, options, root, pyramid.source, before, version, ours,
                            levels=pyramid, replaces=gone)  # fmt: skip
    if properties is None and options.segment_properties is not None:
        properties = properties_of(options.segment_properties, options)
    source = _open(dest, options)
    labelled = tuple(name for name in asked if name != "mips")  # what needs a segmentation
    if labelled:
        check_segmentation(document.get("type"), source.dtype, source.num_channels, labelled)
    scales = set(reader.levels(document))
    wanted = ((MESH, "mesh", options.generate_meshes),
              (SKELETON, "skeletons", options.generate_skeletons))  # fmt: skip
    for output, member, generates in wanted:
        if generates:
            check_directory(store, dest, document, member, DIRECTORIES[output], scales)
    if properties is not None:
        check_properties(store, dest, document, scales)
    companions: tuple[GeneratedPlan, ...] = ()
    if options.generate_meshes or options.generate_skeletons:
        check_meshes_extra()
        labels = Labels(source, dest, source.shape_xyz, _resolution(source),
                        source.hints.voxel_offset or (0, 0, 0), scale=source.scale.key)  # fmt: skip
        companions = generated_plans(labels, options)
    added: ConversionPlan | None = None
    replaced: tuple[str, ...] = ()
    if options.mips not in (None, 0):
        added, replaced = plan_added_levels(store, dest, (reader, adding), document, options,
                                            overwrite)  # fmt: skip
        top = [key for key in reader.levels(document) if key not in replaced][-1]
        if companions and feeding(added, companions[0].generation.grid, source.scale.key, top):
            companions = (dataclasses.replace(companions[0], feeds_levels=True),
                          *companions[1:])  # fmt: skip
    return AdditionPlan(dest, options, root, source, before, version, ours, companions,
                        properties, added, replaced)  # fmt: skip


def _open(dest: str, options: ConvertOptions) -> PrecomputedSource:
    try:
        source = open_source(dest, scale_key=options.source_scale,
                             storage_options=options.storage_options,
                             fill_missing=options.fill_missing)  # fmt: skip
    except SourceError as exc:
        raise PlanError(f"cannot read the dataset to add to: {exc}") from None
    if not isinstance(source, PrecomputedSource):
        raise PlanError(f"{dest} is read as {type(source).__name__}, not a precomputed volume")
    return source


def _read_line(source: Source, meshes: GeneratedPlan) -> str:
    """What the block group tasks read: the scale meshed, each chunk once per group owning
    part of it; a chunk at a group's high face twice where the next group has not handed over
    the layer where they meet (generation/faces.py) by the time it is needed."""
    assert isinstance(source, PrecomputedSource)
    chunk = source.scale.chunk_size
    chunks = math.prod(math.ceil(s / c) for s, c in zip(source.shape_xyz, chunk, strict=True))
    grid = meshes.generation.grid
    reads, most = grid.chunk_reads(chunk), grid.chunk_reads(chunk, handed=False)
    beyond = (
        f", up to {most:,} where a task needs the layer where it meets the next before that "
        "task has handed it over"
        if most > reads
        else ""
    )
    return (
        f"  reads      scale {source.scale.key}: {xyz(source.shape_xyz)} voxels of "
        f"{xyz(_plain(_resolution(source)))} nm, {counted(chunks, 'chunk')} of {xyz(chunk)} "
        f"({human_bytes(meshes.source_bytes)} decoded): {reads:,} chunk reads "
        f"({reads / max(1, chunks):.2f} per chunk{beyond})"
    )


def _level_line(level: ConversionPlan, step: tuple[int, int, int]) -> str:
    stored = (
        f"{counted(level.shard_count, 'shard')} of {xyz(level.shard_shape_chunks)} chunks of "
        f"{xyz(level.chunk_size)}"
        if level.layout.sharded
        else f"{counted(level.shard_count, 'chunk object')} of {xyz(_voxels(level))} voxels"
    )
    return (
        f"  level      {level.layout.level_key}: {xyz(level.size)} voxels of "
        f"{xyz(_plain(level.resolution))} nm (the level below by {xyz(step)}), {stored}, "
        f"~{human_bytes(level.estimated_shard_bytes)} each"
    )


def _voxels(level: ConversionPlan) -> tuple[int, ...]:
    """The voxels one of the level's task boxes spans."""
    return tuple(b * c for b, c in zip(level.shard_shape_chunks, level.chunk_size, strict=True))


def _resolution(source: PrecomputedSource) -> tuple[float, float, float]:
    resolution = source.hints.resolution
    assert resolution is not None, "a precomputed scale records its resolution"
    return resolution


def _plain(values: tuple[float, ...]) -> list[int | float]:
    """Whole numbers as integers, as the info writes them."""
    return [int(v) if float(v).is_integer() else v for v in values]
