"""Running a job: its shard tasks fed to the cluster through a bounded window.

The driving process (the CLI, a notebook) is the job's coordinator: it begins each dataset
(coordinator.py), then walks the plans' shard streams (shard_stream.py) and keeps at most a
window of tasks on the cluster at once, a few per worker thread, submitting the next as earlier
ones finish. However many shards the plan has, the scheduler holds a window of tasks, the
client holds the window's futures and a compact table of receipts (manifest.ReceiptTable), and
the first tasks run as soon as the first shards are enumerated. Receipts are journaled by the
shard tasks themselves as they store; here they are counted for progress and folded into the
manifest, written once every task has returned.

The tasks run on a `Runner` (runners.py): a distributed client or a thread pool of this
process.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from shardwright.errors import LeaseUnrenewed, PlanError
from shardwright.generation.exchange import Exchange
from shardwright.jobs.coordinator import Begun, begin_dataset, finish_dataset
from shardwright.jobs.logs import LOG
from shardwright.jobs.progress import Progress
from shardwright.jobs.runners import Runner
from shardwright.jobs.shard_stream import Barrier, Node, TaskContext, receipts_in, shard_nodes
from shardwright.jobs.supervision import WATCH_S, Supervisor
from shardwright.lifecycle.job import Job
from shardwright.lifecycle.manifest import CompanionTotals, Manifest, ReceiptTable

WINDOW_PER_THREAD = 4  # tasks on the cluster per worker thread: enough to never idle
MIN_WINDOW = 8
THREADS_REFRESH_S = 5.0  # how often the window follows a cluster that grows or shrinks


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
                            self._settle(waiting, held, progress)
                        continue
                    while len(waiting) >= self.size():
                        self._settle(waiting, held, progress)
                    self._submit(node, context, table, held, waiting)
            while waiting:
                self._settle(waiting, held, progress)
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
        """Submit one node. Its handle lives only in `waiting` (and `held`), which `_settle`
        releases once finished and taken by every later node that takes it."""
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

    def _settle(
        self,
        waiting: dict[Any, tuple[Node, ReceiptTable]],
        held: dict[str, list[Any]],
        progress: Progress,
    ) -> None:
        """Wait for some tasks to finish; fold in the receipts of those that carry them, and
        release those no later node still has to take (the scheduler forgets them before the
        next submission: it holds at most the window)."""
        done = self.runner.finished(WATCH_S)
        self.watch()
        carrying = [handle for handle in done if not waiting[handle][0].consumers]
        for handle in done:
            if waiting[handle][0].consumers:
                self.runner.check(handle)
        for handle, result in zip(carrying, self.runner.results(carrying, self.watch),
                                  strict=True):  # fmt: skip
            node, table = waiting[handle]
            receipts = receipts_in(result)
            for receipt in receipts:
                table.add(receipt)
            progress.add(receipts)
            if node.collect is not None:  # what is not a shard of the manifest: progress only
                progress.add(node.collect(result))
        self.runner.release([handle for handle in done if waiting[handle][0].key not in held])
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
                                   progress or Progress(enabled=False),
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
    stores = {b.plan.dest: b.store for b in begun}
    streams = [
        (
            runner.put(f"context-{i}-{token}", TaskContext.of(b.plan, b.store, resume, stores)),
            shard_nodes(b.plan, f"{i}-{token}", exchanges),
            table,
        )
        for i, (b, table) in enumerate(zip(begun, tables, strict=True))
    ]
    progress.start([dataset.claim.planned for dataset in job.datasets])  # as their records
    LOG.info("running %d shard tasks on %s", progress.tasks[1], runner.describe())
    Window(runner, window, supervisor.check).run(streams, progress)
    progress.finish()
    LOG.info("every shard task returned; writing the manifests")
    cluster = runner.describe()
    companions = [
        CompanionTotals(b.plan.dest, finish_dataset(b, table, cluster=cluster).totals)
        for b, table in zip(begun[1:], tables[1:], strict=True)
    ]
    return finish_dataset(begun[0], tables[0], companions, cluster)
