"""The Dask graph of a conversion, and running it on the scheduler the user picked.

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
import logging
import os
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import dask
from dask.delayed import Delayed, delayed

from shardwright.engine import run_shard
from shardwright.engine.pyramid import Handoff, Piece, run_pyramid_shard
from shardwright.errors import PlanError
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
from shardwright.objects import ObjectPlan, ObjectShardTask
from shardwright.plan import ConversionPlan, ShardTask
from shardwright.store import JobRun, Store

TASK_RETRIES = 3  # a shard lost with its worker is recomputed elsewhere
GPU_RESOURCE = "GPU"


def write_metadata(plan: ConversionPlan | ObjectPlan, store: Store) -> dict[str, int]:
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


def _begin(plan: ConversionPlan | ObjectPlan, store: Store, claim: Claim | None) -> Begun:
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
        from shardwright.engine.gpu import run_shard_gpu  # CuPy only on GPU workers

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
    from shardwright.engine.objects import run_object_shard

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
        from shardwright.engine.gpu import cupy_module

        xp = cupy_module()
    receipt, handoff = run_pyramid_shard(plan, task, store, pieces, resume=resume, xp=xp)
    return LevelResult([journal.record(store, receipt), *receipts], handoff)


def _piece(result: LevelResult, consumer: str) -> Piece:
    """The part of a producer's reduced voxels that one task of the level above takes."""
    return result.handoff[consumer]


def _receipts_of(result: LevelResult) -> list[Receipt]:
    return result.receipts


def _pyramid_receipts(
    plan: ConversionPlan, plan_node: Delayed, store_node: Delayed, resume: bool, metadata: Any,
    token: str,
) -> list[Delayed]:  # fmt: skip
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
                    dask_key_name=f"piece-{producer.key}-{task.key}-{token}",
                )
                for producer in plan.producers(task)
            ]
            node = delayed(_pyramid_shard, pure=False)(
                plan_node,
                task,
                store_node,
                resume,
                metadata,
                *inputs,
                dask_key_name=f"shard-{task.key}-{token}",
            )
            results[task.key] = node
            sole_consumer[task.key] = len(plan.consumers(task)) == 1
            if not sole_consumer[task.key]:  # the top level, or a producer split in pieces
                receipt_lists.append(
                    delayed(_receipts_of, pure=True)(
                        node, dask_key_name=f"receipts-{task.key}-{token}"
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


def build_graph(
    plan: ConversionPlan | ObjectPlan,
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
    # Mesh and skeleton tasks carry their own segment ids: the shared plan holds none.
    shared: Any = (
        plan.without_ids()
        if isinstance(plan, ObjectPlan)
        else dataclasses.replace(plan, companions=())
    )
    plan_node = delayed(shared, name=f"plan-{token}", pure=True, traverse=False)
    store_node = delayed(store, name=f"store-{token}", pure=True, traverse=False)
    metadata = delayed(_begin, pure=False)(
        plan_node, store_node, claim, dask_key_name=f"metadata-{token}"
    )
    # GPU shard tasks go to workers that declare a GPU resource (dask-cuda-worker ...
    # --resources GPU=1); on our own LocalCUDACluster every worker is one GPU.
    gpu = {"resources": {GPU_RESOURCE: 1}} if plan.options.engine == "gpu" else {}
    with dask.annotate(retries=TASK_RETRIES, **gpu):
        if isinstance(plan, ObjectPlan):
            receipts = [
                delayed(_object_shard, pure=False)(
                    plan_node,
                    task,
                    store_node,
                    resume,
                    metadata,
                    dask_key_name=f"shard-{task.key}-{token}",
                )
                for task in plan.shards()
            ]
        elif plan.pyramid is not None:
            receipts = _pyramid_receipts(plan, plan_node, store_node, resume, metadata, token)
        else:
            receipts = [
                delayed(_shard, pure=False)(
                    plan_node,
                    task,
                    store_node,
                    resume,
                    metadata,
                    dask_key_name=f"shard-{task.key}-{token}",
                )
                for task in plan.shards()
            ]
    # Meshes / skeletons of the same job: their own graphs (shards, info, manifest); the
    # volume's manifest, which marks the job complete, waits for theirs.
    for companion in getattr(plan, "companions", ()):
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


# A local cluster's dashboard listens on loopback only (port chosen free): not on every
# interface of a shared machine.
LOCAL_DASHBOARD = "127.0.0.1:0"
LOCAL_SCHEDULERS = ("local", "processes", "threads", "sync", "synchronous")


def scheduler_address(scheduler: str | None) -> str | None:
    """The scheduler named on the command line, else $DASK_SCHEDULER_ADDRESS, else None."""
    if scheduler in (None, "") and os.environ.get("DASK_SCHEDULER_ADDRESS"):
        return os.environ["DASK_SCHEDULER_ADDRESS"]
    if scheduler in (None, "", *LOCAL_SCHEDULERS):
        return None
    return scheduler


@contextmanager
def _client(
    scheduler: str | None, workers: int | None, quiet: bool, gpu: bool = False
) -> Iterator[Any]:
    """A distributed client: to the given address, or to a local cluster we start and stop.

    The default local cluster runs its workers as threads of this process: shard tasks spend
    their time in C codecs and I/O that release the GIL, and starting no processes saves
    about a second per job. `processes` starts one single-threaded worker process per core.
    """
    from distributed import Client

    address = scheduler_address(scheduler)
    if address is not None:
        with Client(address) as client:
            yield client
        return
    if gpu:
        with _local_cuda_cluster(workers, quiet) as client:
            yield client
        return
    cores = workers or max(1, os.cpu_count() or 1)
    # Without a dashboard nobody can see the workers' statistical profiler, which samples
    # every thread's stack every 10 ms while holding the GIL the shard tasks need.
    with dask.config.set({"distributed.worker.profile.enabled": not quiet}):
        if scheduler == "processes":
            cluster = local_cluster(processes=True, workers=cores, threads=1, dashboard=not quiet)
        else:
            cluster = local_cluster(processes=False, workers=1, threads=cores, dashboard=not quiet)
    try:
        with Client(cluster) as client:
            if not quiet:
                print(f"dask dashboard: {local_dashboard_link(client)}", file=sys.stderr)
            yield client
    finally:
        cluster.close()


def local_cluster(*, processes: bool, workers: int, threads: int, dashboard: bool) -> Any:
    """A cluster of our own whose every server (scheduler, workers, their HTTP endpoints)
    listens on 127.0.0.1 only: worker threads of this process (`inproc`), or one worker
    process per core behind a nanny (`tcp` on loopback).

    The dashboard (bokeh) costs a few tenths of a second to start: only when someone looks.
    Task errors reach the caller through the manifest future; the cluster's own log would only
    add noise (e.g. the progress feed cancelled as the cluster closes).
    """
    from distributed import Nanny, Scheduler, SpecCluster, Worker

    protocol, host = ("tcp://", "127.0.0.1") if processes else ("inproc://", None)
    scheduler = {
        "cls": Scheduler,
        "options": dict(
            protocol=protocol, host=host, dashboard=dashboard, dashboard_address=LOCAL_DASHBOARD
        ),
    }
    worker = {
        "cls": Nanny if processes else Worker,
        "options": dict(
            protocol=protocol,
            host=host,
            nthreads=threads,
            dashboard=False,
            dashboard_address=LOCAL_DASHBOARD,  # its HTTP endpoint (metrics), on loopback
            silence_logs=logging.CRITICAL,
        ),
    }
    return SpecCluster(
        scheduler=scheduler,
        workers={i: worker for i in range(workers)},
        silence_logs=logging.CRITICAL,
    )


def local_dashboard_link(client: Any) -> str:
    """The dashboard of a cluster we started, as it can be opened: it listens on loopback only,
    while distributed's own link names the scheduler's host (the machine's address when the
    workers are threads of this process)."""
    port = urllib.parse.urlsplit(client.dashboard_link).port
    return f"http://127.0.0.1:{port}/status"


@contextmanager
def _local_cuda_cluster(workers: int | None, quiet: bool) -> Iterator[Any]:
    """One single-threaded worker per GPU (dask-cuda), each declaring the GPU resource."""
    from distributed import Client

    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as exc:
        raise PlanError(
            "the GPU engine starts a dask-cuda cluster: pip install 'shardwright[gpu-cu13]' "
            f"(gpu-cu12 for CUDA 12; {exc})"
        ) from None
    cluster = LocalCUDACluster(
        host="127.0.0.1",  # every server on loopback (workers' HTTP endpoints follow the host)
        n_workers=workers,
        threads_per_worker=1,
        resources={GPU_RESOURCE: 1},
        dashboard_address=None if quiet else LOCAL_DASHBOARD,
        silence_logs=logging.CRITICAL,
    )
    try:
        with Client(cluster) as client:
            if not quiet:
                print(f"dask dashboard: {local_dashboard_link(client)}", file=sys.stderr)
            yield client
    finally:
        cluster.close()


def check_gpu_workers(client: Any) -> None:
    """Refuse to submit GPU shard tasks to a cluster with no worker that could run them."""
    workers = client.scheduler_info().get("workers", {}).values()
    if not any(w.get("resources", {}).get(GPU_RESOURCE) for w in workers):
        raise PlanError(
            f"no worker of {client.scheduler.address} declares a {GPU_RESOURCE} resource; "
            f"start GPU workers with `dask-cuda-worker ADDRESS --resources {GPU_RESOURCE}=1`"
        )


def execute(
    graph: Delayed,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    client: Any = None,
    progress: bool = True,
    gpu: bool = False,
) -> dict[str, Any]:
    """Run the graph and return the manifest (GPU graphs on a distributed cluster only)."""
    if client is not None:
        if gpu:
            check_gpu_workers(client)
        return _run_on_client(client, graph, progress)
    if gpu:
        if scheduler_address(scheduler) is None and scheduler not in (None, "", "local"):
            raise PlanError(
                f"the GPU engine runs on a dask-cuda cluster: use the default scheduler or "
                f"an address, not {scheduler!r}"
            )
        with _client(scheduler, workers, quiet=not progress, gpu=True) as own_client:
            check_gpu_workers(own_client)
            return _run_on_client(own_client, graph, progress)
    if scheduler_address(scheduler) is None and scheduler in ("threads", "sync", "synchronous"):
        from dask.diagnostics import ProgressBar

        kind = "threads" if scheduler == "threads" else "synchronous"
        kwargs: dict[str, Any] = {"num_workers": workers} if kind == "threads" and workers else {}
        with ProgressBar(out=sys.stderr) if progress else nullcontext():
            (result,) = dask.compute(graph, scheduler=kind, **kwargs)
        return result
    with _client(scheduler, workers, quiet=not progress) as own_client:
        return _run_on_client(own_client, graph, progress)


def _run_on_client(client: Any, graph: Delayed, progress: bool) -> dict[str, Any]:
    from distributed import progress as progress_bar

    future = client.compute(graph)
    if progress:
        progress_bar(future)
        print(file=sys.stderr)
    return future.result()
