"""Where a conversion's tasks run: the scheduler the user picked, and the clusters we start.

`--scheduler` (or the API's `scheduler=`) names an address, or one of `auto` (the default:
threads of this process for a job reading under SMALL_JOB_BYTES, else `local`), `local` (a
distributed cluster of worker threads in this process), `processes` (one worker process per
core), `threads` or `sync` (dask's local schedulers, no cluster); with none given,
`$DASK_SCHEDULER_ADDRESS` names a running cluster. A cluster we start listens on 127.0.0.1
only, dashboard included, and is closed when the job ends. Distributed is imported only once a
cluster is started or connected: importing shardwright starts nothing and stays light.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from shardwright.common import deadlines
from shardwright.errors import NAMED, JobFailed, PlanError
from shardwright.jobs import logs
from shardwright.jobs.runners import DistributedRunner, Runner, ThreadRunner
from shardwright.jobs.workers import GPU_RESOURCE, GPU_TASKS_PER_DEVICE
from shardwright.lifecycle.run_options import LOCAL_SCHEDULERS
from shardwright.version import install_command

# A local cluster's dashboard listens on loopback only (port chosen free): not on every
# interface of a shared machine.
LOCAL_DASHBOARD = "127.0.0.1:0"
# No scheduler named: the job's size decides (`auto`, the command line's: no current client).
DEFAULTS = (None, "", "auto")
# A job reading less than this ends in seconds on a laptop, before anyone could open a
# dashboard, whose start (bokeh) costs about a second: the default starts none for it, and
# no cluster either (importing distributed and starting one costs about a second too): its
# tasks run on threads of this process, as the cluster's workers would.
SMALL_JOB_BYTES = 4 * 2**30


def wants_dashboard(choice: bool | None, source_bytes: int, shown: bool) -> bool:
    """Whether a cluster we start serves the Dask dashboard: as asked (`choice`), else for a
    job whose progress is shown and that reads at least SMALL_JOB_BYTES."""
    if choice is not None:
        return choice
    return shown and source_bytes >= SMALL_JOB_BYTES


def scheduler_address(scheduler: str | None) -> str | None:
    """The scheduler named on the command line, else $DASK_SCHEDULER_ADDRESS, else None."""
    if scheduler in (None, "") and os.environ.get("DASK_SCHEDULER_ADDRESS"):
        return os.environ["DASK_SCHEDULER_ADDRESS"]
    if scheduler in (None, "", *LOCAL_SCHEDULERS):
        return None
    return scheduler


def current_client() -> Any:
    """The distributed Client made current in this process (the one `dask.compute` would
    use: a notebook's `Client(...)`), or None. Distributed is not imported for this."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return None
    try:
        return distributed.default_client()
    except ValueError:  # no client
        return None


def chosen_client(scheduler: str | None, client: Any) -> Any:
    """The client a job runs on: the one given, else (when no scheduler is named either) the
    current one; None when the job starts or names a cluster of its own."""
    if client is not None or scheduler not in (None, ""):
        return client
    return current_client()


def workers_elsewhere(scheduler: str | None, client: Any = None) -> bool:
    """Whether the shard tasks may run in other processes than this one (so that a
    destination living in this process's memory cannot be written)."""
    client = chosen_client(scheduler, client)
    if client is not None:
        return not str(client.scheduler.address).startswith("inproc://")
    return scheduler == "processes" or scheduler_address(scheduler) is not None


@contextmanager
def connect(
    scheduler: str | None,
    workers: int | None,
    dashboard: bool,
    gpu: bool = False,
    announce: bool = False,
    holds_gil: bool = False,
) -> Iterator[Any]:
    """A distributed client: to the given address, or to a local cluster we start and stop.

    The default local cluster runs its workers as threads of this process: shard tasks spend
    their time in C codecs and I/O that release the GIL, and starting no processes saves
    about a second per job. `processes` starts one single-threaded worker process per core,
    as the default does for a job whose tasks hold the GIL (`holds_gil`: meshing and
    skeletons, in kimimaro's Python and zmesh).
    `dashboard`: whether the cluster serves the dashboard (its link printed) and runs the
    workers' statistical profiler, which samples every thread's stack every 10 ms while
    holding the GIL the shard tasks need (about 8 % of a codec-bound job on 2 cores); without
    a dashboard nobody could see its profile.
    """
    import dask
    from distributed import Client

    # The client logs its lost connections with their tracebacks (its own logger, and its
    # batched sends': "Batched Comm Closed" when a scheduler goes away); the job says it in
    # one line.
    for name in ("distributed.client", "distributed.batched"):
        logging.getLogger(name).setLevel(logs.cluster_level())
    address = scheduler_address(scheduler)
    if address is not None:
        try:
            client = Client(address, timeout=deadlines.timeout())
        except OSError as exc:
            raise PlanError(
                f"cannot connect to the Dask scheduler at {address} ({exc}); is it running, "
                "and is this its address? ({scheduler}, $DASK_SCHEDULER_ADDRESS)",
                scheduler=NAMED,
            ) from None
        with client:
            if announce and client.dashboard_link:
                print(f"dask dashboard: {client.dashboard_link}", file=sys.stderr)
            yield client
        return
    processes = gpu or scheduler == "processes" or (holds_gil and scheduler in (*DEFAULTS, "local"))
    with deaf_to_ctrl_c() if processes else nullcontext():
        try:
            if gpu:
                cluster = _local_cuda_cluster(workers, dashboard)
            else:
                cores = workers or max(1, os.cpu_count() or 1)
                config = {"distributed.worker.profile.enabled": dashboard, **GLIBC_MALLOC}
                with dask.config.set(config):
                    cluster = local_cluster(processes=processes, workers=cores if processes else 1,
                                            threads=1 if processes else cores,
                                            dashboard=dashboard)  # fmt: skip
        except RuntimeError as exc:  # distributed's "Nanny failed to start."
            if not processes:
                raise
            raise JobFailed(
                f"the Dask cluster started for the job could not start its worker processes "
                f"({exc.__cause__ or exc}; a worker process that dies as it starts was most "
                "often killed by the system, out of memory); nothing was written: free memory "
                "or start fewer {workers}, then run the same command again",
                workers=NAMED,
            ) from None
    try:
        with Client(cluster) as client:
            if dashboard:
                print(f"dask dashboard: {local_dashboard_link(client)}", file=sys.stderr)
            yield client
    finally:
        cluster.close()


@contextmanager
def deaf_to_ctrl_c() -> Iterator[None]:
    """The worker processes of a cluster started within never see Ctrl-C.

    A terminal sends Ctrl-C (SIGINT) to its whole foreground process group, worker processes
    included: each would die printing a KeyboardInterrupt traceback (and leave semaphores
    leaked), while the job's coordinator unwinds the job and closes the cluster anyway.
    Blocked in this thread while the cluster starts, SIGINT stays blocked in the threads the
    cluster starts (its event loop, which starts and restarts worker processes) and so in
    every worker process. A Ctrl-C meanwhile is not lost: another thread of this process
    takes it for the main thread, or this one once the cluster is up. multiprocessing's
    resource tracker is started first: starting it unblocks SIGINT in the thread that does.
    """
    if not hasattr(signal, "pthread_sigmask"):  # not POSIX: nothing to block
        yield
        return
    _start_quiet_resource_tracker()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


# What the resource tracker is started with (PYTHONWARNINGS, the last filter winning).
QUIET_TRACKER = "ignore::UserWarning:multiprocessing.resource_tracker"


def _start_quiet_resource_tracker() -> None:
    """multiprocessing's resource tracker, which the worker processes share, started without
    its warning of leaked semaphores: a job whose process is killed (SIGKILL: no unwinding)
    leaves its workers' semaphores behind, which the tracker removes all the same, but its
    warning, printed seconds after the job has gone, read as a fault of the job."""
    from multiprocessing import resource_tracker

    before = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [before, QUIET_TRACKER]))
    try:
        resource_tracker.ensure_running()
    finally:
        if before is None:
            del os.environ["PYTHONWARNINGS"]
        else:
            os.environ["PYTHONWARNINGS"] = before


# Worker processes keep glibc's adaptive allocator: Dask's nanny sets MALLOC_TRIM_THRESHOLD_ to
# return freed memory at once, which also fixes glibc's mmap threshold at 128 KiB, so every
# larger array a task allocates and frees (kimimaro's per-segment fields, decoded chunks) is a
# fresh mmap whose pages fault in again: kimimaro on four blocks took a fifth more CPU (3.2 s
# of system time against 0.3 s, 13.7 s of user time either way). A task's memory is bounded
# by the plan's budget.
GLIBC_MALLOC = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


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
            silence_logs=logs.cluster_level(),
        ),
    }
    return SpecCluster(
        scheduler=scheduler,
        workers={i: worker for i in range(workers)},
        silence_logs=logs.cluster_level(),
    )


def local_dashboard_link(client: Any) -> str:
    """The dashboard of a cluster we started, as it can be opened: it listens on loopback only,
    while distributed's own link names the scheduler's host (the machine's address when the
    workers are threads of this process)."""
    port = urllib.parse.urlsplit(client.dashboard_link).port
    return f"http://127.0.0.1:{port}/status"


def _local_cuda_cluster(workers: int | None, dashboard: bool) -> Any:
    """One worker per GPU (dask-cuda), running GPU_TASKS_PER_DEVICE shard tasks at once: as
    many threads, and as much of the GPU resource."""
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as exc:
        raise PlanError(
            f"the GPU engine starts a dask-cuda cluster: {install_command('gpu-cu13')} "
            f"(gpu-cu12 for CUDA 12; {exc})"
        ) from None
    return LocalCUDACluster(
        host="127.0.0.1",  # every server on loopback (workers' HTTP endpoints follow the host)
        n_workers=workers,
        threads_per_worker=GPU_TASKS_PER_DEVICE,
        resources={GPU_RESOURCE: GPU_TASKS_PER_DEVICE},
        dashboard_address=LOCAL_DASHBOARD if dashboard else None,
        silence_logs=logs.cluster_level(),
    )


@contextmanager
def runner(
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    client: Any = None,
    dashboard: bool = False,
    gpu: bool = False,
    announce: bool = False,
    wait_for_workers: float | None = None,
    holds_gil: bool = False,
    peak_task_bytes: int | None = None,
    source_bytes: int | None = None,
) -> Iterator[Runner]:
    """Where the job's tasks run: the user's client, the cluster named by `scheduler` (one we
    start by default), or threads of this process (`threads`, `sync`). GPU tasks run on a
    distributed cluster only, whose workers declare a GPU. `announce`: print the dashboard
    link of a cluster the job connects to; `wait_for_workers`: how long a cluster may have no
    worker before the job gives up (None: as long as it takes, said every 30 s); `holds_gil`:
    the job's tasks hold the GIL, so a cluster we start runs worker processes;
    `peak_task_bytes`: the plan's peak per task, said if workers keep dying under one;
    `source_bytes`: what the job reads, under SMALL_JOB_BYTES run by default on threads of
    this process (no cluster started, and the job's last line says why)."""
    client = chosen_client(scheduler, client)
    if client is not None:
        yield DistributedRunner(client, False, wait_for_workers, gpu, peak_task_bytes)
        return
    local = scheduler_address(scheduler) is None
    if gpu and local and scheduler not in (*DEFAULTS, "local"):
        raise PlanError(
            f"the GPU engine runs on a dask-cuda cluster: use the default scheduler or "
            f"an address, not {scheduler!r}"
        )
    small = (scheduler in DEFAULTS and local and not (gpu or holds_gil or dashboard)
             and source_bytes is not None and source_bytes < SMALL_JOB_BYTES)  # fmt: skip
    if small or (local and scheduler in ("threads", "sync", "synchronous")):
        threads = 1 if scheduler in ("sync", "synchronous") else workers or (os.cpu_count() or 1)
        pool = ThreadRunner(threads, "a job this small needs none" if small else None)
        try:
            yield pool
        finally:
            pool.close()
        return
    with connect(scheduler, workers, dashboard, gpu, announce, holds_gil) as own_client:
        started = scheduler_address(scheduler) is None
        yield DistributedRunner(own_client, started, wait_for_workers, gpu, peak_task_bytes)
