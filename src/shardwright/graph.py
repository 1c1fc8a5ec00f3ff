"""The Dask graph of a conversion (cluster.py runs it on the scheduler the user picked).

One task per shard (the only writer of that object), after a coordinator task that begins the
job in its destination (withdraws a replaced dataset's manifest, records the job) and writes
`info` / `zarr.json`; each shard task journals a receipt of what it stored; a final
coordinator task writes the manifest from the receipts, removes what a replaced dataset owned
and the new one does not reuse, and releases the job's lease (lifecycle/).
Pyramids chain the levels: a level-k shard task depends on the level-(k-1) tasks whose reduced
voxels make up its region, so the source is read once and no task holds more than its share
of the budget. A producer that feeds one task (the usual case: level shards nest) hands it its
whole result, receipts included, which travel up to the manifest with the top level's; one
that feeds several is split by small getter tasks, so each consumer fetches only its piece.
Every task costs the distributed scheduler and worker a millisecond or two of Python (under
the GIL the shard tasks need): the graph has as few as the data flow allows.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import dask
from dask.delayed import Delayed, delayed

from shardwright.cluster import GPU_RESOURCE
from shardwright.engine import run_shard
from shardwright.engine.gpu import cupy_module, run_shard_gpu  # CuPy itself only on GPU workers
from shardwright.engine.objects import run_object_shard
from shardwright.engine.pyramid import Handoff, Piece, run_pyramid_shard
from shardwright.lifecycle import journal, lease
from shardwright.lifecycle.job import Claim, begin
from shardwright.manifest import (
    CompanionTotals,
    Receipt,
    build_manifest,
    metadata_digests,
    metadata_text,
    write_manifest,
)
from shardwright.planning import OBJECTS, VOLUME, ConversionPlan, Plan, ShardTask
from shardwright.planning.objects import ObjectPlan, ObjectShardTask
from shardwright.store import JobRun, Store

TASK_RETRIES = 3  # a shard lost with its worker is recomputed elsewhere


def write_metadata(plan: Plan, store: Store) -> dict[str, int]:
    """The dataset's metadata objects (`info` or `zarr.json`; a zarr3 pyramid's level arrays
    and multiscales group). Returns the requests it made, for the manifest's totals."""
    before = store.requests.snapshot()
    for key, document in plan.metadata_documents():
        store.write_text(key, metadata_text(document))
    return store.requests.since(before)


@dataclasses.dataclass(frozen=True)
class Begun:
    """What the coordinator's first step hands every task of its dataset: the run their
    writes carry (None for a graph built without a job), and the requests it made."""

    run: JobRun | None
    requests: dict[str, int]

    def store(self, store: Store) -> Store:
        return store if self.run is None else store.with_run(self.run)


def _begin(plan: Plan, store: Store, claim: Claim | None) -> Begun:
    """Coordinator, first step, once the job runs: take the destination and begin the job
    there (lifecycle/job.py), then write the metadata."""
    before = store.requests.snapshot()
    run = None
    if claim is not None:
        run, notices = begin(store, claim)
        for notice in notices:
            print(f"shardwright: {notice}", file=sys.stderr)
    write_metadata(plan, store.with_run(run) if run else store)
    return Begun(run, store.requests.since(before))


def _shard(
    plan: ConversionPlan,
    task: ShardTask,
    store: Store,
    resume: bool,
    begun: Begun,
) -> Receipt:
    store = begun.store(store)
    if plan.options.engine == "gpu":
        receipt = run_shard_gpu(plan, task, store, resume=resume)
    else:
        receipt = run_shard(plan, task, store, resume=resume)
    return journal.record(store, receipt)


def _object_shard(
    plan: ObjectPlan,
    task: ObjectShardTask,
    store: Store,
    resume: bool,
    begun: Begun,
) -> Receipt:
    store = begun.store(store)
    return journal.record(store, run_object_shard(plan, task, store, resume=resume))


@dataclasses.dataclass(frozen=True)
class LevelResult:
    """What a pyramid shard task hands on: its receipt and those of the producers it alone
    consumed, and the reduced pieces for the level above."""

    receipts: list[Receipt]
    handoff: Handoff


def _pyramid_shard(
    plan: ConversionPlan,
    task: ShardTask,
    store: Store,
    resume: bool,
    begun: Begun,
    *inputs: LevelResult | Piece,
) -> LevelResult:
    store = begun.store(store)
    pieces: list[Piece] = []
    receipts: list[Receipt] = []
    for item in inputs:
        if isinstance(item, LevelResult):  # a producer whose only consumer is this task
            pieces.append(item.handoff[task.key])
            receipts.extend(item.receipts)
        else:
            pieces.append(item)
    xp = None
    if plan.options.engine == "gpu":
        xp = cupy_module()
    receipt, handoff = run_pyramid_shard(plan, task, store, pieces, resume=resume, xp=xp)
    return LevelResult([journal.record(store, receipt), *receipts], handoff)


def _piece(result: LevelResult, consumer: str) -> Piece:
    """The part of a producer's reduced voxels that one task of the level above takes."""
    return result.handoff[consumer]


def _receipts_of(result: LevelResult) -> list[Receipt]:
    return result.receipts


@dataclasses.dataclass(frozen=True)
class _Shared:
    """What every shard task of one graph takes besides its shard: the plan and store nodes,
    whether to resume, the begin step it runs after, and the graph's key suffix."""

    plan: Delayed
    store: Delayed
    resume: bool
    metadata: Any
    token: str

    def task(self, run: Callable[..., Any], shard: Any, *inputs: Any) -> Delayed:
        """The task that runs `run` for one shard (with `inputs` handed up by others)."""
        return delayed(run, pure=False)(
            self.plan,
            shard,
            self.store,
            self.resume,
            self.metadata,
            *inputs,
            dask_key_name=f"shard-{shard.key}-{self.token}",
        )


def _pyramid_receipts(plan: ConversionPlan, shared: _Shared) -> list[Delayed]:
    """Every level's shard tasks, each fed by the tasks of the level below; the nodes whose
    results hold every receipt (lists of them, for the manifest).

    A producer's result is released once its consumers have run; the manifest waits only on
    receipt lists, never on reduced voxels.
    """
    results: dict[str, Delayed] = {}
    sole_consumer: dict[str, bool] = {}
    receipt_lists = []
    for level in range(plan.level_count):
        for task in plan.level_plan(level).shards():
            inputs = [
                results[producer.key]
                if sole_consumer[producer.key]
                else delayed(_piece, pure=True)(
                    results[producer.key],
                    task.key,
                    dask_key_name=f"piece-{producer.key}-{task.key}-{shared.token}",
                )
                for producer in plan.producers(task)
            ]
            node = shared.task(_pyramid_shard, task, *inputs)
            results[task.key] = node
            sole_consumer[task.key] = len(plan.consumers(task)) == 1
            if not sole_consumer[task.key]:  # the top level, or a producer split in pieces
                receipt_lists.append(
                    delayed(_receipts_of, pure=True)(
                        node, dask_key_name=f"receipts-{task.key}-{shared.token}"
                    )
                )
    return receipt_lists


def _companion_summary(manifest: dict[str, Any]) -> CompanionTotals:
    """A companion's manifest (its graph's result) as one input of the volume's manifest:
    no shard of the volume, its totals kept for the caller."""
    return CompanionTotals(manifest["plan"]["destination"], manifest["totals"])


def _finish(
    plan_description: dict[str, Any],
    store: Store,
    started: float,
    preflight_requests: dict[str, int],
    begun: Begun,
    metadata: dict[str, str],
    *receipts: Receipt | list[Receipt] | CompanionTotals,
) -> dict[str, Any]:
    """Coordinator, last step: the manifest, written only once every shard is stored; then
    what a replaced dataset owned and this one did not reuse is removed, and the lease
    released. Those last requests, and the manifest's own PUT, are not in its totals.

    A receipt may come as a list of them (pyramid levels hand theirs up together).
    Temporaries of shard writes that died with their worker are removed first: every shard
    is in place by now, so nothing still needs them. Returns the manifest as it is stored.
    """
    store = begun.store(store)
    store.remove_stale_temporaries()
    flat = [r for item in receipts for r in (item if isinstance(item, list) else [item])]
    own = [r for r in flat if isinstance(r, Receipt)]
    found = None
    if store.run is not None:  # found now, so that the manifest counts these requests too
        stored = {r.key for r in own if not r.empty} | set(metadata)
        found = journal.replaced(store, stored, {r.key for r in own})
    manifest = build_manifest(
        plan_description,
        own,
        time.time() - started,
        [preflight_requests, begun.requests],
        companions=[r for r in flat if isinstance(r, CompanionTotals)],
        job=store.run.job if store.run is not None else None,
        metadata=metadata,
    )
    write_manifest(store, manifest)
    if found is not None:
        journal.remove(store, found)
        lease.release(store)
    return manifest.to_json()


def _volume_shards(plan: ConversionPlan, shared: _Shared) -> list[Any]:
    """A task per shard of a volume (a pyramid's levels chained: `_pyramid_receipts`)."""
    if plan.pyramid is not None:
        return _pyramid_receipts(plan, shared)
    return [shared.task(_shard, task) for task in plan.shards()]


def _object_shards(plan: ObjectPlan, shared: _Shared) -> list[Any]:
    """A task per shard of a mesh or skeleton directory."""
    return [shared.task(_object_shard, task) for task in plan.shards()]


# The shard tasks of each kind of dataset (`Plan.dataset`).
SHARD_GRAPHS: dict[str, Callable[..., list[Any]]] = {
    VOLUME: _volume_shards,
    OBJECTS: _object_shards,
}


def build_graph(
    plan: Plan,
    store: Store,
    *,
    resume: bool = False,
    claim: Claim | None = None,
    companions: dict[str, Claim] | None = None,
    preflight_requests: dict[str, int] | None = None,
) -> Delayed:
    """A lazy Dask object whose result is the manifest.

    `claim`: how the job takes its destination when it runs (lifecycle/job.py; None: a graph
    that writes without a lease or journal, for tests of the engine alone); `resume` keeps the
    shards this job's receipts prove; `companions`: each companion dataset's claim, by
    destination.
    """
    token = uuid.uuid4().hex[:8]
    # Each shard task gets the plan without what it does not need (companions, other tasks'
    # segment ids): one copy of it in the graph, shared by every task.
    plan_node = delayed(plan.for_shard_tasks(), name=f"plan-{token}", pure=True, traverse=False)
    store_node = delayed(store, name=f"store-{token}", pure=True, traverse=False)
    metadata = delayed(_begin, pure=False)(
        plan_node, store_node, claim, dask_key_name=f"metadata-{token}"
    )
    # GPU shard tasks go to workers that declare a GPU resource (dask-cuda-worker ...
    # --resources GPU=1); on our own LocalCUDACluster every worker is one GPU.
    gpu = {"resources": {GPU_RESOURCE: 1}} if plan.options.engine == "gpu" else {}
    with dask.annotate(retries=TASK_RETRIES, **gpu):
        shared = _Shared(plan_node, store_node, resume, metadata, token)
        receipts = SHARD_GRAPHS[plan.dataset](plan, shared)
    # Meshes / skeletons of the same job: their own graphs (shards, info, manifest); the
    # volume's manifest, which marks the job complete, waits for theirs.
    for companion in plan.companions:
        companion_store = Store(companion.dest, companion.options.storage_options)
        receipts.append(
            delayed(_companion_summary, pure=True)(
                build_graph(
                    companion,
                    companion_store,
                    resume=resume,
                    claim=(companions or {}).get(companion.dest),
                ),
                dask_key_name=f"companion-{companion.dest}-{token}",
            )
        )
    return delayed(_finish, pure=False)(
        plan.describe(),
        store_node,
        time.time(),
        preflight_requests or {},
        metadata,
        metadata_digests(plan.metadata_documents()),
        *receipts,
        dask_key_name=f"manifest-{token}",
    )
