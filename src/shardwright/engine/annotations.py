"""Annotation tasks: a table partition's rows into one spool object, and an output shard
from the spools' sections.

A partition task computes its rows (a pandas DataFrame, or one partition of a Dask
DataFrame: read from its CSV or Parquet file by the task), sends each row to every output
that holds it (annotation_rows.py) and writes one spool object under
`.shardwright/exchange/`, journaled like a shard so that a resumed job keeps it. An output
shard task reads its ranges of every spool, encodes each key's entry and writes the shard.
"""

from __future__ import annotations

from typing import Any

from shardwright.common.receipts import Receipt
from shardwright.engine.annotation_rows import partition_sections, shard_entries
from shardwright.engine.generated_objects import BlockDone, read_index
from shardwright.engine.shard_task import run_task
from shardwright.formats.precomputed.sharding import packed_shard
from shardwright.formats.shardfile import ShardFile
from shardwright.generation import exchange
from shardwright.generation.exchange import BlockIndex, SpooledShardTask
from shardwright.lifecycle.journal import EXCHANGE
from shardwright.planning.annotations import AnnotationPlan, TablePartition
from shardwright.stores import Store, open_store


def run_partition(
    plan: AnnotationPlan, part: TablePartition, store: Store, *, resume: bool
) -> BlockDone:
    """Write (or, resuming, keep a proven) partition spool; its receipt and index."""
    key = f"{EXCHANGE}{part.key}"
    producer = PartitionProducer(plan, part)
    receipt = run_task(key, store, producer, resume=resume)
    index = producer.index if producer.index is not None else read_index(store, key)
    return BlockDone(receipt, BlockIndex(key, index))


class PartitionProducer:
    """One partition's rows, grouped by output and shard, as one spool object."""

    def __init__(self, plan: AnnotationPlan, part: TablePartition) -> None:
        self.plan, self.part = plan, part
        self.index: Any = None

    def produce(self) -> ShardFile:
        rows = self.part.rows
        frame = rows.compute(scheduler="sync") if hasattr(rows, "compute") else rows
        sections = partition_sections(self.plan.layout, frame, self.part.first_row)
        parts, self.index = exchange.spool(sections)
        return ShardFile(self.part.key, sum(len(p) for p in parts), len(self.index),
                         lambda: parts)  # fmt: skip


def run_annotation_shard(
    plan: AnnotationPlan, task: SpooledShardTask, store: Store, *, resume: bool
) -> Receipt:
    """Produce one shard of one output (or keep a proven one)."""
    spools = open_store(plan.dest, plan.exchange_storage_options)
    producer = AnnotationShardProducer(plan, task, spools)
    return run_task(task.key, store, producer, resume=resume, also_counted=[spools])


class AnnotationShardProducer:
    """The entries of one output shard, from its sections of every partition's spool."""

    def __init__(self, plan: AnnotationPlan, task: SpooledShardTask, spools: Store) -> None:
        self.plan, self.task, self.spools = plan, task, spools

    def produce(self) -> ShardFile:
        plan, task = self.plan, self.task
        sections = [self.spools.read_range(key, start, stop) for key, start, stop in task.ranges]
        keys, sizes, data = shard_entries(plan.layout, task.output, sections)
        del sections
        return packed_shard(plan.layout.shardings[task.output], task.shard_number, keys, sizes,
                            data, level=plan.compression_level)  # fmt: skip
