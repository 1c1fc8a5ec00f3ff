"""Meshes, skeletons and segment properties added to a precomputed segmentation that
already exists, ours or another tool's, without copying a voxel (`shardwright convert DEST
--generate-meshes --generate-skeletons --segment-properties TABLE`, any of them).

The dataset is read once, by the block tasks of its meshes and skeletons (planning/
generated.py), which are written below it (`mesh/`, `skeletons/`) as datasets of their own;
segment properties are one document (`segment_properties/info`). The dataset's own objects
are never written: only its `info`, last, naming what was added, in one write conditional on
the version read here (lifecycle/addition.py), and `.shardwright/` beside its objects.
Whatever cannot be done is refused here, before anything is written.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from shardwright.codecs import CHUNK_ENCODINGS
from shardwright.common import deadlines
from shardwright.common.urls import absolute
from shardwright.errors import NAMED, PlanError, SourceError
from shardwright.generation.exchange import MESH, SKELETON
from shardwright.generation.grid import three
from shardwright.lifecycle.addition import INFO, info_before, sha256, written_here
from shardwright.lifecycle.journal import JOB_KEY
from shardwright.lifecycle.manifest import ADDITION, MANIFEST_KEY, metadata_text
from shardwright.options import ConvertOptions
from shardwright.planning.builder import make_plan
from shardwright.planning.generated import (
    DIRECTORIES,
    GENERATING,
    GeneratedPlan,
    Labels,
    check_meshes_extra,
    check_segmentation,
    directory_names,
    generated_plans,
)
from shardwright.planning.layouts.precomputed import SEGMENT_PROPERTIES
from shardwright.planning.text import counted, human_bytes, xyz
from shardwright.planning.volume import ConversionPlan
from shardwright.sources import open_source
from shardwright.sources.precomputed import PrecomputedSource
from shardwright.sources.tables import segment_properties_of
from shardwright.stores import Store, open_store
from shardwright.stores.base import Expected

# The options an addition takes: what it adds (its meshes and skeletons, how they are made;
# segment properties), what it reads and how it reaches the dataset (`storage_options`; the
# table, `source_storage_options`). Every other option shapes a conversion's volume and is refused.
ADDITION_OPTIONS = frozenset({
    "generate_meshes", "generate_skeletons", "mesh_max_error", "mesh_lods", "mesh_block",
    "dust_threshold", "object_ids", "memory_budget", "target_shard_bytes", "min_shards",
    "compression_level", "source_scale", "fill_missing", "timeout", "storage_options",
    "source_storage_options", "segment_properties", "mips", "factor", "downsample",
})  # fmt: skip
PROPERTIES_KEY = f"{SEGMENT_PROPERTIES}/info"


@dataclass(frozen=True)
class AdditionPlan:
    """What a job adds to the dataset at `dest`: a `base.Plan` with no shards of its own;
    its companions (the meshes and skeletons) are the datasets it writes."""

    dest: str
    options: ConvertOptions
    source: PrecomputedSource  # the scale of the dataset the block tasks read
    info_read: bytes  # the info as it was before this addition (what is compared at the end)
    version: Expected | None  # its version as looked up when planned (S3's ETag)
    ours: bool  # a dataset shardwright converted (its manifest follows the new info)
    companions: tuple[GeneratedPlan, ...]
    properties: dict[str, Any] | None = None  # the segment properties document, if asked
    # Levels added above the coarsest scale: a pyramid whose base is that scale, read and
    # never written (`writes_base` False); its upper levels are the new scales.
    levels: ConversionPlan | None = None

    dataset: ClassVar[str] = ADDITION
    preparing_tasks: ClassVar[int] = 0

    @property
    def new_levels(self) -> list[ConversionPlan]:
        """The plans of the scales this addition writes (above the one it reads)."""
        if self.levels is None:
            return []
        return [self.levels.level_plan(k) for k in range(1, self.levels.level_count)]

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
        """None of its own: its companions' block tasks read the scale, once."""
        return 0

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
        """What is written just before the info that names it: segment properties."""
        if self.properties is None:
            return []
        return [(PROPERTIES_KEY, metadata_text(self.properties).encode())]

    @property
    def new_scales(self) -> list[dict[str, Any]]:
        """The info's entries of the levels added (after the scales it has)."""
        if self.levels is None:
            return []
        return list(dict(self.levels.metadata_documents())["info"]["scales"][1:])

    @property
    def info_after(self) -> bytes:
        """The info, with the added directories named and the added levels after its scales
        (every other member as it was)."""
        document = json.loads(self.info_read)
        scales = [*document["scales"], *self.new_scales]
        return metadata_text({**document, **self.names, "scales": scales}).encode()

    def shards(self) -> Iterator[Any]:
        for level in self.new_levels:
            yield from level.shards()

    def for_shard_tasks(self) -> AdditionPlan | ConversionPlan:
        """The levels' pyramid, which its tasks run (the rest is the coordinator's)."""
        return self if self.levels is None else self.levels.for_shard_tasks()

    def metadata_documents(self) -> list[tuple[str, dict[str, Any]]]:
        """None at the job's start: the info is written last (lifecycle/addition.py)."""
        return []

    def describe(self) -> dict[str, Any]:
        pyramid = None if self.levels is None else self.levels.pyramid
        return {
            "format": "precomputed",
            "destination": self.dest,
            "source": self.dest,
            "dataset_written_by": "shardwright" if self.ours else "another tool",
            "scale": self.source.scale.key,
            "info_sha256_before": sha256(self.info_read),
            "info_sha256_after": sha256(self.info_after),
            "adds": self.names,
            "levels_from_scale": None if self.levels is None else self.levels.layout.level_key,
            "levels": [level.describe_level() for level in self.new_levels],
            "levels_factor": None if pyramid is None else list(pyramid.factor),
            "levels_method": None if pyramid is None else pyramid.method,
            "fill_missing": self.options.fill_missing,
        }

    def report(self) -> str:
        source = self.source
        chunk = source.scale.chunk_size
        chunks = math.prod(math.ceil(s / c) for s, c in zip(source.shape_xyz, chunk, strict=True))
        written_by = (
            "converted by shardwright"
            if self.ours
            else "written by another tool: it gains only .shardwright/ beside its objects"
        )
        added = ", ".join(f"{name}/" for name in self.names.values())
        read = sum(c.source_bytes for c in self.companions)
        lines = [f"addition     {self.dest}: a precomputed segmentation {written_by}"]
        if self.companions:
            lines.append(
                f"  reads      scale {source.scale.key}: {xyz(source.shape_xyz)} voxels of "
                f"{xyz(_resolution(source))} nm, {counted(chunks, 'chunk')} of {xyz(chunk)}, "
                f"{human_bytes(read)} decoded, once"
            )
        if self.properties is not None:
            count = len(self.properties["inline"]["ids"])
            lines.append(f"  properties {counted(count, 'segment')}' labels and numbers, one "
                         f"document ({human_bytes(len(self.documents[0][1]))})")  # fmt: skip
        for level in self.new_levels:
            lines.append(
                f"  level      {level.layout.level_key}: {xyz(level.size)} voxels of "
                f"{xyz(_plain(level.resolution))} nm, {counted(level.shard_count, 'shard')} of "
                f"{xyz(level.shard_shape_chunks)} chunks of {xyz(level.chunk_size)}, "
                f"~{human_bytes(level.estimated_shard_bytes)} each"
            )
        if self.levels is not None:
            assert self.levels.pyramid is not None
            base = self.levels
            lines.append(
                f"  from       scale {base.layout.level_key} ({xyz(base.size)} voxels), read once, "
                f"reduced by {xyz(self.levels.pyramid.factor)} ({self.levels.pyramid.method}), "
                f"~{human_bytes(base.peak_task_bytes)} per task"
            )
        adds = [added] if added else []
        adds += [f"scales {', '.join(s['key'] for s in self.new_scales)}"] if self.levels else []
        lines += [
            f"  adds       {'; '.join(adds)}; then, last, the info names them (one write, only "
            "if the info is still as read now)",
            "  keeps      every object the dataset has now, byte for byte",
        ]
        return "\n".join([*lines, *(c.report() for c in self.companions)])


def plan_addition(
    dest: str, options: ConvertOptions, properties: dict[str, Any] | None = None
) -> AdditionPlan:
    """The addition the options ask of the dataset at `dest` (see the module's docstring);
    `properties`: a segment properties document made already (else the options' table)."""
    deadlines.set_timeout(options.timeout)
    dest = absolute(dest).rstrip("/")
    asked = _check_options(options, properties is not None)
    if properties is None and options.segment_properties is not None:
        properties = _properties_of(options.segment_properties, options)
    options = dataclasses.replace(options, source_storage_options=options.storage_options)
    store = open_store(dest, options.storage_options)
    current = _read_info(store, dest)
    before = info_before(store, current)
    document = _info_document(before, dest)
    _check_finished(store, dest)
    source = _open(dest, options)
    labelled = tuple(name for name in asked if name != "mips")  # what needs a segmentation
    if labelled:
        check_segmentation(document.get("type"), source.dtype, source.num_channels, labelled)
    scales = {str(s.get("key")) for s in document.get("scales", []) if isinstance(s, dict)}
    wanted = ((MESH, "mesh", options.generate_meshes),
              (SKELETON, "skeletons", options.generate_skeletons))  # fmt: skip
    for output, member, generates in wanted:
        if generates:
            _check_directory(store, dest, document, member, DIRECTORIES[output], scales)
    if properties is not None:
        _check_properties(store, dest, document, scales)
    companions: tuple[GeneratedPlan, ...] = ()
    if options.generate_meshes or options.generate_skeletons:
        check_meshes_extra()
        labels = Labels(source, dest, source.shape_xyz, _resolution(source), _offset(source),
                        scale=source.scale.key)  # fmt: skip
        companions = generated_plans(labels, options)
    levels = None if options.mips in (None, 0) else _levels(dest, document, options, scales)
    return AdditionPlan(
        dest=dest,
        options=options,
        source=source,
        info_read=before,
        version=store.expected(INFO) if before == current else None,
        ours=store.exists(MANIFEST_KEY),
        companions=companions,
        properties=properties,
        levels=levels,
    )


def _levels(
    dest: str, document: dict[str, Any], options: ConvertOptions, scales: set[str]
) -> ConversionPlan:
    """The pyramid whose base is the dataset's coarsest scale (read, never written) and
    whose upper levels are the scales added: chunks and encoding as that scale's (an encoding
    shardwright only reads becomes compressed_segmentation), sharded."""
    top = document["scales"][-1]
    key = str(top.get("key"))
    base = _open(dest, dataclasses.replace(options, source_scale=key))
    encoding = str(top.get("encoding", "raw"))
    if encoding not in CHUNK_ENCODINGS:
        encoding = "compressed_segmentation"
    block = top.get("compressed_segmentation_block_size")
    level_options = ConvertOptions(
        format="precomputed",
        layer_type=str(document.get("type")),
        encoding=encoding,
        chunk_size=three(int(c) for c in base.scale.chunk_size),
        compressed_segmentation_block_size=(
            three(int(b) for b in block) if encoding == "compressed_segmentation" and block
            else None
        ),
        mips=options.mips,
        factor=options.factor,
        downsample=options.downsample,
        memory_budget=options.memory_budget,
        target_shard_bytes=options.target_shard_bytes,
        min_shards=options.min_shards,
        compression_level=options.compression_level,
        fill_missing=options.fill_missing,
        timeout=options.timeout,
        storage_options=options.storage_options,
        source_storage_options=options.storage_options,
        source_scale=key,
    )  # fmt: skip
    plan = make_plan(base, dest, level_options)
    if plan.pyramid is None or plan.level_count < 2:
        raise PlanError(
            f"{{mips}}: scale {key} ({xyz(base.shape_xyz)} voxels) is too small for a level "
            "above it",
            mips=NAMED,
        )
    added = [plan.level_plan(k).layout.level_key for k in range(1, plan.level_count)]
    taken = [k for k in added if k in scales or k in (*DIRECTORIES.values(), SEGMENT_PROPERTIES)]
    if taken:
        raise PlanError(
            f"{dest}: scale {taken[0]!r} is there already; the levels above {key} would be "
            f"{', '.join(added)}: pass fewer {{mips}} or another {{factor}}",
            mips=NAMED,
            factor=NAMED,
        )
    return dataclasses.replace(plan, writes_base=False)


def _check_options(options: ConvertOptions, has_properties: bool) -> tuple[str, ...]:
    """The options that ask for something to add (refused where none does, or where an
    option shapes a conversion's volume instead)."""
    asked = tuple(name for name in (*GENERATING, "segment_properties", "mips")
                  if getattr(options, name) not in (False, None, 0))  # fmt: skip
    if has_properties and "segment_properties" not in asked:
        asked = (*asked, "segment_properties")
    if not asked:
        raise PlanError(
            "convert takes SOURCE and DEST; DEST alone only with what it adds: "
            "{generate_meshes} / {generate_skeletons}, {segment_properties}, {mips}",
            generate_meshes=NAMED, generate_skeletons=NAMED, segment_properties=NAMED,
            mips=NAMED,
        )  # fmt: skip
    if options.mesh_level:
        raise PlanError(
            "{mesh_level}: an addition meshes the scale it reads; pass {source_scale} KEY to "
            "mesh a coarser scale of the dataset",
            mesh_level=NAMED,
            source_scale=NAMED,
        )
    defaults = ConvertOptions()
    given = [
        f.name
        for f in dataclasses.fields(options)
        if f.name not in ADDITION_OPTIONS and getattr(options, f.name) != getattr(defaults, f.name)
    ]
    if given:
        raise PlanError(
            "convert DEST alone adds to the dataset at DEST and writes no volume: "
            + ", ".join(f"{{{name}}}" for name in given)
            + " shape a conversion's volume (convert SOURCE DEST)",
            **dict.fromkeys(given, NAMED),
        )
    return asked


def _properties_of(table: str, options: ConvertOptions) -> dict[str, Any]:
    """The segment properties document of the table at `table` (read here, on threads)."""
    import dask

    with dask.config.set(scheduler="threads"):  # as the annotations' plan reads tables
        return segment_properties_of(table, options.source_storage_options, table)


def _check_properties(store: Store, dest: str, document: dict[str, Any], scales: set[str]) -> None:
    """Refuse segment properties the addition cannot write: where the info names another
    tool's, or a document is there that shardwright did not write (ours it replaces)."""
    if SEGMENT_PROPERTIES in scales:
        raise PlanError(f"{dest}: scale {SEGMENT_PROPERTIES!r} is where the properties would go")
    named = document.get("segment_properties")
    if named not in (None, SEGMENT_PROPERTIES):
        raise PlanError(
            f"{dest}/info names segment properties {named!r}, which shardwright did not "
            "write: shardwright never replaces another tool's; leave out {segment_properties}",
            segment_properties=NAMED,
        )
    try:
        there = store.read(PROPERTIES_KEY, small=True)
    except FileNotFoundError:
        return
    if sha256(there) not in written_here(store, PROPERTIES_KEY):
        raise PlanError(
            f"{dest}/{PROPERTIES_KEY} is there and shardwright did not write it: shardwright "
            "never replaces another tool's; leave out {segment_properties}",
            segment_properties=NAMED,
        )


def _read_info(store: Store, dest: str) -> bytes:
    try:
        return store.read(INFO, small=True)
    except FileNotFoundError:
        pass
    if store.exists("zarr.json") or store.exists(".zattrs") or store.exists(".zgroup"):
        raise PlanError(
            f"{dest} is a Zarr dataset: meshes and skeletons are precomputed objects and go "
            "beside a precomputed segmentation (convert it with {format} precomputed first)",
            format=NAMED,
        )
    raise PlanError(f"{dest} has no info: no precomputed dataset to add to")


def _info_document(text: bytes, dest: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise PlanError(f"{dest}/info is not valid JSON ({exc}); nothing was written") from None
    if not isinstance(document, dict) or not isinstance(document.get("scales"), list):
        raise PlanError(f"{dest}/info is no precomputed volume's info (no scales)")
    return document


def _check_finished(store: Store, dest: str) -> None:
    """A conversion of ours that has not finished is finished first (its `--resume`)."""
    if store.exists(JOB_KEY) and not store.exists(MANIFEST_KEY):
        raise PlanError(
            f"{dest} holds a conversion of shardwright's that has not finished: finish it "
            "with the same convert and {resume} first",
            resume=NAMED,
        )


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


def _check_directory(
    store: Store, dest: str, document: dict[str, Any], member: str, directory: str,
    scales: set[str],
) -> None:  # fmt: skip
    """Refuse a directory the addition cannot write: one the info names already that
    shardwright did not write (another tool's meshes are never replaced), or a scale's."""
    if directory in scales:
        raise PlanError(f"{dest}: scale {directory!r} is where the {member} would go")
    named = document.get(member)
    if named is None:
        return
    ours = store.exists(f"{directory}/{MANIFEST_KEY}") or store.exists(
        f"{directory}/.shardwright/job.json"
    )
    if named != directory or not ours:
        flag = "generate_meshes" if member == "mesh" else "generate_skeletons"
        raise PlanError(
            f"{dest}/info names {member} {named!r}, which shardwright did not write: "
            f"shardwright never replaces another tool's {member}; leave out {{{flag}}}",
            **{flag: NAMED},
        )


def _resolution(source: PrecomputedSource) -> tuple[float, float, float]:
    resolution = source.hints.resolution
    assert resolution is not None, "a precomputed scale records its resolution"
    return resolution


def _offset(source: PrecomputedSource) -> tuple[int, int, int]:
    return source.hints.voxel_offset or (0, 0, 0)


def _plain(values: tuple[float, ...]) -> list[int | float]:
    """Whole numbers as integers, as the info writes them."""
    return [int(v) if float(v).is_integer() else v for v in values]
