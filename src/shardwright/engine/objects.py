"""Mesh and skeleton shard tasks: read one shard's segment objects, check them, write the shard.

Objects are fetched in batches (concurrent GETs on object stores) sized from the memory
budget; each is checked against the format before it enters the shard builder, which keeps
encoded entries only up to its spool budget and spills the rest to local disk. A bad object
fails the task with its segment id before the shard is written, so nothing torn is left and
the job resumes once the source is fixed.

- multi-resolution meshes: the manifest is the indexed entry, the fragment data is stored
  right before it (unindexed), so a reader finds the fragments from the manifest's offset;
- skeletons: the encoded skeleton, as is;
- legacy meshes: re-encoded as one level of detail (formats/meshes.py), then as a mesh above.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from shardwright.formats import meshes, skeletons
from shardwright.formats.sharding import ShardBuilder
from shardwright.lifecycle import journal
from shardwright.planning.objects import LEGACY, MULTILOD, SKELETONS, ObjectPlan, ObjectShardTask
from shardwright.store import Store

Receipt = dict[str, Any]
MAX_BATCH = 512  # objects per batch of concurrent reads


def run_object_shard(
    plan: ObjectPlan,
    task: ObjectShardTask,
    store: Store,
    *,
    resume: bool = False,
    spool_dir: str | None = None,
) -> Receipt:
    """Produce one mesh or skeleton shard (or keep a sound one when resuming)."""
    started = time.perf_counter()
    before = store.requests.snapshot()
    if resume:
        kept = journal.proven(store, task.key)
        if kept is not None:
            kept["requests"] = store.requests.since(before)
            kept["objects_read"] = 0
            return kept
    source = Store(plan.source, plan.options.source_storage_options)
    builder = ShardBuilder(
        plan.sharding,
        task.shard_number,
        memory_budget=plan.spool_budget,
        spool_dir=spool_dir,
        level=plan.options.compression_level,
    )
    try:
        for segment_id, manifest, prefix in _entries(plan, task, source):
            builder.add(segment_id, manifest, prefix=prefix)
        shard = builder.finish()
    except BaseException:
        builder.close()
        raise
    try:
        size, crc = store.write_object(task.key, shard.pieces)
    finally:
        shard.close()
    requests = store.requests.since(before)
    for kind, n in source.requests.snapshot().items():
        requests[kind] = requests.get(kind, 0) + n
    return {
        "key": task.key,
        "size": size,
        "crc32c": crc,
        "chunks": shard.chunk_count,
        "resumed": False,
        "empty": False,
        "seconds": round(time.perf_counter() - started, 4),
        "requests": requests,
        "objects_read": source.requests.snapshot().get("gets", 0),
    }


def _entries(
    plan: ObjectPlan, task: ObjectShardTask, source: Store
) -> Iterator[tuple[int, bytes, bytes]]:
    """(segment id, indexed bytes, unindexed bytes stored before them), checked."""
    attributes = plan.attributes
    for batch in _batches(plan, task.ids):
        keys = [key for segment in batch for key in plan.source_keys(segment)]
        blobs = source.read_many(keys)
        for segment in batch:
            if plan.kind == MULTILOD:
                manifest = _required(blobs, f"{segment}.index", segment, plan)
                data = blobs[str(segment)] or b""
                meshes.check_fragment_data(segment, manifest, len(data))
                yield segment, manifest, data
            elif plan.kind == SKELETONS:
                data = _required(blobs, str(segment), segment, plan)
                skeletons.check_skeleton(segment, data, attributes)
                yield segment, data, b""
            else:
                yield segment, *_legacy(plan, source, segment, blobs)


def _legacy(
    plan: ObjectPlan, source: Store, segment: int, blobs: dict[str, bytes | None]
) -> tuple[bytes, bytes]:
    assert plan.kind == LEGACY
    names = meshes.legacy_fragment_names(segment, _required(blobs, f"{segment}:0", segment, plan))
    fetched = source.read_many(names)
    missing = [name for name in names if fetched[name] is None]
    if missing:
        raise meshes.MeshFormatError(
            f"segment {segment}: fragment {missing[0]} named by {segment}:0 is missing from "
            f"{plan.source}"
        )
    return meshes.legacy_to_multilod(segment, [(n, fetched[n] or b"") for n in names])


def _required(blobs: dict[str, bytes | None], key: str, segment: int, plan: ObjectPlan) -> bytes:
    blob = blobs[key]
    if blob is None:
        raise FileNotFoundError(
            f"segment {segment}: {plan.source}/{key} was listed but is gone; was the source "
            "changed during the conversion?"
        )
    return blob


def _batches(plan: ObjectPlan, ids: np.ndarray) -> Iterator[list[int]]:
    """Segment ids in batches whose objects fit an eighth of the budget (by average size)."""
    average = max(1, plan.source_bytes // max(1, plan.object_count))
    size = max(1, min(MAX_BATCH, plan.options.memory_budget // 8 // average))
    values = ids.tolist()
    for start in range(0, len(values), size):
        yield values[start : start + size]
