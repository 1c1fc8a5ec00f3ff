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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from shardwright.engine.engines import Engine, engine_for
from shardwright.engine.objects import run_object_shard
from shardwright.engine.pyramid import Handoff, Piece
from shardwright.lifecycle import journal
from shardwright.manifest import Receipt
from shardwright.planning import OBJECTS, VOLUME, ConversionPlan, Plan, ShardTask
from shardwright.planning.objects import ObjectPlan, ObjectShardTask
from shardwright.store import Store


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
        engine = engine_for(plan) if isinstance(plan, ConversionPlan) else None
        return cls(plan.for_shard_tasks(), store, resume, engine)


@dataclasses.dataclass(frozen=True)
class Node:
    """One task of the stream: `run(context, shard, *inputs)`, where `inputs` are the
    results of the earlier nodes named by `inputs`. `consumers`: how many later nodes take
    its result; with none, its result carries receipts (`receipts_in`) for the manifest.
    `gpu`: it must run on a worker that declares a GPU."""

    key: str
    run: Callable[..., NodeResult]
    shard: NodeShard
    inputs: tuple[str, ...] = ()
    consumers: int = 0
    gpu: bool = False


@dataclasses.dataclass(frozen=True)
class LevelResult:
    """What a pyramid shard task hands on: its receipt and those of the producers it alone
    consumed, and the reduced pieces for the level above."""

    receipts: list[Receipt]
    handoff: Handoff


# What a node takes besides its context (a volume's or pyramid's shard, a mesh or skeleton
# shard, the key of the task a piece is for, or nothing), and what it returns.
NodeShard = ShardTask | ObjectShardTask | str | None
NodeResult = Receipt | LevelResult | Piece | list[Receipt]


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
    return LevelResult([journal.record(context.store, receipt), *receipts], handoff)


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


# The shard tasks of each kind of dataset (`Plan.dataset`).
SHARD_NODES: dict[str, Callable[[Any, str], Iterator[Node]]] = {
    VOLUME: _volume_nodes,
    OBJECTS: _object_nodes,
}


def shard_nodes(plan: Plan, token: str) -> Iterator[Node]:
    """The stream of `plan`'s shard tasks; `token` must make their keys unique to this job
    and dataset: a Dask cluster handed a key it still holds returns that task's result
    instead of running the new task (a job's mesh and skeleton shards share file names)."""
    return SHARD_NODES[plan.dataset](plan, token)
