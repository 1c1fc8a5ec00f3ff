"""Where a job's tasks run, behind one interface (`Runner`), so that the window
(submission.py) speaks to no scheduler directly.

Two runners carry the tasks: a distributed client (a local cluster we start, or the user's
scheduler; a task lost with its worker is recomputed elsewhere, up to TASK_RETRIES times) and
a thread pool (`--scheduler threads` or `sync`, no cluster at all). Each says its cluster's
failures as the job's own errors: a scheduler lost, workers that kept dying under one task
(`lost_workers`). Only public Dask API is used; distributed is imported once a runner on it
is made, never when this module is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from shardwright.errors import NAMED, JobFailed
from shardwright.jobs.shard_stream import Node
from shardwright.jobs.supervision import WATCH_S
from shardwright.jobs.workers import GPU_RESOURCE, WorkerWatch, check_gpu_workers, check_reach
from shardwright.planning.text import human_bytes

if TYPE_CHECKING:
    from distributed import KilledWorker

TASK_RETRIES = 3  # a shard lost with its worker is recomputed elsewhere


class Runner(Protocol):
    """Where tasks run: submits them, says which finished, hands their results back."""

    def threads(self) -> int:
        """How many tasks run at once (the window is a few per thread)."""
        ...

    def describe(self) -> str:
        """Where the tasks ran, in words, for the log and the manifest."""
        ...

    def memory_limit(self) -> int | None:
        """The least memory one worker may hold (bytes), None where unbounded or unknown."""
        ...

    def ready(self, places: list[tuple[str, str]]) -> None:
        """Before anything is written: the runner can run the job's tasks."""
        ...

    def put(self, key: str, value: Any) -> Any:
        """A value every task of a dataset takes, sent once (its handle)."""
        ...

    def submit(self, node: Node, context: Any, inputs: list[Any]) -> Any:
        """Start `node` on `inputs` (handles of earlier nodes); its handle."""
        ...

    def finished(self, timeout: float) -> list[Any]:
        """Handles of tasks finished since last asked, waiting up to `timeout` for one."""
        ...

    def results(self, handles: list[Any], watch: Callable[[], None]) -> list[Any]:
        """The results of finished tasks; raises the first task's error."""
        ...

    def check(self, handle: Any) -> None:
        """Raise a finished task's error, if it failed (its result stays where it is)."""
        ...

    def release(self, handles: list[Any]) -> None:
        """Forget finished tasks whose results were taken: the scheduler holds at most the
        window, so their release reaches it before the next submission."""
        ...

    def cancel(self, handles: list[Any]) -> None:
        """Stop tasks the job no longer wants (it failed or was stopped)."""
        ...


class DistributedRunner:
    """Tasks on a Dask distributed cluster, through `client` (`started`: a cluster started
    for this job, which the job's record calls so). `peak_task_bytes`: the plan's peak per
    task, said when workers keep dying under one."""

    def __init__(
        self,
        client: Any,
        started: bool = False,
        wait_for_workers: float | None = None,
        gpu: bool = False,
        peak_task_bytes: int | None = None,
    ) -> None:
        self.client = client
        self.started = started
        self.gpu = gpu
        self.peak_task_bytes = peak_task_bytes
        self.workers = WorkerWatch(client, started, wait_for_workers)
        # Each submitted future puts itself here once finished (Future.add_done_callback,
        # run in distributed's callback thread); `unseen` counts those not yet handed out.
        self._finished: queue.Queue[Any] = queue.Queue()
        self._unseen = 0

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
        self._unseen += 1
        future.add_done_callback(self._finished.put)
        return future

    def finished(self, timeout: float) -> list[Any]:
        """Tasks finished within `timeout`; none finished, a cluster left without workers is
        said, waited for or given up on (WorkerWatch)."""
        if not self._unseen:
            return []
        with self._failures_said():
            try:
                done = [self._finished.get(timeout=timeout)]
            except queue.Empty:
                self.workers.check()
                return []
            with contextlib.suppress(queue.Empty):
                while True:
                    done.append(self._finished.get_nowait())
            self._unseen -= len(done)
            return done

    def results(self, handles: list[Any], watch: Callable[[], None]) -> list[Any]:
        """The results of finished tasks, gathered at once. One whose result was lost with its
        worker is run again first: that wait is watched as `finished`'s is (`watch` every
        WATCH_S, and a cluster left without workers)."""
        if not handles:
            return []
        with self._failures_said():
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

    def check(self, handle: Any) -> None:
        if handle.status == "error":
            with self._failures_said():
                handle.result()  # raises the task's error

    def release(self, handles: list[Any]) -> None:
        """Release the finished futures now, each by `Future.release` (not whenever Python
        drops the last reference to it), and see their releases sent before the next
        submission.

        No public API says that a release has reached the scheduler, short of asking it (a
        round trip per batch, behind the client's batched sends: about 10 ms each). A
        release takes two turns of the client's event loop (the release, then the message
        it queues) where a submission takes one, so a submission made at once would reach
        the scheduler first, and the scheduler would hold one task over the window. Each
        `sync` returns once the callbacks queued before it have run: the first runs the
        releases, the second the messages they queued. tests/jobs/test_runners.py counts
        the scheduler's tasks at every submission it receives and fails if distributed
        changes this."""
        for handle in handles:
            handle.release()
        if handles:
            self.client.sync(_loop_turn)
            self.client.sync(_loop_turn)

    def cancel(self, handles: list[Any]) -> None:
        if handles:
            self.client.cancel(handles)

    @contextlib.contextmanager
    def _failures_said(self) -> Iterator[None]:
        """The cluster's failures said as what they are, with what to do: workers that kept
        dying under one task (distributed's KilledWorker), a lost scheduler (distributed
        raises its connection errors, or cancels every future once the client stops
        reconnecting); a task's own error, the client still connected, goes through as it
        is."""
        from distributed import KilledWorker
        from distributed.comm import CommClosedError

        address = self.client.scheduler.address
        try:
            yield
        except KilledWorker as exc:
            raise lost_workers(exc, self.memory_limit(), self.peak_task_bytes) from exc
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


def lost_workers(exc: KilledWorker, limit: int | None, peak: int | None) -> JobFailed:
    """Workers that kept dying under one shard task, most often of memory: what it was, what
    the workers may hold (`limit`) and what the plan needs (`peak`), and what to change."""
    key = str(exc.task or "")  # shard-<shard key>-<job token> (shard_stream)
    shard = key.removeprefix("shard-").rsplit("-", 1)[0] or "of a shard"
    memory = f"each worker may hold {human_bytes(limit)}" if limit else "the workers' memory"
    needs = f"; the plan's peak per task is {human_bytes(peak)}" if peak else ""
    times = exc.allowed_failures + 1
    return JobFailed(
        f"the workers running shard task {shard} died {times} times (a worker process that dies is "
        f"most often out of memory: {memory}{needs}, and every thread of a worker runs a "
        "task at once). Lower {memory_budget}, or start fewer {workers} (more memory each), "
        "then continue with the same command and {resume}",
        memory_budget=NAMED,
        workers=NAMED,
        resume=True,
    )


class ThreadRunner:
    """Tasks on a pool of threads of this process (one thread: `--scheduler sync`). The
    stream submits a task after those it takes, and the pool starts them in that order, so a
    task waiting for its inputs waits only for tasks already running."""

    def __init__(self, threads: int, why: str | None = None) -> None:
        """`why`: why no cluster runs the job, where the user did not ask for none."""
        self._threads = threads
        self._why = f": {why}" if why else ""
        self._pool = concurrent.futures.ThreadPoolExecutor(threads, "shardwright-task")
        self._pending: set[concurrent.futures.Future[Any]] = set()

    def threads(self) -> int:
        return self._threads

    def memory_limit(self) -> None:
        """None: the tasks share this process's memory, which no runner of ours bounds."""
        return None

    def ready(self, places: list[tuple[str, str]]) -> None:
        pass  # threads of this process see what it sees

    def describe(self) -> str:
        if self._threads == 1:
            return f"this process, one task at a time (no Dask cluster{self._why})"
        return f"{self._threads} threads of this process (no Dask cluster{self._why})"

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

    def release(self, handles: list[Any]) -> None:
        pass  # a finished thread's result lives only as long as its handle

    def cancel(self, handles: list[Any]) -> None:
        for handle in handles:
            handle.cancel()

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
