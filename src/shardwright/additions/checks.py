"""What an addition to a dataset that exists refuses, before anything is written: options
that shape a conversion's volume, a dataset it cannot read or extend, names another tool
wrote (meshes, skeletons, segment properties are never replaced), a conversion of ours that
has not finished."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.errors import NAMED, PlanError
from shardwright.formats.precomputed.segment_properties import SEGMENT_PROPERTIES
from shardwright.generation.options import TEASAR_FIELDS
from shardwright.lifecycle.addition import read_record, sha256, written_here
from shardwright.lifecycle.journal import JOB_KEY, receipt_key
from shardwright.options import ConvertOptions
from shardwright.planning.formats import FormatAdding, FormatReader, driver, readers
from shardwright.planning.generated import GENERATING
from shardwright.sources.tables import segment_properties_of
from shardwright.stores import Store

# The options an addition takes: what it adds (meshes and skeletons and how they are made,
# segment properties, levels and how they are reduced), what it reads and how it reaches the
# dataset (`storage_options`; the table, `source_storage_options`). Every other option shapes
# a conversion's volume and is refused.
ADDITION_OPTIONS = frozenset({
    "generate_meshes", "generate_skeletons", "mesh_max_error", "mesh_lods", "mesh_block",
    "dust_threshold", "object_ids", "memory_budget", "target_shard_bytes", "min_shards",
    "compression_level", "source_scale", "fill_missing", "timeout", "storage_options",
    "source_storage_options", "segment_properties", "mips", "factor", "downsample",
    *TEASAR_FIELDS, "tick_threshold",
})  # fmt: skip
PROPERTIES_KEY = f"{SEGMENT_PROPERTIES}/info"


def check_options(options: ConvertOptions, has_properties: bool) -> tuple[str, ...]:
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


def properties_of(table: str, options: ConvertOptions) -> dict[str, Any]:
    """The segment properties document of the table at `table` (read here, on threads)."""
    import dask

    with dask.config.set(scheduler="threads"):  # as the annotations' plan reads tables
        return segment_properties_of(table, options.source_storage_options, table)


def check_properties(store: Store, dest: str, document: dict[str, Any], scales: set[str]) -> None:
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


def read_root(store: Store, dest: str) -> tuple[tuple[FormatReader, FormatAdding], str, bytes]:
    """The dataset's metadata document (its root: a precomputed volume's `info`, the
    `zarr.json` of an OME-Zarr 0.5 group, the `.zattrs` of an OME-Zarr 0.4 group), looked
    for in the order of the formats shardwright adds to, with that format's reader and its
    additions' part, and the document's key."""
    for name, reader in readers():
        adding = driver(name).adding
        if adding is None or not all(store.exists(key) for key in reader.beside):
            continue
        try:
            return (reader, adding), reader.metadata_key, store.read(reader.metadata_key,
                                                                      small=True)  # fmt: skip
        except FileNotFoundError:
            continue
    if store.exists(".zgroup"):
        raise PlanError(
            f"{dest} is a Zarr v2 group without .zattrs: no OME-Zarr multiscales to add levels to"
        )
    if store.exists(".zarray"):
        raise PlanError(
            f"{dest} is a bare Zarr v2 array: shardwright adds levels to an OME-Zarr group, "
            "whose multiscales name them"
        )
    raise PlanError(f"{dest} has no info, zarr.json or .zgroup: no dataset to add to")


def root_document(text: bytes, dest: str, key: str, adding: FormatAdding) -> dict[str, Any]:
    """The metadata document parsed, refused where it is not what its name says."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise PlanError(f"{dest}/{key} is not valid JSON ({exc}); nothing was written") from None
    adding.check_root(document, dest)
    assert isinstance(document, dict), "check_root refuses a root that is no JSON object"
    return document


def check_levels_only(asked: tuple[str, ...], dest: str, what: str) -> None:
    """A dataset whose root names no meshes, skeletons or properties (`what` it is: an
    OME-Zarr group) gains levels only."""
    other = [name for name in asked if name != "mips"]
    if other:
        raise PlanError(
            ", ".join(f"{{{name}}}" for name in other) + f": meshes, skeletons and segment "
            f"properties go beside a precomputed segmentation; {dest} is {what}, to which "
            "shardwright adds levels ({mips})",
            mips=NAMED, **dict.fromkeys(other, NAMED),
        )  # fmt: skip


def check_finished(store: Store, dest: str) -> None:
    """A conversion of ours that has not finished is finished first (its `--resume`)."""
    if store.exists(JOB_KEY) and not store.exists(MANIFEST_KEY):
        raise PlanError(
            f"{dest} holds a conversion of shardwright's that has not finished: finish it "
            "with the same convert and {resume} first",
            resume=NAMED,
        )


def check_directory(
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


def check_level_places(store: Store, dest: str, keys: list[str]) -> None:
    """Refuse levels whose folders hold objects shardwright did not write (a folder the
    metadata does not name, left by another tool): they would be written over. A stopped
    addition's own are there on resume: level shards with their receipts, array metadata
    its record names."""
    stopped = read_record(store)
    for key in keys:
        for name in store.list_keys(key):
            if stopped is not None and store.exists(receipt_key(stopped.job, name)):
                continue
            if sha256(store.read(name, small=True)) in written_here(store, name):
                continue
            raise PlanError(
                f"{dest}/{name} is there and shardwright did not write it: level {key} would "
                "be written over it; move it away, or add fewer levels ({mips})",
                mips=NAMED,
            )
