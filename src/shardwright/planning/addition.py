"""Meshes and skeletons added to a precomputed segmentation that already exists, ours or
another tool's, without copying a voxel (`shardwright convert DEST --generate-meshes`).

The dataset is read once, by the block tasks of its meshes and skeletons (planning/
generated.py), which are written below it (`mesh/`, `skeletons/`) as datasets of their own.
The dataset's own objects are never written: only its `info`, last, naming them, in one write
conditional on the version read here (lifecycle/addition.py), and `.shardwright/` beside its
objects. Whatever cannot be done is refused here, before anything is written.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from shardwright.common import deadlines
from shardwright.common.urls import absolute
from shardwright.errors import NAMED, PlanError, SourceError
from shardwright.generation.exchange import MESH, SKELETON
from shardwright.lifecycle.addition import INFO, info_before, sha256
from shardwright.lifecycle.journal import JOB_KEY
from shardwright.lifecycle.manifest import ADDITION, MANIFEST_KEY, metadata_text
from shardwright.options import ConvertOptions
from shardwright.planning.generated import (
    DIRECTORIES,
    GeneratedPlan,
    Labels,
    check_segmentation,
    directory_names,
    generated_plans,
)
from shardwright.planning.text import counted, human_bytes, xyz
from shardwright.sources import open_source
from shardwright.sources.precomputed import PrecomputedSource
from shardwright.stores import Store, open_store
from shardwright.stores.base import Expected

# The options an addition takes: what its meshes and skeletons are, what it reads and how
# it reaches the dataset. Every other option shapes a conversion's volume and is refused.
ADDITION_OPTIONS = frozenset({
    "generate_meshes", "generate_skeletons", "mesh_max_error", "mesh_lods", "mesh_block",
    "dust_threshold", "object_ids", "memory_budget", "target_shard_bytes", "min_shards",
    "compression_level", "source_scale", "fill_missing", "timeout", "storage_options",
    "source_storage_options",
})  # fmt: skip


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

    dataset: ClassVar[str] = ADDITION
    shard_count: ClassVar[int] = 0
    shard_total: ClassVar[int] = 0
    preparing_tasks: ClassVar[int] = 0

    @property
    def source_url(self) -> str:
        return self.dest

    @property
    def source_bytes(self) -> int:
        """None of its own: its companions' block tasks read the scale, once."""
        return 0

    @property
    def spool_budget(self) -> int:
        return self.options.memory_budget

    @property
    def names(self) -> dict[str, str]:
        """What the info names once the job is done: each added directory."""
        return directory_names(self.companions)

    @property
    def info_after(self) -> bytes:
        """The info, with the added directories named (every other member as it was)."""
        document = json.loads(self.info_read)
        return metadata_text({**document, **self.names}).encode()

    def shards(self) -> Iterator[Any]:
        return iter(())

    def for_shard_tasks(self) -> AdditionPlan:
        return self

    def metadata_documents(self) -> list[tuple[str, dict[str, Any]]]:
        """None at the job's start: the info is written last (lifecycle/addition.py)."""
        return []

    def describe(self) -> dict[str, Any]:
        return {
            "format": "precomputed",
            "destination": self.dest,
            "source": self.dest,
            "dataset_written_by": "shardwright" if self.ours else "another tool",
            "scale": self.source.scale.key,
            "info_sha256_before": sha256(self.info_read),
            "info_sha256_after": sha256(self.info_after),
            "adds": self.names,
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
        lines = [
            f"addition     {self.dest}: a precomputed segmentation {written_by}",
            f"  reads      scale {source.scale.key}: {xyz(source.shape_xyz)} "
            f"voxels of {xyz(_resolution(source))} nm, {counted(chunks, 'chunk')} of "
            f"{xyz(chunk)}, {human_bytes(read)} decoded, once",
            f"  adds       {added}; then, last, the info names them (one write, only if the "
            "info is still as read now)",
            "  keeps      every object the dataset has now, byte for byte",
        ]
        return "\n".join([*lines, *(c.report() for c in self.companions)])


def plan_addition(dest: str, options: ConvertOptions) -> AdditionPlan:
    """The addition the options ask of the dataset at `dest` (see the module's docstring)."""
    deadlines.set_timeout(options.timeout)
    dest = absolute(dest).rstrip("/")
    _check_options(options)
    options = _reaching_the_dataset(options)
    store = open_store(dest, options.storage_options)
    current = _read_info(store, dest)
    before = info_before(store, current)
    document = _info_document(before, dest)
    _check_finished(store, dest)
    source = _open(dest, options)
    check_segmentation(document.get("type"), source.dtype, source.num_channels)
    scales = {str(s.get("key")) for s in document.get("scales", []) if isinstance(s, dict)}
    asked = ((MESH, "mesh", options.generate_meshes),
             (SKELETON, "skeletons", options.generate_skeletons))  # fmt: skip
    for output, member, wanted in asked:
        if wanted:
            _check_directory(store, dest, document, member, DIRECTORIES[output], scales)
    labels = Labels(source, dest, source.shape_xyz, _resolution(source), _offset(source),
                    scale=source.scale.key)  # fmt: skip
    companions = generated_plans(labels, options)
    return AdditionPlan(
        dest=dest,
        options=options,
        source=source,
        info_read=before,
        version=store.expected(INFO) if before == current else None,
        ours=store.exists(MANIFEST_KEY),
        companions=companions,
    )


def _check_options(options: ConvertOptions) -> None:
    if not (options.generate_meshes or options.generate_skeletons):
        raise PlanError(
            "convert DEST alone adds to the dataset at DEST: name what, with "
            "{generate_meshes}, {generate_skeletons} or {segment_properties}",
            generate_meshes=NAMED, generate_skeletons=NAMED, segment_properties=NAMED,
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
            "convert DEST alone adds meshes and skeletons to the dataset at DEST and writes "
            "no volume: " + ", ".join(f"{{{name}}}" for name in given) + " shape a "
            "conversion's volume (convert SOURCE DEST)",
            **dict.fromkeys(given, NAMED),
        )


def _reaching_the_dataset(options: ConvertOptions) -> ConvertOptions:
    """The dataset is both read and written: one set of storage options reaches it."""
    reach = options.storage_options or options.source_storage_options
    if (
        options.storage_options
        and options.source_storage_options
        and (options.storage_options != options.source_storage_options)
    ):
        raise PlanError(
            "{storage_options} and {source_storage_options} differ, but an addition reads "
            "and writes one dataset: give {storage_options} alone",
            storage_options=NAMED, source_storage_options=NAMED,
        )  # fmt: skip
    return dataclasses.replace(options, storage_options=reach, source_storage_options=reach)


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
