"""Check converted meshes or skeletons: every shard against the manifest, and segments against
the unsharded source.

Each segment is looked up as a reader does (shard index, minishard index, ranged read). A
skeleton must equal its source file byte for byte; a multi-resolution mesh's manifest must
equal `<id>.index` and the bytes stored right before it must equal the fragment data file
`<id>`; a legacy mesh re-encoded as one level of detail must parse, and its fragment sizes must
add up to the bytes before it. A seeded sample of segments by default, all with `full=True`.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from shardwright.formats import meshes
from shardwright.formats.sharded_reader import ShardedReader
from shardwright.formats.sharding import ShardingSpec
from shardwright.manifest import Manifest
from shardwright.planning.objects import LEGACY, MULTILOD, OBJECT_TYPES, SKELETONS, segment_id_of
from shardwright.store import Store
from shardwright.verification.integrity import check_precomputed_shard
from shardwright.verification.report import VerifyReport
from shardwright.verification.shards import check_shards


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
    """Fill `report` for a mesh or skeleton destination."""
    info = json.loads(store.read("info"))
    spec = ShardingSpec.from_json(info["sharding"])
    check_shards(report, store, manifest, lambda key: check_precomputed_shard(store, key, spec))
    if against is None:
        return
    source = Store(against, source_storage_options)
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
    if not full and len(ids) > sample:
        picks = np.random.default_rng(0).choice(len(ids), sample, replace=False)
        ids = [ids[i] for i in sorted(picks.tolist())]
    reader = ShardedReader(spec, store.read_range)
    for segment in ids:
        problem = _compare_segment(kind, segment, reader, store, source)
        report.chunks_compared += 1
        if problem:
            report.problems.append(f"segment {segment}: {problem}")


def _compare_segment(
    kind: str, segment: int, reader: ShardedReader, store: Store, source: Store
) -> str | None:
    where = reader.locate(segment)
    if where is None:
        return "absent from the shards"
    stored = reader.read(segment)
    assert stored is not None
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
