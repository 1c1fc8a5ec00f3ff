"""Meshes and skeletons: planning the sharded form of a directory of per-segment objects.

A segmentation's meshes (`neuroglancer_multilod_draco`, or legacy `<id>:0` meshes re-encoded
as one level of detail) and skeletons (`neuroglancer_skeletons`) are one or two objects per
segment id. Their sharded form keys each segment by its id, hashed (murmurhash3, preshift 0)
so shards fill evenly whatever the ids. The plan lists the source directory once (names and
sizes), checks what the listing can tell (ids, missing manifests), chooses the sharding from
the object count and bytes, and groups the ids by shard as two arrays (ids sorted by shard,
and where each shard's run starts): no Python object per segment, and no mesh in the client.
One Dask task per output shard then reads its segments' objects and writes the shard
(engine/objects.py).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from shardwright.common.urls import HDF5_SUFFIXES, split_hdf5
from shardwright.common.vocabulary import DatasetKind, OutputFormat
from shardwright.errors import NAMED, PlanError, within
from shardwright.formats.precomputed import meshes, skeletons
from shardwright.formats.precomputed.sharding import ShardingSpec
from shardwright.options import ConvertOptions
from shardwright.planning import checks
from shardwright.planning.sharding import sharding_spec
from shardwright.planning.text import human_bytes
from shardwright.sources.kinds import TIFF_SUFFIXES
from shardwright.stores import open_store
from shardwright.version import install_command

MULTILOD, SKELETONS, LEGACY = "multilod_mesh", "skeletons", "legacy_mesh"
OBJECT_TYPES = {
    meshes.MULTILOD_TYPE: MULTILOD,
    skeletons.SKELETON_TYPE: SKELETONS,
    meshes.LEGACY_TYPE: LEGACY,
}
VOLUME_TYPE = "neuroglancer_multiscale_volume"
STORED_IN = OutputFormat.PRECOMPUTED  # Neuroglancer reads meshes and skeletons in it alone
MAX_ID = 2**64 - 1
# Index sizes readers fetch per lookup: about 256 segments per minishard (a 6 KiB raw
# minishard index), at most 2**9 minishards (an 8 KiB shard index); then more shards.
OBJECTS_PER_MINISHARD = 256
MAX_MINISHARD_BITS = 9
MIN_OBJECTS_PER_SHARD = 64  # below this, more shards only add requests


@dataclass(frozen=True)
class ObjectShardTask:
    """One output shard: its key, number and the segment ids it holds (sorted)."""

    key: str
    shard_number: int
    ids: np.ndarray = field(repr=False)

    @property
    def chunk_count(self) -> int:
        return int(self.ids.size)


@dataclass(frozen=True)
class ObjectPlan:
    """Everything decided about converting one mesh or skeleton directory; writes nothing."""

    kind: str  # MULTILOD, SKELETONS or LEGACY
    source: str
    dest: str
    options: ConvertOptions
    source_info: dict[str, Any]
    info: dict[str, Any]  # the output `info`, with its sharding
    sharding: ShardingSpec
    object_count: int
    source_objects: int  # objects the listing found for these segments
    source_bytes: int
    ids_by_shard: np.ndarray = field(repr=False)  # uint64 ids, grouped by shard, each sorted
    shard_starts: np.ndarray = field(repr=False)  # [num_shards + 1] offsets into ids_by_shard

    dataset: ClassVar[str] = DatasetKind.OBJECTS
    preparing_unit: ClassVar[str] = "blocks"
    in_place: ClassVar[bool] = False
    spools: ClassVar[bool] = False
    holds_gil: ClassVar[bool] = False
    companions: ClassVar[tuple[()]] = ()  # meshes and skeletons have none

    @property
    def spool_budget(self) -> int:
        return self.options.budget.spool()

    @property
    def memory_budget(self) -> int:
        """Bytes a shard task may hold (its batches of source objects take an eighth)."""
        return self.options.memory_budget

    @property
    def compression_level(self) -> int | None:
        """The shard's gzip level for its minishard indexes and data (None: the default)."""
        return self.options.compression_level

    @property
    def source_storage_options(self) -> dict[str, Any]:
        """How shard tasks reach the source's store (credentials, endpoint)."""
        return dict(self.options.source_storage_options)

    @property
    def attributes(self) -> list[tuple[str, np.dtype, int]]:
        return skeletons.vertex_attributes(self.info) if self.kind == SKELETONS else []

    @property
    def shard_count(self) -> int:
        """Shards that hold at least one segment (the others are not written)."""
        return int(np.count_nonzero(np.diff(self.shard_starts)))

    @property
    def shard_total(self) -> int:
        return self.shard_count

    @property
    def preparing_tasks(self) -> int:
        return 0

    def shards(self) -> Iterator[ObjectShardTask]:
        """The non-empty shards, in shard-number order."""
        counts = np.diff(self.shard_starts)
        for number in np.flatnonzero(counts).tolist():
            lo, hi = int(self.shard_starts[number]), int(self.shard_starts[number + 1])
            yield ObjectShardTask(
                self.sharding.shard_filename(number), number, self.ids_by_shard[lo:hi]
            )

    @property
    def source_url(self) -> str:
        return self.source

    def for_shard_tasks(self) -> ObjectPlan:
        """The plan as shard tasks need it (each task carries its own ids)."""
        empty = np.zeros(0, np.uint64)
        return dataclasses.replace(self, ids_by_shard=empty, shard_starts=empty)

    def metadata_documents(self) -> list[tuple[str, dict[str, Any]]]:
        return [("info", self.info)]

    def source_keys(self, segment_id: int) -> list[str]:
        """The source objects of one segment that a shard task reads first."""
        if self.kind == MULTILOD:
            return [str(segment_id), f"{segment_id}.index"]
        if self.kind == SKELETONS:
            return [str(segment_id)]
        return [f"{segment_id}:0"]

    # -- reports --------------------------------------------------------------------------
    @property
    def estimated_shard_bytes(self) -> int:
        shards = max(1, self.shard_count)
        return math.ceil(self.source_bytes / shards)

    def describe(self) -> dict[str, Any]:
        spec = self.sharding
        per_shard = np.diff(self.shard_starts)
        per_shard = per_shard[per_shard > 0]
        return {
            "source": self.source,
            "destination": self.dest,
            "format": STORED_IN,
            "object_type": self.info["@type"],
            "converted_from": self.source_info.get("@type") if self.kind == LEGACY else None,
            "segments": self.object_count,
            "source_objects": self.source_objects,
            "source_bytes": self.source_bytes,
            "sharding": spec.to_json(),
            "shards": self.shard_count,
            "segments_per_shard": {
                "min": int(per_shard.min()) if per_shard.size else 0,
                "mean": round(float(per_shard.mean()), 1) if per_shard.size else 0,
                "max": int(per_shard.max()) if per_shard.size else 0,
            },
            "shard_index_bytes": spec.shard_index_nbytes,
            "minishard_index_bytes_mean": round(
                24 * self.object_count / max(1, self.shard_count * spec.num_minishards)
            ),
            "estimated_bytes_per_shard": self.estimated_shard_bytes,
            "memory_budget": self.options.memory_budget,
        }

    def report(self) -> str:
        d = self.describe()
        spec = self.sharding
        kind = {MULTILOD: "multi-resolution meshes", SKELETONS: "skeletons"}.get(
            self.kind, "legacy meshes, re-encoded as one level of detail (Draco)"
        )
        per = d["segments_per_shard"]
        lines = [
            f"source       {self.source} ({kind})",
            f"destination  {self.dest} ({d['object_type']}, sharded)",
            f"segments     {self.object_count:,} ({self.source_objects:,} source objects, "
            f"{human_bytes(self.source_bytes)})",
            f"sharding     {spec.hash}, preshift {spec.preshift_bits}, minishard "
            f"{spec.minishard_bits} ({spec.num_minishards} per shard), shard {spec.shard_bits}"
            f"; minishard index {spec.minishard_index_encoding}, data {spec.data_encoding}",
            f"shards       {self.shard_count:,} written of {spec.num_shards:,}; segments per "
            f"shard {per['min']}..{per['max']} (mean {per['mean']}); ~"
            f"{human_bytes(self.estimated_shard_bytes)} per shard",
            f"indexes      shard index {human_bytes(spec.shard_index_nbytes)}, minishard index ~"
            f"{human_bytes(d['minishard_index_bytes_mean'])} on average",
            f"memory       encoded objects beyond {human_bytes(self.spool_budget)} spool to local "
            "disk; one task per shard, objects read in batches",
        ]
        return "\n".join(lines)


# -- detection ---------------------------------------------------------------------------
def object_source_info(source: Any, storage_options: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `info` of a mesh or skeleton directory, None for anything else (volumes, files);
    PlanError for an `info` whose `@type` this converter does not know."""
    if not isinstance(source, str) or split_hdf5(source) is not None:
        return None
    if source.lstrip().startswith("{"):  # a TensorStore spec given as its JSON text
        return None
    if source.lower().rstrip("/").endswith((".npy", ".zarr", *HDF5_SUFFIXES, *TIFF_SUFFIXES)):
        return None
    try:
        text = open_store(source, dict(storage_options)).read("info")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    try:
        info = json.loads(text)
    except ValueError:
        return None  # not a precomputed info: the volume sources report what it is
    if not isinstance(info, dict):
        return None
    kind = info.get("@type")
    if kind in OBJECT_TYPES:
        return info
    if kind in (None, VOLUME_TYPE):
        return None
    raise PlanError(
        f"{source}/info has @type {kind!r}; shardwright converts "
        f"{', '.join([VOLUME_TYPE, *OBJECT_TYPES])}"
    )


# -- planning ----------------------------------------------------------------------------
def make_object_plan(
    source: str, dest: str, options: ConvertOptions, source_info: dict[str, Any]
) -> ObjectPlan:
    """List the source directory, check it, choose the sharding and group the ids."""
    kind = OBJECT_TYPES[source_info["@type"]]
    _check_options(options, source)
    if "sharding" in source_info:
        raise PlanError(f"{source} is already sharded (its info has a sharding spec)")
    try:
        if kind == MULTILOD:
            meshes.check_multilod_info(source_info)
            info = {k: v for k, v in source_info.items() if k != "sharding"}
        elif kind == SKELETONS:
            skeletons.vertex_attributes(source_info)
            info = {k: v for k, v in source_info.items() if k != "sharding"}
        else:
            _check_legacy_convertible(options, source)
            info = meshes.multilod_info_for_legacy(source_info)
    except ValueError as exc:
        raise within(exc, f"{source}/info: ") from None
    listing = open_store(source, options.source_storage_options).list_sizes()
    ids, source_objects, source_bytes = _segments(kind, listing, source)
    sharding = choose_sharding(options, kind, ids.size, source_bytes)
    info["sharding"] = sharding.to_json()
    shard_numbers, _ = sharding.locate(ids)
    order = np.lexsort((ids, shard_numbers))
    counts = np.bincount(shard_numbers.astype(np.int64), minlength=sharding.num_shards)
    return ObjectPlan(
        kind=kind,
        source=source,
        dest=dest,
        options=options,
        source_info=source_info,
        info=info,
        sharding=sharding,
        object_count=int(ids.size),
        source_objects=source_objects,
        source_bytes=source_bytes,
        ids_by_shard=ids[order],
        shard_starts=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
    )


def _check_options(options: ConvertOptions, source: str) -> None:
    checks.check_written_in(
        options, STORED_IN, f"{source} holds meshes or skeletons: their sharded form is"
    )
    if options.mips not in (None, 0):
        raise PlanError(
            f"{source} holds meshes or skeletons: {{mips}} applies to volumes", mips=NAMED
        )
    if options.engine != "cpu":
        raise PlanError("meshes and skeletons are copied, not encoded: they run on the CPU")


def _check_legacy_convertible(options: ConvertOptions, source: str) -> None:
    """Legacy meshes have no sharded form: say so, and convert them only when asked."""
    if not options.legacy_to_multires:
        raise PlanError(
            f"{source} holds legacy single-resolution meshes (<id>:0 manifests), which the "
            "sharded format cannot store; pass {legacy_to_multires} to re-encode them as "
            "multi-resolution Draco meshes with one level of detail",
            legacy_to_multires=True,
        )
    try:
        import DracoPy  # noqa: F401
    except ImportError:
        raise PlanError(
            "re-encoding legacy meshes needs a Draco encoder: " + install_command("meshes")
        ) from None


def segment_id_of(name: str) -> int | None:
    """The id a base-10 object name spells, or None (info, fragments, other files)."""
    if not name.isdigit() or (len(name) > 1 and name[0] == "0"):
        return None
    value = int(name)
    return value if value <= MAX_ID else None


def _segments(kind: str, listing: Mapping[str, int], source: str) -> tuple[np.ndarray, int, int]:
    """(sorted segment ids, source objects, source bytes) from one listing of the directory;
    a fragment data file without its manifest is an error naming the id."""
    if kind == LEGACY:
        found = {}
        for name, size in listing.items():
            stem, colon, lod = name.rpartition(":")
            if colon and lod == "0" and (segment := segment_id_of(stem)) is not None:
                found[segment] = size
        ids = np.fromiter(found, dtype=np.uint64, count=len(found))
        fragment_bytes = sum(s for n, s in listing.items() if n != "info") - sum(found.values())
        total = sum(found.values()) + fragment_bytes
        objects = sum(1 for n in listing if n != "info")
    elif kind == SKELETONS:
        found = {s: size for n, size in listing.items() if (s := segment_id_of(n)) is not None}
        ids = np.fromiter(found, dtype=np.uint64, count=len(found))
        total, objects = sum(found.values()), len(found)
    else:
        data = {s: size for n, size in listing.items() if (s := segment_id_of(n)) is not None}
        manifests = {
            s: size
            for n, size in listing.items()
            if n.endswith(".index") and (s := segment_id_of(n[: -len(".index")])) is not None
        }
        orphans = sorted(set(data) - set(manifests))
        if orphans:
            raise PlanError(
                f"segment {orphans[0]}: {source}/{orphans[0]} holds fragment data but its "
                f"manifest {orphans[0]}.index is missing"
                + (f" ({len(orphans) - 1} more segments too)" if len(orphans) > 1 else "")
            )
        ids = np.fromiter(manifests, dtype=np.uint64, count=len(manifests))
        total = sum(manifests.values()) + sum(data.values())
        objects = len(manifests) + len(data)
    if not ids.size:
        raise PlanError(f"{source} has an info but no segment objects")
    return np.sort(ids), objects, total


def choose_sharding(
    options: ConvertOptions, kind: str, count: int, total_bytes: int
) -> ShardingSpec:
    """Hashed sharding for segment ids: shards of about the target size, at least a few for
    parallel tasks when there are enough segments, and small indexes."""
    by_bytes = math.ceil(math.log2(max(total_bytes / options.target_shard_bytes, 1)))
    most_per_shard = OBJECTS_PER_MINISHARD << MAX_MINISHARD_BITS
    by_count = math.ceil(math.log2(max(count / most_per_shard, 1)))
    parallel = min(
        math.ceil(math.log2(max(options.min_shards, 1))),
        int(math.log2(max(count / MIN_OBJECTS_PER_SHARD, 1))),
    )
    shard_bits = max(by_bytes, by_count, parallel)
    per_shard = count / 2**shard_bits
    minishard_bits = min(
        MAX_MINISHARD_BITS, math.ceil(math.log2(max(per_shard / OBJECTS_PER_MINISHARD, 1)))
    )
    if options.shard_bits is not None:
        shard_bits = options.shard_bits
    if options.minishard_bits is not None:
        minishard_bits = options.minishard_bits
    compression = options.compression or ("raw" if kind != SKELETONS else "gzip")
    if compression == "none":
        compression = "raw"
    if compression not in ("raw", "gzip"):
        raise PlanError(
            f"sharded meshes, skeletons and annotations store data raw or gzip, not {compression}"
        )
    return sharding_spec(
        options.preshift_bits or 0,
        options.hash or "murmurhash3_x86_128",
        minishard_bits,
        shard_bits,
        compression,
    )
