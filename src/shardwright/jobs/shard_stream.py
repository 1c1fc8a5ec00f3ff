"""A conversion's shard tasks, as a stream of nodes that submission.py feeds to the cluster.

One task per shard (the only writer of that object); each journals a receipt of what it
stored. The stream is lazy: it follows the plan's shard generator, so a job of a million
shards never holds more than the submission window of them at once.

Pyramids chain the levels: a level-k shard task takes the results of the level-(k-1) tasks
whose reduced voxels make up its region, so the source is read once and no task holds more
than its share of the budget. The stream visits each top-level shard's producers depth first
(post-order), so a producer's reduced voxels live only until the tasks above it have run. A
producer that feeds one task (the usual case: level shards nest) hands it its whole result,
receipts included, which travel up with it; one that feeds several is split by small getter
tasks, so each consumer fetches only its piece, and its receipts come back through one more.
Every task costs the scheduler and worker a millisecond or two of Python (under the GIL the
shard tasks need): the stream has as few as the data flow allows.

Generated meshes and skeletons stream their block tasks, then a `Barrier` (the window waits
for every task before it), then one task per output shard, made from the block spools'
indexes the coordinator gathered meanwhile (docs/architecture.md, "the exchange").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from shardwright.engine.annotations import run_annotation_shard, run_partition
from shardwright.engine.engines import Engine, engine_for
from shardwright.engine.generated_objects import BlockDone, run_block, run_generated_shard
from shardwright.engine.objects import run_object_shard
from shardwright.engine.pyramid import Handoff, Piece
from shardwright.generation.exchange import Exchange, SpooledShardTask
from shardwright.lifecycle import journal
from shardwright.lifecycle.manifest import Receipt
from shardwright.planning import (
    ADDITION,
    ANNOTATIONS,
    GENERATED,
    OBJECTS,
    VOLUME,
    AdditionPlan,
    ConversionPlan,
    Plan,
    ShardTask,
)
from shardwright.planning.annotations import AnnotationPlan, TablePartition
from shardwright.planning.generated import GeneratedPlan
from shardwright.planning.objects import ObjectPlan, ObjectShardTask
from shardwright.stores import Store


@dataclasses.dataclass(frozen=True)
class TaskContext:
    """What every shard task of one dataset takes besides its shard: the plan (without what
    no task needs), the store its writes go through (carrying the job's run), whether the
    job resumes, and for a volume the engine that runs its shards. Sent to the cluster once
    per dataset, not once per task."""

    plan: Plan
    store: Store
    resume: bool
    engine: Engine | None = None

    @classmethod
    def of(cls, plan: Plan, store: Store, resume: bool) -> TaskContext:
        """The context of `plan`'s shard tasks, its engine decided here, once."""
        tasks_plan = plan.for_shard_tasks()
        engine = engine_for(tasks_plan) if isinstance(tasks_plan, ConversionPlan) else None
        return cls(tasks_plan, store, resume, engine)


@dataclasses.dataclass(frozen=True)
class Node:
    """One task of the stream: `run(context, shard, *inputs)`, where `inputs` are the
    results of the earlier nodes named by `inputs`. `consumers`: how many later nodes take
    its result; with none, its result carries receipts (`receipts_in`) for the manifest,
    unless `collect` takes it (returning the receipts progress counts: a block spool's).
    `gpu`: it must run on a worker that declares a GPU."""

    key: str
    run: Callable[..., NodeResult]
    shard: NodeShard
    inputs: tuple[str, ...] = ()
    consumers: int = 0
    gpu: bool = False
    collect: Callable[[Any], list[Receipt]] | None = None


@dataclasses.dataclass(frozen=True)
class Barrier:
    """Not a task: the window waits for every task submitted before it (the nodes after it
    are made from what those returned)."""


@dataclasses.dataclass(frozen=True)
class LevelResult:
    """What a pyramid shard task hands on: its receipt and those of the producers it alone
    consumed, and the reduced pieces for the level above."""

    receipts: list[Receipt]
    handoff: Handoff


# What a node takes besides its context (a volume's or pyramid's shard, a mesh or skeleton
# shard, a shard made from spools (generated objects, annotations), a block position, a table
# partition, the key of the task a piece is for, or nothing), and what it returns.
NodeShard = (
    ShardTask
    | ObjectShardTask
    | SpooledShardTask
    | TablePartition
    | tuple[int, int, int]
    | str
    | None
)
NodeResult = Receipt | LevelResult | Piece | list[Receipt] | BlockDone


def receipts_in(result: Receipt | LevelResult | list[Receipt]) -> list[Receipt]:
    """The receipts a node without consumers returns (a shard's, a level's, or a list)."""
    if isinstance(result, Receipt):
        return [result]
    if isinstance(result, LevelResult):
        return result.receipts
    return result


def _shard(context: TaskContext, task: ShardTask) -> Receipt:
    plan, engine = context.plan, context.engine
    assert isinstance(plan, ConversionPlan) and engine is not None
    receipt = engine.run_shard(plan, task, context.store, resume=context.resume)
    return journal.record(context.store, receipt)


def _object_shard(context: TaskContext, task: ObjectShardTask) -> Receipt:
    plan = context.plan
    assert isinstance(plan, ObjectPlan)
    receipt = run_object_shard(plan, task, context.store, resume=context.resume)
    return journal.record(context.store, receipt)


def _pyramid_shard(
    context: TaskContext, task: ShardTask, *inputs: LevelResult | Piece
) -> LevelResult:
    plan, engine = context.plan, context.engine
    assert isinstance(plan, ConversionPlan) and engine is not None
    pieces: list[Piece] = []
    receipts: list[Receipt] = []
    for item in inputs:
        if isinstance(item, LevelResult):  # a producer whose only consumer is this task
            pieces.append(item.handoff[task.key])
            receipts.extend(item.receipts)
        else:
            pieces.append(item)
    receipt, handoff = engine.run_level_shard(
        plan, task, context.store, pieces, resume=context.resume
    )
    stored = [] if receipt is None else [journal.record(context.store, receipt)]  # None: read
    return LevelResult([*stored, *receipts], handoff)


def _piece(context: TaskContext, consumer: str, result: LevelResult) -> Piece:
    """The part of a producer's reduced voxels that one task of the level above takes."""
    return result.handoff[consumer]


def _receipts_of(context: TaskContext, shard: None, result: LevelResult) -> list[Receipt]:
    return result.receipts


def _volume_nodes(plan: ConversionPlan, token: str) -> Iterator[Node]:
    """A node per shard of a volume (a pyramid's levels chained: `_pyramid_nodes`)."""
    if plan.pyramid is not None:
        yield from _pyramid_nodes(plan, token)
        return
    gpu = engine_for(plan).gpu
    for task in plan.shards():
        yield Node(f"shard-{task.key}-{token}", _shard, task, gpu=gpu)


def _pyramid_nodes(plan: ConversionPlan, token: str) -> Iterator[Node]:
    """Every level's shard tasks, each after the tasks of the level below it takes, in
    post-order from each top-level shard.

    A producer shared by several tasks is emitted at its first consumer; only such producers
    are remembered (until their last consumer), so the stream keeps a frontier, not the
    pyramid.
    """
    gpu = engine_for(plan).gpu
    shared_left: dict[str, int] = {}  # shared producers emitted, by key: consumers to come

    def visit(task: ShardTask) -> Iterator[Node]:
        inputs = []
        for producer in plan.producers(task):
            fanout = len(plan.consumers(producer))
            if producer.key not in shared_left:
                yield from visit(producer)
                if fanout == 1:
                    inputs.append(f"shard-{producer.key}-{token}")
                    continue
                shared_left[producer.key] = fanout
            piece = f"piece-{producer.key}-{task.key}-{token}"
            yield Node(piece, _piece, task.key, (f"shard-{producer.key}-{token}",), 1)
            inputs.append(piece)
            shared_left[producer.key] -= 1
            if not shared_left[producer.key]:
                del shared_left[producer.key]
        fanout = len(plan.consumers(task))
        key = f"shard-{task.key}-{token}"
        # A shared producer's result goes to a piece per consumer and to its receipts' node.
        yield Node(key, _pyramid_shard, task, tuple(inputs), fanout + (fanout > 1), gpu)
        if fanout > 1:
            yield Node(f"receipts-{task.key}-{token}", _receipts_of, None, (key,))

    for task in plan.level_plan(plan.level_count - 1).shards():
        yield from visit(task)


def _object_nodes(plan: ObjectPlan, token: str) -> Iterator[Node]:
    """A node per shard of a mesh or skeleton directory."""
    for task in plan.shards():
        yield Node(f"shard-{task.key}-{token}", _object_shard, task)


def _spooled(context: TaskContext, done: BlockDone) -> BlockDone:
    """A spool task's result with its receipt journaled (a resumed job keeps the spool)."""
    return dataclasses.replace(done, receipt=journal.record(context.store, done.receipt))


def _collector(table: Exchange) -> Callable[[BlockDone], list[Receipt]]:
    """What the window does with a spool task's result: its index goes into the job's
    exchange, its receipt to progress (no manifest lists a spool)."""

    def collect(result: BlockDone) -> list[Receipt]:
        table.add(result.block)
        return [result.receipt]

    return collect


def _block(context: TaskContext, position: tuple[int, int, int]) -> BlockDone:
    plan = context.plan
    assert isinstance(plan, GeneratedPlan)
    return _spooled(context, run_block(plan, position, context.store, resume=context.resume))


def _generated_shard(context: TaskContext, task: SpooledShardTask) -> Receipt:
    plan = context.plan
    assert isinstance(plan, GeneratedPlan)
    receipt = run_generated_shard(plan, task, context.store, resume=context.resume)
    return journal.record(context.store, receipt)


def _generated_nodes(
    plan: GeneratedPlan, token: str, exchanges: dict[str, Exchange]
) -> Iterator[Node | Barrier]:
    """The block tasks (run by the first output's stream), a barrier, then a task per output
    shard that any block sent a piece to, with the ranges it reads."""
    table = exchanges.setdefault(plan.generation.exchange, Exchange())
    collect = _collector(table)
    if plan.runs_blocks:
        for position in plan.generation.grid.positions():
            key = f"block-{plan.generation.grid.key(position)}-{token}"
            yield Node(key, _block, position, collect=collect)
        yield Barrier()
    for number in table.shards(plan.output):
        ranges = tuple(table.ranges(plan.output, number))
        task = SpooledShardTask(plan.sharding.shard_filename(number), number, ranges)
        yield Node(f"shard-{task.key}-{token}", _generated_shard, task)


def _partition(context: TaskContext, part: TablePartition) -> BlockDone:
    plan = context.plan
    assert isinstance(plan, AnnotationPlan)
    return _spooled(context, run_partition(plan, part, context.store, resume=context.resume))


def _annotation_shard(context: TaskContext, task: SpooledShardTask) -> Receipt:
    plan = context.plan
    assert isinstance(plan, AnnotationPlan)
    receipt = run_annotation_shard(plan, task, context.store, resume=context.resume)
    return journal.record(context.store, receipt)


def _annotation_nodes(
    plan: AnnotationPlan, token: str, exchanges: dict[str, Exchange]
) -> Iterator[Node | Barrier]:
    """A task per partition of the table, a barrier, then a task per shard of each output
    that any partition sent rows to, with the ranges it reads."""
    table = exchanges.setdefault(f"{plan.dest}#annotations", Exchange())
    collect = _collector(table)
    for part in plan.partitions():
        yield Node(f"{part.key}-{token}", _partition, part, collect=collect)
    yield Barrier()
    for output, spec in enumerate(plan.layout.shardings):
        for number in table.shards(output):
            key = f"{plan.layout.key(output)}/{spec.shard_filename(number)}"
            task = SpooledShardTask(key, number, tuple(table.ranges(output, number)), output)
            yield Node(f"shard-{key}-{token}", _annotation_shard, task)


def shard_nodes(
    plan: Plan, token: str, exchanges: dict[str, Exchange] | None = None
) -> Iterator[Node | Barrier]:
    """The stream of `plan`'s shard tasks; `token` must make their keys unique to this job
    and dataset: a Dask cluster handed a key it still holds returns that task's result
    instead of running the new task (a job's mesh and skeleton shards share file names).
    `exchanges`: the job's tables of block spools, shared by its generated outputs."""
    if plan.dataset == VOLUME:
        assert isinstance(plan, ConversionPlan)
        return _volume_nodes(plan, token)
    if plan.dataset == OBJECTS:
        assert isinstance(plan, ObjectPlan)
        return _object_nodes(plan, token)
    if plan.dataset == ANNOTATIONS:
        assert isinstance(plan, AnnotationPlan)
        return _annotation_nodes(plan, token, {} if exchanges is None else exchanges)
    if plan.dataset == ADDITION:  # the levels it adds (its companions run their own)
        assert isinstance(plan, AdditionPlan)
        return iter(()) if plan.levels is None else _pyramid_nodes(plan.levels, token)
    assert plan.dataset == GENERATED and isinstance(plan, GeneratedPlan)
    return _generated_nodes(plan, token, {} if exchanges is None else exchanges)
