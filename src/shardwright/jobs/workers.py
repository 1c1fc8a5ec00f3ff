"""A cluster's workers, as a job needs them: connected before it writes anything (waited for,
and said so) and while it runs (a cluster left without any is said, waited for, or given up
on), and seeing the job's local paths as the process that plans it does (a relative path,
another working folder, a destination mounted read-only on the workers' hosts)."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import socket
import sys
import time
from typing import Any

from shardwright.common.urls import local_path, scheme_of
from shardwright.errors import NAMED, JobFailed, PlanError, ShardwrightError
from shardwright.planning.text import human_bytes

GPU_RESOURCE = "GPU"  # what GPU workers declare (dask-cuda-worker ... --resources GPU=1)
# Shard tasks one GPU runs at once, in as many worker threads (each task on its thread's own
# CUDA stream): one task's host work (staging, the copy out, crc32c, the write) overlaps
# another's transfers and kernels. Each holds its own memory budget. bench_gpu.py measures 1-4.
GPU_TASKS_PER_DEVICE = 2
WORKER_WAIT_NOTICE_S = 30.0  # how often a job waiting for workers says so
WORKER_CHECK_S = 2.0  # how often a job whose tasks do not finish asks whether it has workers
# A cluster the job started that has had no worker for this long gets none back: its nannies
# restart a worker that died within seconds, and distributed closes a nanny whose worker has
# not come back within `distributed.deploy.lost-worker-timeout` (15 s).
WORKERLESS_LIMIT_S = 20.0


class WorkerWatch:
    """Whether a job's cluster has workers, before the job and while it runs. A cluster with
    none is said (every WORKER_WAIT_NOTICE_S, whatever the job shows) and waited for up to
    `limit` seconds (None: as long as it takes); a cluster the job started (`started`) is
    given WORKERLESS_LIMIT_S unless a limit is set, then the job fails saying what died."""

    def __init__(self, client: Any, started: bool, limit: float | None) -> None:
        self.client = client
        self.started = started
        self.limit = WORKERLESS_LIMIT_S if limit is None and started else limit
        self.began = time.time()  # the scheduler's clock, for its events (same host if started)
        self._asked: float | None = None  # when it last asked the scheduler
        self._without: float | None = None  # since when (monotonic) it has had no worker
        self._said: float | None = None  # when the wait was last said
        self._memory_limit: int | None = None
        self.running = False  # the job has passed `wait`: it may have written

    def wait(self) -> None:
        """Before the job writes anything: return once a worker is connected."""
        while not self.check(at_once=True):
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                self.client.wait_for_workers(1, timeout=WORKER_CHECK_S)
        self.memory_limit()  # seen now, while workers are connected
        self.running = True

    def check(self, at_once: bool = False) -> bool:
        """Whether a worker is connected (asked at most every WORKER_CHECK_S unless
        `at_once`; True meanwhile). Raises once the cluster has had none past the limit."""
        now = time.monotonic()
        if not at_once and self._asked is not None and now - self._asked < WORKER_CHECK_S:
            return True
        self._asked = now
        if self.client.nthreads():
            self._without = None
            return True
        if self._without is None:
            self._without = now
        waited = now - self._without
        if self.limit is not None and waited >= self.limit:
            raise self._gone(waited)
        if not self.started and (self._said is None or now - self._said >= WORKER_WAIT_NOTICE_S):
            self._said = now
            print(f"shardwright: waiting for workers at {self.client.scheduler.address} "
                  "(0 connected)", file=sys.stderr, flush=True)  # fmt: skip
        return False

    def memory_limit(self) -> int | None:
        """The least memory any worker may hold (bytes), None where unlimited or unknown; as
        last seen with workers connected (after a failure they may all be restarting)."""
        try:
            workers = self.client.scheduler_info().get("workers", {}).values()
        except Exception:  # noqa: BLE001 - a cluster that failed may not answer any more
            workers = []
        limits = [int(w.get("memory_limit") or 0) for w in workers]
        seen = min((n for n in limits if n), default=None)
        self._memory_limit = seen or self._memory_limit
        return self._memory_limit

    def _gone(self, waited: float) -> ShardwrightError:
        address = self.client.scheduler.address
        if not self.started and not self.running:
            return PlanError(
                f"no worker connected to {address} within {self.limit:g} s "
                "({wait_for_workers}); start workers with `dask worker ADDRESS`",
                wait_for_workers=NAMED,
            )
        if not self.started:
            return JobFailed(
                f"the Dask cluster at {address} has had no worker for {waited:.0f} s "
                "({wait_for_workers}); the shards stored so far are kept: once it has workers "
                "again, continue with {resume}",
                wait_for_workers=NAMED,
                resume=True,
            )
        deaths = workers_lost(self.client, self.began)
        times = f"{deaths} times" if deaths else "again and again"
        limit = self._memory_limit
        memory = f"each may hold {human_bytes(limit)}" if limit else "their memory is unlimited"
        return JobFailed(
            f"the Dask cluster started for the job has had no worker for {waited:.0f} s and "
            f"gets none back: its worker processes died {times} since the job began, and "
            "those that died again as they restarted were given up (a worker process that "
            f"dies is most often killed by the system, out of memory; {memory}). The shards "
            "stored so far are kept: lower {memory_budget} or start fewer {workers} (more "
            "memory each), then continue with {resume}",
            memory_budget=NAMED,
            workers=NAMED,
            resume=True,
        )


def workers_lost(client: Any, since: float) -> int | None:
    """How many workers the scheduler lost unexpectedly since `since` (its clock, seconds);
    None if it cannot say."""
    try:
        events = client.get_events("all")
    except Exception:  # noqa: BLE001 - a scheduler that stopped answering cannot say
        return None
    return sum(
        1
        for at, event in events
        if at >= since
        and isinstance(event, dict)
        and event.get("action") == "remove-worker"
        and not event.get("expected")
    )


def check_reach(client: Any, places: list[tuple[str, str]]) -> None:
    """One small task on a worker of `client` checks that it sees each local source and can
    write each local destination as this process does; a clear error naming the worker and
    the path, before anything is written, if not. (Object stores are reached by URL: their
    checks run here, before.)"""
    found = client.submit(reach, places, pure=False).result()
    worker, host, problems = found
    if problems:
        raise PlanError(
            f"the cluster's workers do not see the job's paths as this process does (worker "
            f"{worker} on {host}): {'; '.join(problems)}. Use paths every worker can reach "
            "(a shared file system, mounted at the same place) or object-store URLs"
        )


def reach(places: list[tuple[str, str]]) -> tuple[str, str, list[str]]:
    """Run on a worker: (its address, its host, what of `places` it cannot reach)."""
    from distributed import get_worker

    problems = []
    for role, location in places:
        if scheme_of(location) not in ("", "file"):
            continue
        path = local_path(location)
        if role == "source":
            if not (os.path.exists(path) or glob.glob(path)):
                problems.append(f"source {location} does not exist there")
            continue
        ancestor = path
        while not os.path.exists(ancestor) and os.path.dirname(ancestor) != ancestor:
            ancestor = os.path.dirname(ancestor)
        if not os.path.isdir(ancestor) or not os.access(ancestor, os.W_OK | os.X_OK):
            problems.append(f"destination {location} cannot be written there ({ancestor} is "
                            "not a folder it may write)")  # fmt: skip
    return get_worker().address, socket.gethostname(), problems


def check_gpu_workers(client: Any) -> None:
    """Refuse to submit GPU shard tasks to a cluster with no worker that could run them."""
    workers = client.scheduler_info().get("workers", {}).values()
    if not any(w.get("resources", {}).get(GPU_RESOURCE) for w in workers):
        raise PlanError(
            f"no worker of {client.scheduler.address} declares a {GPU_RESOURCE} resource; "
            f"start GPU workers with `dask-cuda-worker ADDRESS --resources {GPU_RESOURCE}=1`"
        )
