"""Check meshes or skeletons: every shard against the manifest, and every segment's object
against what it was converted or made from.

Each segment is looked up as a reader does (shard index, minishard index, ranged read).

Converted (`--with-meshes` / `--with-skeletons`): every segment of the unsharded source must
be in the shards. A skeleton must equal its source file byte for byte; a multi-resolution
mesh's manifest must equal `<id>.index` and the bytes stored right before it must equal the
fragment data file `<id>`; a legacy mesh re-encoded as one level of detail must parse, and its
fragment sizes must add up to the bytes before it. A seeded sample of segments is compared by
default, all with `full=True`.

Generated (`--generate-meshes` / `--generate-skeletons`): every segment over the dust
threshold must have its object: a mesh with triangles at every level of detail, a skeleton
with at least one edge, their vertices inside the segment's bounding box plus one voxel. The
segments are the job's census (its tables, counted against the manifest) by default, and the
volume itself (the level meshed, read from the volume beside the objects) with `full=True`;
every one is looked up, a seeded sample decoded (all with `full=True`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import numpy as np

from shardwright.common.vocabulary import DatasetKind
from shardwright.errors import ShardwrightError
from shardwright.formats.precomputed import meshes
from shardwright.formats.precomputed.sharded_reader import ShardedReader
from shardwright.formats.precomputed.sharding import ShardingSpec
from shardwright.formats.precomputed.skeletons import check_skeleton, vertex_attributes
from shardwright.generation import census
from shardwright.generation.grid import three
from shardwright.lifecycle.journal import CENSUS
from shardwright.lifecycle.manifest import Manifest
from shardwright.planning.objects import (
    LEGACY,
    MULTILOD,
    OBJECT_TYPES,
    SKELETONS,
    STORED_IN,
    segment_id_of,
)
from shardwright.sources import Source, open_source
from shardwright.stores import Store, open_store
from shardwright.verification import skeleton_quality
from shardwright.verification.integrity import check_precomputed_shard
from shardwright.verification.report import VerifyReport
from shardwright.verification.shards import check_shards
from shardwright.verification.state import check_metadata, manifest_of


def verify_objects(
    report: VerifyReport,
    store: Store,
    manifest: Manifest,
    against: str | None,
    *,
    full: bool,
    sample: int,
    source_storage_options: dict[str, Any] | None,
) -> None:
    """Fill `report` for a mesh or skeleton destination (converted from `against`, or
    generated from the volume beside it)."""
    info = json.loads(store.read("info"))
    spec = ShardingSpec.from_json(info["sharding"])
    check_shards(report, store, manifest, lambda key: check_precomputed_shard(store, key, spec))
    if manifest.dataset == DatasetKind.GENERATED:
        _verify_generated(report, store, manifest, info, spec, full=full, sample=sample)
        return
    if against is None:
        return
    source = open_store(against, source_storage_options)
    source_info = json.loads(source.read("info"))
    kind = OBJECT_TYPES.get(source_info.get("@type"), "")
    names = source.list_sizes()
    suffix = {LEGACY: ":0", MULTILOD: ".index"}.get(kind, "")  # the object naming a segment
    ids = sorted(
        segment
        for name in names
        if name.endswith(suffix)
        and (segment := segment_id_of(name[: len(name) - len(suffix)])) is not None
    )
    reader = ShardedReader(spec, store.read_range)
    picks = _sampled(len(ids), sample, full)
    found = 0
    for i, segment in enumerate(ids):
        if reader.locate(segment) is None:
            report.problems.append(f"segment {segment}: absent from the shards")
            continue
        found += 1
        if i in picks:
            problem = _compare_segment(kind, segment, reader, store, source)
            report.objects_checked += 1
            if problem:
                report.problems.append(f"segment {segment}: {problem}")
    report.notes.append(f"{found:,} of the source's {len(ids):,} segments are in the shards; "
                        f"{report.objects_checked:,} compared with the source")  # fmt: skip


def verify_companions(
    report: VerifyReport, store: Store, manifest: Manifest, *, full: bool, sample: int
) -> None:
    """The meshes and skeletons a volume's job generated beside it (each directory its
    manifest's companions name), checked as `verify` checks each alone: their problems and
    notes named by the directory."""
    names = [where.rstrip("/").rpartition("/")[2] for where in manifest.companions]
    verify_directories(report, store, names, full=full, sample=sample)


def verify_directories(
    report: VerifyReport, store: Store, names: list[str], *, full: bool, sample: int
) -> None:
    for name in names:
        sub = open_store(f"{store.url}/{name}", store.storage_options)
        part = VerifyReport(sub.url, STORED_IN)
        companion = manifest_of(part, sub)
        if companion is not None and companion.dataset == DatasetKind.GENERATED:
            check_metadata(part, sub, companion)
            verify_objects(part, sub, companion, None, full=full, sample=sample,
                           source_storage_options=None)  # fmt: skip
        elif companion is not None:  # converted: verified against its own source
            continue
        report.shards_checked += part.shards_checked
        report.objects_checked += part.objects_checked
        report.problems += [f"{name}/: {problem}" for problem in part.problems]
        report.notes += [f"{name}/: {note}" for note in part.notes]


def _sampled(count: int, sample: int, full: bool) -> set[int]:
    """The indexes of the segments decoded: all with `full`, else a seeded sample."""
    if full or count <= sample:
        return set(range(count))
    return set(np.random.default_rng(0).choice(count, sample, replace=False).tolist())


def _compare_segment(
    kind: str, segment: int, reader: ShardedReader, store: Store, source: Store
) -> str | None:
    where = reader.locate(segment)
    stored = reader.read(segment)
    assert where is not None and stored is not None  # looked up before
    if kind == SKELETONS:
        return None if stored == source.read(str(segment)) else "differs from the source skeleton"
    name, start, _ = where
    try:
        fragments = meshes.MultiLodManifest.from_bytes(stored).data_nbytes
    except ValueError as exc:
        return f"its manifest does not parse: {exc}"
    if fragments > start:
        return "its fragments would start before the shard's data"
    data = store.read_range(name, start - fragments, start)
    if kind == LEGACY:
        return None if len(data) == fragments else "its fragment data is truncated"
    if stored != source.read(f"{segment}.index"):
        return f"its manifest differs from {segment}.index"
    if data != (source.read(str(segment)) if fragments else b""):
        return f"the fragment data before its manifest differs from {segment}"
    return None


def _verify_generated(
    report: VerifyReport,
    store: Store,
    manifest: Manifest,
    info: dict[str, Any],
    spec: ShardingSpec,
    *,
    full: bool,
    sample: int,
) -> None:
    """Every segment over the dust threshold has its object, and those decoded are whole."""
    plan = manifest.plan
    what = "mesh" if info.get("@type") == meshes.MULTILOD_TYPE else "skeleton"
    volume = None
    if full:
        volume = _meshed_volume(report, store, plan)
        segments = None if volume is None else _volume_census(volume, plan)
        counted = (f"the volume (scale {plan['generated_from_scale']})"
                   if plan.get("generated_from_scale")
                   else f"the volume (level {plan.get('generated_from_level', 0)})")  # fmt: skip
    else:
        segments = _job_census(report, store, manifest)
        counted = "the job's census"
    if segments is None:
        return
    count, tables = segments
    reader = ShardedReader(spec, store.read_range)
    picks = _sampled(count, sample, full)
    traced = _sampled(count, skeleton_quality.SAMPLE, False) if what == "skeleton" else set()
    ratios: dict[int, float] = {}
    check = _ObjectCheck(store, info, plan)
    found = decoded = 0
    rows = itertools.chain.from_iterable(tables)
    for i, row in enumerate(rows):
        segment = int(row["segment"])
        where = reader.locate(segment)
        if where is None:
            report.problems.append(f"segment {segment}: no {what} ({counted} holds it)")
            continue
        found += 1
        if i in picks:
            decoded += 1
            blob = reader.read(segment)
            assert blob is not None
            problem = check.mesh(where, blob, row) if what == "mesh" else check.skeleton(blob, row)
            if problem:
                report.problems.append(f"segment {segment}: its {what} {problem}")
            elif volume is not None and i in traced:
                box = (row["low"], row["high"])
                whole = skeleton_quality.whole_pass_cable(volume, segment, *box, check.resolution,
                                                          plan.get("teasar"))  # fmt: skip
                if whole:
                    ratios[segment] = check.cable(blob) / whole
    report.notes.append(
        f"{count:,} segments over the dust threshold in {counted}, {found:,} with a "
        f"{what}; {decoded:,} decoded ({check.rule})"
    )
    if volume is not None and what == "skeleton":
        report.notes.append(skeleton_quality.summary(ratios, len(traced) - len(ratios)))
    report.objects_checked += decoded


Census = tuple[int, Iterator[np.ndarray]]  # how many segments, and their tables one by one


def _job_census(report: VerifyReport, store: Store, manifest: Manifest) -> Census | None:
    """The segments the job counted: its census tables (read one at a time, so that verify
    holds one shard's segments), their count against the manifest's."""
    present = manifest.totals.segments_present
    sizes = store.sizes_below(f"{CENSUS}{manifest.job or 'unjournaled'}")
    if present is None and not sizes:
        report.notes.append("no census (made before shardwright kept one): segments unchecked")
        return None
    count = sum(census.row_count(size) for size in sizes.values())
    if present is not None and count != present:
        report.problems.append(
            f"the job's census lists {count:,} segments, its manifest counts {present:,} "
            "present: a census table under .shardwright/census/ is missing or altered"
        )

    def tables() -> Iterator[np.ndarray]:
        for key in sorted(sizes):
            try:
                yield census.decode(store.read(key, small=True))  # one GET, a control object
            except ShardwrightError as exc:
                report.problems.append(f"{key}: {exc}")

    return count, tables()


def _meshed_volume(report: VerifyReport, store: Store, plan: dict[str, Any]) -> Source | None:
    """The level the objects were made from, of the volume beside them (whose info names
    them); None, said in the report, where it is not that."""
    volume_url, _, name = store.url.rpartition("/")
    try:
        volume_info = json.loads(open_store(volume_url, store.storage_options).read("info"))
        if name not in (volume_info.get("mesh"), volume_info.get("skeletons")):
            raise ValueError(f"its info names no {name!r} directory")
        level = int(plan.get("generated_from_level", 0))
        scale = plan.get("generated_from_scale") or volume_info["scales"][level]["key"]
        return open_source(volume_url, scale_key=str(scale),
                           storage_options=store.storage_options,
                           fill_missing=bool(plan.get("fill_missing")))  # fmt: skip
    except (OSError, ValueError, KeyError, IndexError, TypeError, ShardwrightError) as exc:
        report.problems.append(
            f"{volume_url}: not the volume these objects were made from ({exc}); --full "
            "counts the segments there"
        )
        return None


def _volume_census(source: Source, plan: dict[str, Any]) -> Census:
    """The segments over the dust threshold (and among the object ids asked for) of the level
    the objects were made from (`source`)."""
    step = [int(b) for b in plan.get("block_xyz", (256, 256, 256))]
    counts: dict[int, tuple[int, census.Box]] = {}
    shape = source.shape_xyz
    for corner in itertools.product(*(range(0, n, b) for n, b in zip(shape, step, strict=True))):
        start = three(corner)
        stop = three(min(a + b, n) for a, b, n in zip(start, step, shape, strict=True))
        labels = np.asarray(source.read(start, stop)[..., 0])
        for segment, part in census.block_census(labels, start).items():
            counts[segment] = census.joined([counts.get(segment, (0, census.NO_BOX)), part])
    wanted = None if plan.get("object_ids") is None else set(plan["object_ids"])
    dust = max(1, int(plan.get("dust_threshold", 0)))
    table = np.array(
        sorted((s, n, lo, hi) for s, (n, (lo, hi)) in counts.items()
               if n >= dust and (wanted is None or s in wanted)),
        census.ROW,
    ).reshape(-1)  # fmt: skip
    return len(table), iter([table])


class _ObjectCheck:
    """Decodes one generated object and says what is wrong with it, if anything."""

    def __init__(self, store: Store, info: dict[str, Any], plan: dict[str, Any]) -> None:
        self.store = store
        self.top = (1 << int(info.get("vertex_quantization_bits", 16))) - 1
        self.attributes = vertex_attributes(info) if "vertex_attributes" in info else []
        self.resolution = np.asarray(plan.get("resolution_nm", np.nan), np.float64)
        self.origin = np.asarray(plan.get("grid_origin_nm", np.nan), np.float64)
        try:
            import DracoPy

            self.draco: Any = DracoPy
        except ImportError:
            self.draco = None
        placed = not np.isnan(self.resolution).any()
        self.rule = ("triangles at every level of detail" if "vertex_quantization_bits" in info
                     else "at least one edge") + (
            ", vertices inside the segment's box plus one voxel" if placed else "")  # fmt: skip
        if "vertex_quantization_bits" in info and self.draco is None:
            self.rule = "fragment bytes at every level of detail: DracoPy is absent"

    def _outside(self, points: np.ndarray, row: np.ndarray) -> str | None:
        """Where a vertex lies outside the segment's voxels grown by one voxel, if one does."""
        if np.isnan(self.resolution).any() or not len(points):
            return None
        low = self.origin + (row["low"] - 1.5) * self.resolution
        high = self.origin + (row["high"] + 0.5) * self.resolution
        outside = ((points < low) | (points > high)).any(axis=1)
        if not outside.any():
            return None
        point = np.round(points[np.argmax(outside)], 1).tolist()
        return (f"has a vertex at {point} nm, outside the segment's box "
                f"{np.round(low, 1).tolist()} - {np.round(high, 1).tolist()} nm")  # fmt: skip

    def cable(self, blob: bytes) -> float:
        """A decoded skeleton's cable length (checked by `skeleton` first)."""
        count, edges = np.frombuffer(blob, "<u4", 2)
        points = np.frombuffer(blob, "<f4", 3 * int(count), 8).reshape(-1, 3)
        ends = np.frombuffer(blob, "<u4", 2 * int(edges), 8 + 12 * int(count)).reshape(-1, 2)
        return skeleton_quality.cable_length(points.astype(np.float64), ends)

    def skeleton(self, blob: bytes, row: np.ndarray) -> str | None:
        try:
            count, edges = check_skeleton(int(row["segment"]), blob, self.attributes)
        except ShardwrightError as exc:
            return f"does not parse ({exc})"
        if not edges:
            return f"has no edges ({count} vertices)"
        return self._outside(np.frombuffer(blob, "<f4", 3 * count, 8).reshape(-1, 3), row)

    def mesh(self, where: tuple[str, int, int], blob: bytes, row: np.ndarray) -> str | None:
        try:
            manifest = meshes.MultiLodManifest.from_bytes(blob)
        except ShardwrightError as exc:
            return f"manifest does not parse ({exc})"
        name, start, _ = where
        if manifest.data_nbytes > start:
            return "fragments would start before the shard's data"
        data = self.store.read_range(name, start - manifest.data_nbytes, start)
        if not manifest.num_lods:
            return "has no levels of detail"
        offset = 0
        for lod in range(manifest.num_lods):
            box = np.asarray(manifest.chunk_shape, np.float64) * 2**lod
            corner = np.asarray(manifest.grid_origin) + manifest.vertex_offsets[lod]
            triangles = 0
            positions = manifest.fragment_positions[lod].T.tolist()
            sizes = manifest.fragment_sizes[lod].tolist()
            for position, size in zip(positions, sizes, strict=True):
                fragment, offset = data[offset : offset + size], offset + size
                if self.draco is None:
                    triangles += size > 0
                    continue
                if not size:
                    continue
                try:
                    decoded = self.draco.decode(fragment)
                except Exception as exc:  # DracoPy raises its own kinds
                    return f"has a fragment that does not decode at level of detail {lod} ({exc})"
                triangles += len(np.asarray(decoded.faces).reshape(-1, 3))
                points = np.asarray(decoded.points, np.float64).reshape(-1, 3)
                outside = self._outside(corner + (position + points / self.top) * box, row)
                if outside:
                    return f"{outside} at level of detail {lod}"
            if not triangles:
                return f"has no triangles at level of detail {lod}"
        return None
