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
indexes the coordinator gathered meanwhile (docs/architecture.md, "the exchange"). Where an
addition's new levels are reduced from the level meshed, the addition's stream runs those
block tasks as its levels' base tasks (`_fed_levels_nodes`): the volume is read once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

from shardwright.additions import AdditionPlan
from shardwright.common.receipts import Receipt
from shardwright.common.vocabulary import DatasetKind
from shardwright.engine.annotations import run_annotation_shard, run_partition
from shardwright.engine.engines import Engine, engine_for
from shardwright.engine.generated_objects import (
    BlockDone,
    run_block_group,
    run_generated_shard,
)
from shardwright.engine.objects import run_object_shard
from shardwright.engine.pyramid import Handoff, Piece, run_feeding_group
from shardwright.generation.exchange import Exchange, SpooledShardTask
from shardwright.lifecycle import journal
from shardwright.lifecycle.runs import run_of
from shardwright.planning import ConversionPlan, Plan, ShardTask
from shardwright.planning.annotations import AnnotationPlan, TablePartition
from shardwright.planning.feeding import group_consumers, group_producers
from shardwright.planning.generated import GeneratedPlan
from shardwright.planning.objects import ObjectPlan, ObjectShardTask
from shardwright.stores import Store

PlanKind = TypeVar("PlanKind", bound=Plan)


@dataclasses.dataclass(frozen=True)
class TaskContext(Generic[PlanKind]):
    """What every shard task of one dataset takes besides its shard: the plan (without what
    no task needs; its kind's, as `STREAMS` gives each kind its own tasks), the store its
    writes go through (carrying the job's run), whether the job resumes, and for a volume the
    engine that runs its shards. Sent to the cluster once per dataset, not once per task."""

    plan: PlanKind
    store: Store
    resume: bool
    engine: Engine | None = None
    # The meshes' block tasks an addition's stream runs.
    blocks: TaskContext[GeneratedPlan] | None = None

    @classmethod
    def of(
        cls, plan: Plan, store: Store, resume: bool, stores: Mapping[str, Store] | None = None
    ) -> TaskContext[Any]:
        """The context of `plan`'s shard tasks, its engine decided here, once; `stores`: the
        job's datasets' stores by destination (where an addition runs its meshes' blocks)."""
        tasks_plan = plan.for_shard_tasks()
        engine = engine_for(tasks_plan) if isinstance(tasks_plan, ConversionPlan) else None
        blocks = None
        if isinstance(plan, AdditionPlan) and plan.feeding_blocks is not None:
            feeding = plan.feeding_blocks
            blocks = TaskContext(feeding, (stores or {})[feeding.dest], resume)
        return TaskContext(tasks_plan, store, resume, engine, blocks)


@dataclasses.dataclass(frozen=True)
class Node:
    """One task of the stream: `run(context, shard, *inputs)`, where `inputs` are the
    results of the earlier nodes named by `inputs`. `consumers`: how many later nodes take
    its result; with none, its result carries receipts (`receipts_in`) for the manifest,
    and `collect`, where given, takes what else it carries (a block spool's index), returning
    the receipts progress counts besides.
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
    blocks: tuple[BlockDone, ...] = ()  # block tasks that fed it (their spools' indexes)


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
NodeResult = Receipt | LevelResult | Piece | list[Receipt] | BlockDone | list[BlockDone]
Exchanges = dict[str, Exchange]  # the job's tables of spools, by exchange name


def receipts_in(
    result: Receipt | LevelResult | list[Receipt] | BlockDone | list[BlockDone],
) -> list[Receipt]:
    """The receipts a node without consumers returns for the manifest (a shard's, a
    level's, or a list; a block spool's are not the manifest's: `collect` takes them)."""
    if isinstance(result, Receipt):
        return [result]
    if isinstance(result, LevelResult):
        return result.receipts
    if isinstance(result, BlockDone):
        return []
    return [item for item in result if isinstance(item, Receipt)]


def _shard(context: TaskContext[ConversionPlan], task: ShardTask) -> Receipt:
    engine = context.engine
    assert engine is not None, "a volume's context has its engine"
    receipt = engine.run_shard(context.plan, task, context.store, resume=context.resume)
    return journal.record(context.store, receipt)


def _object_shard(context: TaskContext[ObjectPlan], task: ObjectShardTask) -> Receipt:
    receipt = run_object_shard(context.plan, task, context.store, resume=context.resume)
    return journal.record(context.store, receipt)


def _pyramid_shard(
    context: TaskContext[ConversionPlan], task: ShardTask, *inputs: LevelResult | Piece
) -> LevelResult:
    plan, engine = context.plan, context.engine
    assert engine is not None, "a volume's context has its engine"
    pieces: list[Piece] = []
    receipts: list[Receipt] = []
    blocks: list[BlockDone] = []
    for item in inputs:
        if isinstance(item, LevelResult):  # a producer whose only consumer is this task
            pieces.append(item.handoff[task.key])
            receipts.extend(item.receipts)
            blocks.extend(item.blocks)
        else:
            pieces.append(item)
    receipt, handoff = engine.run_level_shard(
        plan, task, context.store, pieces, resume=context.resume
    )
    stored = [] if receipt is None else [journal.record(context.store, receipt)]  # None: read
    return LevelResult([*stored, *receipts], handoff, tuple(blocks))


def _feeding_group(
    context: TaskContext[ConversionPlan], group: tuple[int, int, int]
) -> LevelResult:
    """A meshes' block group task that is also a base task of the addition's levels."""
    plan, blocks = context.plan, context.blocks
    assert blocks is not None, "an addition fed by blocks has their context"
    done, handoff = run_feeding_group(plan, blocks.plan, group, blocks.store,
                                      resume=context.resume,
                                      on_done=partial(_grouped, blocks))  # fmt: skip
    return LevelResult([], handoff, tuple(done))


def _piece(context: TaskContext[ConversionPlan], consumer: str, result: LevelResult) -> Piece:
    """The part of a producer's reduced voxels that one task of the level above takes."""
    return result.handoff[consumer]


def _receipts_of(
    context: TaskContext[ConversionPlan], shard: None, result: LevelResult
) -> LevelResult:
    """A shared producer's receipts (and blocks), without the voxels it handed up."""
    return dataclasses.replace(result, handoff={})


def _volume_nodes(plan: ConversionPlan, token: str, _: Exchanges) -> Iterator[Node]:
    """A node per shard of a volume (a pyramid's levels chained: `_pyramid_nodes`)."""
    if plan.pyramid is not None:
        yield from _pyramid_nodes(plan, token)
        return
    gpu = engine_for(plan).gpu
    for task in plan.shards():
        yield Node(f"shard-{task.key}-{token}", _shard, task, gpu=gpu)


def _pyramid_nodes(
    plan: ConversionPlan,
    token: str,
    feeding: GeneratedPlan | None = None,
    collect: Callable[[Any], list[Receipt]] | None = None,
) -> Iterator[Node]:
    """Every level's shard tasks, each after the tasks of the level below it takes, in
    post-order from each top-level shard. With `feeding`, the first level above the base
    takes that meshes' block tasks' pieces instead of base shards' (an addition's); a node
    whose result the window takes then has `collect` (the blocks' spools).

    A producer shared by several tasks is emitted at its first consumer; only such producers
    are remembered (until their last consumer), so the stream keeps a frontier, not the
    pyramid. Fed by block groups, the stream runs from the last task to the first, so that
    the groups run last first (each hands its faces to those before it: generation/faces.py).
    """
    gpu = engine_for(plan).gpu
    order: Callable[[Iterable[Any]], Iterable[Any]] = (
        iter if feeding is None else lambda items: reversed(list(items))
    )
    shared_left: dict[str, int] = {}  # shared producers emitted, by key: consumers to come

    def emitted(
        kind: str, name: str, run: Callable[..., NodeResult], shard: NodeShard,
        inputs: tuple[str, ...], fanout: int, on_gpu: bool,
    ) -> Iterator[Node]:  # fmt: skip
        """A producer (or top-level) node, `kind-name-token`; a shared producer's result
        goes to a piece per consumer and to its receipts' node."""
        key = f"{kind}-{name}-{token}"
        yield Node(key, run, shard, inputs, fanout + (fanout > 1), on_gpu, collect)
        if fanout > 1:
            yield Node(f"receipts-{name}-{token}", _receipts_of, None, (key,), collect=collect)

    def below(task: ShardTask) -> Iterator[tuple[str, str, int, Callable[[], Iterator[Node]]]]:
        """Each producer of `task`: its node's key, its name, its fanout and how to emit it."""
        if feeding is not None and task.level == 1:
            grid = feeding.generation.grid
            for group in order(group_producers(plan, grid, task)):
                name = f"group_{grid.key(group)}"
                fanout = len(group_consumers(plan, grid, group))
                emit = partial(emitted, "blocks", name, _feeding_group, group, (), fanout, False)
                yield f"blocks-{name}-{token}", name, fanout, emit
            return
        for producer in order(plan.producers(task)):
            fanout = len(plan.consumers(producer))
            yield f"shard-{producer.key}-{token}", producer.key, fanout, partial(visit, producer)

    def visit(task: ShardTask) -> Iterator[Node]:
        inputs = []
        for key, name, fanout, emit in below(task):
            if key not in shared_left:
                yield from emit()
                if fanout == 1:
                    inputs.append(key)
                    continue
                shared_left[key] = fanout
            piece = f"piece-{name}-{task.key}-{token}"
            yield Node(piece, _piece, task.key, (key,), 1)
            inputs.append(piece)
            shared_left[key] -= 1
            if not shared_left[key]:
                del shared_left[key]
        yield from emitted("shard", task.key, _pyramid_shard, task, tuple(inputs),
                           len(plan.consumers(task)), gpu)  # fmt: skip

    for task in order(plan.level_plan(plan.level_count - 1).shards()):
        yield from visit(task)


def _fed_levels_nodes(
    plan: AdditionPlan, token: str, exchanges: Exchanges
) -> Iterator[Node | Barrier]:
    """An addition's levels fed by its meshes' block tasks (planning/feeding.py),
    then a barrier: the meshes' and skeletons' shards are made from every block's spool."""
    feeding = plan.feeding_blocks
    assert plan.levels is not None and feeding is not None
    collect = _collector(exchanges.setdefault(feeding.generation.exchange, Exchange()))
    yield from _pyramid_nodes(plan.levels, token, feeding, collect)
    yield Barrier()


def _object_nodes(plan: ObjectPlan, token: str, _: Exchanges) -> Iterator[Node]:
    """A node per shard of a mesh or skeleton directory."""
    for task in plan.shards():
        yield Node(f"shard-{task.key}-{token}", _object_shard, task)


def _spooled(context: TaskContext[Any], done: BlockDone) -> BlockDone:
    """A spool task's result with its receipt journaled (a resumed job keeps the spool)."""
    return dataclasses.replace(done, receipt=journal.record(context.store, done.receipt))


def _grouped(context: TaskContext[GeneratedPlan], done: BlockDone) -> BlockDone:
    """A block of a group journaled, the group going on only while the job's lease still
    names its run (the fence its shards' writes ask): a group runs for minutes, and one whose
    job stopped (Ctrl-C, or taken over) keeps the blocks it did and makes no more of them,
    wherever it runs (a thread of the stopped process, a worker of another cluster)."""
    done = _spooled(context, done)
    run = run_of(context.store)
    if run is not None and run.fence is not None:
        run.fence(context.store)
    return done


def _collector(table: Exchange) -> Callable[[Any], list[Receipt]]:
    """What the window does with a spool task's result (a partition's spool, a block
    group's, or the blocks that fed a level's shard): each index goes into the job's
    exchange, each receipt to progress (no manifest lists a spool)."""

    def collect(result: BlockDone | list[BlockDone] | LevelResult) -> list[Receipt]:
        done = (
            [result]
            if isinstance(result, BlockDone)
            else list(result.blocks if isinstance(result, LevelResult) else result)
        )
        for spooled in done:
            table.add(spooled.block)
        return [spooled.receipt for spooled in done]

    return collect


def _block_group(
    context: TaskContext[GeneratedPlan], group: tuple[int, int, int]
) -> list[BlockDone]:
    return run_block_group(context.plan, group, context.store, resume=context.resume,
                           on_done=partial(_grouped, context))  # fmt: skip


def _generated_shard(context: TaskContext[GeneratedPlan], task: SpooledShardTask) -> Receipt:
    receipt = run_generated_shard(context.plan, task, context.store, resume=context.resume)
    return journal.record(context.store, receipt)


def _generated_nodes(
    plan: GeneratedPlan, token: str, exchanges: Exchanges
) -> Iterator[Node | Barrier]:
    """The block tasks (run by the first output's stream, unless they feed an addition's
    levels), then a task per output shard that any block sent a piece to."""
    grid = plan.generation.grid
    blocks = None
    if plan.runs_blocks and not plan.feeds_levels:  # the next groups hand over their faces
        blocks = ((f"blocks-{grid.key(group)}-{token}", _block_group, group)
                  for group in grid.groups(last_first=True))  # fmt: skip
    outputs = [(plan.output, 0, plan.sharding.shard_filename)]
    table = exchanges.setdefault(plan.generation.exchange, Exchange())
    return _exchanged(table, blocks, outputs, _generated_shard, token)


def _partition(context: TaskContext[AnnotationPlan], part: TablePartition) -> BlockDone:
    return _spooled(
        context, run_partition(context.plan, part, context.store, resume=context.resume)
    )


def _annotation_shard(context: TaskContext[AnnotationPlan], task: SpooledShardTask) -> Receipt:
    receipt = run_annotation_shard(context.plan, task, context.store, resume=context.resume)
    return journal.record(context.store, receipt)


def _annotation_nodes(
    plan: AnnotationPlan, token: str, exchanges: Exchanges
) -> Iterator[Node | Barrier]:
    """A task per partition of the table, then a task per shard of each output that any
    partition sent rows to."""
    partitions = ((f"{part.key}-{token}", _partition, part) for part in plan.partitions())
    layout = plan.layout
    outputs = [(output, output, partial(_annotation_key, layout.key(output), spec))
               for output, spec in enumerate(layout.shardings)]  # fmt: skip
    table = exchanges.setdefault(f"{plan.dest}#annotations", Exchange())
    return _exchanged(table, partitions, outputs, _annotation_shard, token)


def _annotation_key(directory: str, spec: Any, number: int) -> str:
    return f"{directory}/{spec.shard_filename(number)}"


def _exchanged(
    table: Exchange,
    spools: Iterable[tuple[str, Callable[..., NodeResult], NodeShard]] | None,
    outputs: Sequence[tuple[int, int, Callable[[int], str]]],
    run_shard: Callable[..., Receipt],
    token: str,
) -> Iterator[Node | Barrier]:
    """The one pipeline of the kinds that spool (generated objects, annotations): the spool
    tasks (`spools`, lazily: key, run, what each takes; None where another stream runs them), each
    index into the job's exchange `table`, a barrier; then a task per shard of each output
    (`outputs`: its number in the table, in the task, and its key from a shard number) that
    any spool sent a piece to, with the ranges it reads (known only once the spools ran)."""
    if spools is not None:
        collect = _collector(table)
        for key, run, shard in spools:
            yield Node(key, run, shard, collect=collect)
        yield Barrier()
    for in_table, output, key_of in outputs:
        for number in table.shards(in_table):
            ranges = tuple(table.ranges(in_table, number))
            task = SpooledShardTask(key_of(number), number, ranges, output)
            yield Node(f"shard-{task.key}-{token}", run_shard, task)


def _addition_nodes(
    plan: AdditionPlan, token: str, exchanges: Exchanges
) -> Iterator[Node | Barrier]:
    """The levels an addition adds (its companions run their own streams)."""
    if plan.levels is None:
        return iter(())
    if plan.feeding_blocks is not None:
        return _fed_levels_nodes(plan, token, exchanges)
    return _pyramid_nodes(plan.levels, token)


# Each dataset kind's stream of tasks, registered once: a kind is its plan type, its stream
# here, its verify (verification/dataset.BY_KIND).
STREAMS: dict[str, Callable[[Any, str, Exchanges], Iterator[Node | Barrier]]] = {
    DatasetKind.VOLUME: _volume_nodes,
    DatasetKind.OBJECTS: _object_nodes,
    DatasetKind.GENERATED: _generated_nodes,
    DatasetKind.ANNOTATIONS: _annotation_nodes,
    DatasetKind.ADDITION: _addition_nodes,
}


def shard_nodes(
    plan: Plan, token: str, exchanges: Exchanges | None = None
) -> Iterator[Node | Barrier]:
    """The stream of `plan`'s shard tasks; `token` must make their keys unique to this job
    and dataset: a Dask cluster handed a key it still holds returns that task's result
    instead of running the new task (a job's mesh and skeleton shards share file names).
    `exchanges`: the job's tables of block spools, shared by its generated outputs."""
    return STREAMS[plan.dataset](plan, token, {} if exchanges is None else exchanges)
