"""Running a job: its shard tasks fed to the cluster through a bounded window.

The driving process (the CLI, a notebook) is the job's coordinator: it begins each dataset
(coordinator.py), then walks the plans' shard streams (shard_stream.py) and keeps at most a
window of tasks on the cluster at once, a few per worker thread, submitting the next as earlier
ones finish. However many shards the plan has, the scheduler holds a window of tasks, the
client holds the window's futures and a compact table of receipts (manifest.ReceiptTable), and
the first tasks run as soon as the first shards are enumerated. Receipts are journaled by the
shard tasks themselves as they store; here they are counted for progress and folded into the
manifest, written once every task has returned.

Two runners carry the tasks: a distributed client (a local cluster we start, or the user's
scheduler; a task lost with its worker is recomputed elsewhere, up to TASK_RETRIES times) and
a thread pool (`--scheduler threads` or `sync`, no cluster at all).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from shardwright.errors import JobFailed, LeaseUnrenewed, PlanError
from shardwright.generation.exchange import Exchange
from shardwright.jobs.coordinator import Begun, begin_dataset, finish_dataset
from shardwright.jobs.progress import Progress
from shardwright.jobs.shard_stream import Barrier, Node, TaskContext, receipts_in, shard_nodes
from shardwright.jobs.supervision import WATCH_S, Supervisor
from shardwright.jobs.workers import GPU_RESOURCE, WorkerWatch, check_gpu_workers, check_reach
from shardwright.lifecycle.job import Job
from shardwright.logs import LOG
from shardwright.manifest import CompanionTotals, Manifest, ReceiptTable

TASK_RETRIES = 3  # a shard lost with its worker is recomputed elsewhere
WINDOW_PER_THREAD = 4  # tasks on the cluster per worker thread: enough to never idle
MIN_WINDOW = 8
THREADS_REFRESH_S = 5.0  # how often the window follows a cluster that grows or shrinks


class Runner(Protocol):
    """Where tasks run: submits them, says which finished, hands their results back."""

    def threads(self) -> int: ...
    def describe(self) -> str: ...
    def ready(self, places: list[tuple[str, str]]) -> None: ...
    def put(self, key: str, value: Any) -> Any: ...
    def submit(self, node: Node, context: Any, inputs: list[Any]) -> Any: ...
    def finished(self, timeout: float) -> list[Any]: ...
    def results(self, handles: list[Any], watch: Callable[[], None]) -> list[Any]: ...
    def check(self, handle: Any) -> None: ...
    def cancel(self, handles: list[Any]) -> None: ...
    def released(self) -> None: ...


class DistributedRunner:
    """Tasks on a Dask distributed cluster, through `client` (`started`: a cluster started
    for this job, which the job's record calls so)."""

    def __init__(
        self,
        client: Any,
        started: bool = False,
        wait_for_workers: float | None = None,
        gpu: bool = False,
    ) -> None:
        from distributed import as_completed

        self.client = client
        self.started = started
        self.gpu = gpu
        self.workers = WorkerWatch(client, started, wait_for_workers)
        self._done = as_completed(loop=client.loop)

    def ready(self, places: list[tuple[str, str]]) -> None:
        """Before anything is written: a worker connected (waited for, and said so), and
        one that sees every `(role, location)` of the job as this process does."""
        self.workers.wait()
        if self.gpu:
            check_gpu_workers(self.client)
        if not str(self.client.scheduler.address).startswith("inproc://"):
            check_reach(self.client, places)

    def threads(self) -> int:
        return sum(self.client.nthreads().values())

    def memory_limit(self) -> int | None:
        return self.workers.memory_limit()

    def describe(self) -> str:
        threads = self.client.nthreads()
        size = f"{len(threads)} worker(s), {sum(threads.values())} thread(s)"
        if self.started:
            return f"a local Dask cluster started for the job ({size})"
        return f"the Dask cluster at {self.client.scheduler.address} ({size})"

    def put(self, key: str, value: Any) -> Any:
        # A task that returns the value rather than scattered data: the scheduler can
        # recompute it if the worker holding it is lost.
        return self.client.submit(_identity, value, key=key, pure=False)

    def submit(self, node: Node, context: Any, inputs: list[Any]) -> Any:
        resources = {"resources": {GPU_RESOURCE: 1}} if node.gpu else {}
        future = self.client.submit(
            node.run,
            context,
            node.shard,
            *inputs,
            key=node.key,
            pure=False,
            retries=TASK_RETRIES,
            **resources,
        )
        self._done.add(future)
        return future

    def finished(self, timeout: float) -> list[Any]:
        """Tasks finished within `timeout`; none finished, a cluster left without workers is
        said, waited for or given up on (WorkerWatch)."""
        done = self._done
        deadline = time.monotonic() + timeout
        with self._scheduler_kept():
            while done.queue.empty() and not done.is_empty():
                left = deadline - time.monotonic()
                if left <= 0:
                    self.workers.check()
                    return []
                with done.thread_condition:  # notified as each future finishes
                    done.thread_condition.wait(timeout=min(left, 0.1))
            return done.next_batch(block=not done.is_empty())

    def results(self, handles: list[Any], watch: Callable[[], None]) -> list[Any]:
        """The results of finished tasks, gathered at once. One whose result was lost with its
        worker is run again first: that wait is watched as `finished`'s is (`watch` every
        WATCH_S, and a cluster left without workers)."""
        if not handles:
            return []
        with self._scheduler_kept():
            gathering = asyncio.run_coroutine_threadsafe(
                _gathered(self.client, handles), self.client.loop.asyncio_loop
            )
            try:
                while True:
                    try:
                        return gathering.result(timeout=WATCH_S)
                    except TimeoutError:
                        self.workers.check()
                        watch()
            finally:
                gathering.cancel()

    @contextlib.contextmanager
    def _scheduler_kept(self) -> Iterator[None]:
        """A lost scheduler said as what it is (distributed raises its connection errors, or
        cancels every future once the client stops reconnecting), with what to do; a task's
        own error, the client still connected, goes through as it is."""
        from distributed.comm.core import CommClosedError

        address = self.client.scheduler.address
        try:
            yield
        except Exception as exc:
            if not isinstance(exc, CommClosedError) and self.client.status == "running":
                raise
            said = (str(exc).splitlines() or [""])[0]  # distributed's own advice follows
            raise JobFailed(
                f"lost the Dask scheduler at {address} while the job ran "
                f"({type(exc).__name__}: {said}); the shards stored so far are kept: once a "
                "scheduler and its workers are back, continue with {resume}",
                resume=True,
            ) from None

    def check(self, handle: Any) -> None:
        if handle.status == "error":
            handle.result()  # raises the task's error

    def cancel(self, handles: list[Any]) -> None:
        if handles:
            self.client.cancel(handles)

    def released(self) -> None:
        """Once finished futures are dropped, their release reaches the scheduler before the
        next submission: the client queues a release on its event loop, which queues the
        message itself behind whatever was queued meanwhile; a turn of the loop here puts
        the message ahead of the next task."""
        self.client.sync(_loop_turn)


class ThreadRunner:
    """Tasks on a pool of threads of this process (one thread: `--scheduler sync`). The
    stream submits a task after those it takes, and the pool starts them in that order, so a
    task waiting for its inputs waits only for tasks already running."""

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, "shardwright-task")
        self._pending: set[concurrent.futures.Future[Any]] = set()

    def threads(self) -> int:
        return self._threads

    def ready(self, places: list[tuple[str, str]]) -> None:
        pass  # threads of this process see what it sees

    def describe(self) -> str:
        if self._threads == 1:
            return "this process, one task at a time (no Dask cluster)"
        return f"{self._threads} threads of this process (no Dask cluster)"

    def put(self, key: str, value: Any) -> Any:
        return value

    def submit(self, node: Node, context: Any, inputs: list[Any]) -> Any:
        future = self._pool.submit(_call_when_ready, node, context, inputs)
        self._pending.add(future)
        return future

    def finished(self, timeout: float) -> list[Any]:
        done, self._pending = concurrent.futures.wait(
            self._pending, timeout, return_when=concurrent.futures.FIRST_COMPLETED
        )
        return list(done)

    def results(self, handles: list[Any], watch: Callable[[], None]) -> list[Any]:
        return [handle.result() for handle in handles]

    def check(self, handle: Any) -> None:
        handle.result()

    def cancel(self, handles: list[Any]) -> None:
        for handle in handles:
            handle.cancel()

    def released(self) -> None:
        pass

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _identity(value: Any) -> Any:
    return value


async def _loop_turn() -> None:
    pass


async def _gathered(client: Any, handles: list[Any]) -> list[Any]:
    return await client.gather(handles, asynchronous=True)


def _call_when_ready(node: Node, context: Any, inputs: list[Any]) -> Any:
    return node.run(context, node.shard, *(handle.result() for handle in inputs))


def check_window(size: int | None) -> None:
    """Refuse a window that could hold no task (None: sized from the cluster)."""
    if size is not None and size < 1:
        raise PlanError(f"the submission window must be at least 1 task, not {size}")


class Window:
    """Feeds nodes to a runner, at most `size` unfinished at once (by default a few per
    worker thread, following the cluster as it grows or shrinks). While it waits for tasks
    it calls `watch` every WATCH_S at least, which raises to stop the job (its leases)."""

    def __init__(
        self, runner: Runner, size: int | None = None, watch: Callable[[], None] | None = None
    ) -> None:
        check_window(size)
        self.runner = runner
        self.watch = watch or (lambda: None)
        self.fixed = size
        self._size = 0
        self._sized_at = -THREADS_REFRESH_S
        self.peak = 0  # the most tasks it had unfinished at once

    def size(self) -> int:
        if self.fixed is not None:
            return self.fixed
        if time.monotonic() - self._sized_at >= THREADS_REFRESH_S:
            self._size = max(MIN_WINDOW, WINDOW_PER_THREAD * self.runner.threads())
            self._sized_at = time.monotonic()
        return self._size

    def run(
        self,
        streams: Sequence[tuple[Any, Iterator[Node | Barrier], ReceiptTable]],
        progress: Progress,
    ) -> None:
        """Run every node of `streams` (each: a dataset's context handle, its nodes and the
        table its receipts go to); raises the first task error, the rest cancelled."""
        held: dict[str, list[Any]] = {}  # results later nodes take: key -> [handle, takers]
        waiting: dict[Any, tuple[Node, ReceiptTable]] = {}
        try:
            for context, nodes, table in streams:
                for node in nodes:
                    if isinstance(node, Barrier):
                        while waiting:
                            self._settle(waiting, progress)
                        continue
                    while len(waiting) >= self.size():
                        self._settle(waiting, progress)
                        self.runner.released()
                    self._submit(node, context, table, held, waiting)
            while waiting:
                self._settle(waiting, progress)
        except BaseException:
            self.runner.cancel([*waiting, *(entry[0] for entry in held.values())])
            raise

    def _submit(
        self,
        node: Node,
        context: Any,
        table: ReceiptTable,
        held: dict[str, list[Any]],
        waiting: dict[Any, tuple[Node, ReceiptTable]],
    ) -> None:
        """Submit one node. Its handle lives only in `waiting` (and `held`): no local of the
        loop keeps a finished task's future, whose release must reach the scheduler before
        the next submission (`released`)."""
        inputs = [self._take(held, key) for key in node.inputs]
        handle = self.runner.submit(node, context, inputs)
        if node.consumers:
            held[node.key] = [handle, node.consumers]
        waiting[handle] = (node, table)
        self.peak = max(self.peak, len(waiting))

    @staticmethod
    def _take(held: dict[str, list[Any]], key: str) -> Any:
        """The handle of an earlier node's result, forgotten once its last taker has it."""
        entry = held[key]
        entry[1] -= 1
        if not entry[1]:
            del held[key]
        return entry[0]

    def _settle(self, waiting: dict[Any, tuple[Node, ReceiptTable]], progress: Progress) -> None:
        """Wait for some tasks to finish; fold in the receipts of those that carry them."""
        done = self.runner.finished(WATCH_S)
        self.watch()
        carrying = [handle for handle in done if not waiting[handle][0].consumers]
        for handle in done:
            if waiting[handle][0].consumers:
                self.runner.check(handle)
        for handle, result in zip(carrying, self.runner.results(carrying, self.watch),
                                  strict=True):  # fmt: skip
            node, table = waiting[handle]
            if node.collect is not None:  # not a shard of the manifest: progress only
                progress.add(node.collect(result))
                continue
            receipts = receipts_in(result)
            for receipt in receipts:
                table.add(receipt)
            progress.add(receipts)
        for handle in done:
            del waiting[handle]


def run_job(
    job: Job,
    runner: Runner,
    *,
    resume: bool = False,
    window: int | None = None,
    progress: Progress | None = None,
    preflight_requests: dict[str, int] | None = None,
) -> Manifest:
    """Run `job` on `runner` and return its manifest (the volume's; each companion's own is
    written in its destination). Its leases are renewed from this process while it runs, and
    its coordinator is watched (supervision.py): it stops within its leases' timeout whatever
    it waits on, and a job that fails gives its leases back within that time too."""
    places = [place for dataset in job.datasets for place in dataset.places]
    runner.ready(places)  # nothing is written before the cluster can run the job
    with job.renewer() as leases:
        supervisor = Supervisor(leases)

        def coordinate() -> Manifest:
            try:
                return _coordinate(job, runner, supervisor, resume, window,
                                   progress or Progress(0, enabled=False),
                                   preflight_requests)  # fmt: skip
            except LeaseUnrenewed:
                raise  # the store does not answer this host: its leases run out by themselves
            except BaseException:
                with contextlib.suppress(OSError):  # a lease not given back expires
                    job.release()
                raise

        return supervisor.run(coordinate)


def _coordinate(
    job: Job,
    runner: Runner,
    supervisor: Supervisor,
    resume: bool,
    window: int | None,
    progress: Progress,
    preflight_requests: dict[str, int] | None,
) -> Manifest:
    """The coordinator's steps: begin each dataset, run its shard tasks, finish it."""
    token = uuid.uuid4().hex[:8]
    begun: list[Begun] = []
    for i, dataset in enumerate(job.datasets):
        supervisor.check()  # a stop while it waited for the last dataset's lease
        preflight = preflight_requests if i == 0 else None
        LOG.info("beginning %s (%s): its lease, job record and metadata", dataset.plan.dest,
                 job.mode)  # fmt: skip
        begun.append(begin_dataset(dataset.plan, dataset.store, dataset.claim, preflight))
    tables = [ReceiptTable() for _ in begun]
    exchanges: dict[str, Exchange] = {}  # generated outputs' block spools
    streams = [
        (
            runner.put(f"context-{i}-{token}", TaskContext.of(b.plan, b.store, resume)),
            shard_nodes(b.plan, f"{i}-{token}", exchanges),
            table,
        )
        for i, (b, table) in enumerate(zip(begun, tables, strict=True))
    ]
    progress.start(sum(b.plan.shard_total for b in begun))
    LOG.info("running %d shard tasks on %s", progress.total, runner.describe())
    Window(runner, window, supervisor.check).run(streams, progress)
    progress.finish()
    LOG.info("every shard task returned; writing the manifests")
    cluster = runner.describe()
    companions = [
        CompanionTotals(b.plan.dest, finish_dataset(b, table, cluster=cluster).totals)
        for b, table in zip(begun[1:], tables[1:], strict=True)
    ]
    return finish_dataset(begun[0], tables[0], companions, cluster)
