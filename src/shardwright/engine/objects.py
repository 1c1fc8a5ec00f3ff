"""Mesh and skeleton shard tasks: read one shard's segment objects, check them, write the shard.

Objects are fetched in batches (concurrent GETs on object stores) sized from the memory
budget; each is checked against the format before it enters the shard builder, which keeps
encoded entries only up to its spool budget and spills the rest to local disk. A bad object
fails the task with its segment id before the shard is written, so nothing torn is left and
the job resumes once the source is fixed.

- multi-resolution meshes: the manifest is the indexed entry, the fragment data is stored
  right before it (unindexed), so a reader finds the fragments from the manifest's offset;
- skeletons: the encoded skeleton, as is;
- legacy meshes: re-encoded as one level of detail (formats/precomputed/meshes.py), then as a
  mesh above.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from shardwright.common.memory import MemoryBudget
from shardwright.common.receipts import Receipt
from shardwright.engine.shard_task import run_task
from shardwright.formats.precomputed import meshes, skeletons
from shardwright.formats.precomputed.sharding import ShardBuilder
from shardwright.formats.shardfile import ShardFile
from shardwright.planning.objects import LEGACY, MULTILOD, SKELETONS, ObjectPlan, ObjectShardTask
from shardwright.stores import Store, open_store

MAX_BATCH = 512  # objects per batch of concurrent reads


def run_object_shard(
    plan: ObjectPlan,
    task: ObjectShardTask,
    store: Store,
    *,
    resume: bool = False,
    spool_dir: str | None = None,
) -> Receipt:
    """Produce one mesh or skeleton shard (or keep a proven one, when resuming); the receipt
    counts the reads of the source too."""
    source = open_store(plan.source, plan.source_storage_options)
    producer = ObjectProducer(plan, task, source, spool_dir)
    return run_task(task.key, store, producer, resume=resume, also_counted=[source])


class ObjectProducer:
    """A shard of segment objects read from `source`, checked, into the streaming builder."""

    def __init__(
        self, plan: ObjectPlan, task: ObjectShardTask, source: Store, spool_dir: str | None
    ):
        self.plan, self.task, self.source, self.spool_dir = plan, task, source, spool_dir

    def produce(self) -> ShardFile:
        builder = ShardBuilder(
            self.plan.sharding,
            self.task.shard_number,
            memory_budget=self.plan.spool_budget,
            spool_dir=self.spool_dir,
            level=self.plan.compression_level,
        )
        try:
            for segment_id, manifest, prefix in _entries(self.plan, self.task, self.source):
                builder.add(segment_id, manifest, prefix=prefix)
            return builder.finish()
        except BaseException:
            builder.close()
            raise


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
    size = max(1, min(MAX_BATCH, MemoryBudget(plan.memory_budget).rows() // average))
    values = ids.tolist()
    for start in range(0, len(values), size):
        yield values[start : start + size]
