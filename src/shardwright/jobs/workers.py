"""A cluster's workers, as a job needs them before it writes anything: connected (waited for,
and said so), and seeing the job's local paths as the process that plans it does (a relative
path, another working folder, a destination mounted read-only on the workers' hosts)."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import socket
import sys
import time
from typing import Any

from shardwright.errors import NAMED, PlanError
from shardwright.urls import local_path, scheme_of

GPU_RESOURCE = "GPU"  # what GPU workers declare (dask-cuda-worker ... --resources GPU=1)
# Shard tasks one GPU runs at once, in as many worker threads (each task on its thread's own
# CUDA stream): one task's host work (staging, the copy out, crc32c, the write) overlaps
# another's transfers and kernels. Each holds its own memory budget. bench_gpu.py measures 1-4.
GPU_TASKS_PER_DEVICE = 2
WORKER_WAIT_NOTICE_S = 30.0  # how often a job waiting for workers says so


def await_workers(client: Any, limit: float | None) -> None:
    """Return once a worker is connected; say every WORKER_WAIT_NOTICE_S that the job waits,
    and give up after `limit` seconds (None: wait as long as it takes)."""
    started = time.monotonic()
    while not client.scheduler_info().get("workers"):
        waited = time.monotonic() - started
        if limit is not None and waited >= limit:
            raise PlanError(
                f"no worker connected to {client.scheduler.address} within {limit:g} s "
                "({wait_for_workers}); start workers with `dask worker ADDRESS`",
                wait_for_workers=NAMED,
            )
        print(
            f"shardwright: waiting for workers at {client.scheduler.address} (0 connected)",
            file=sys.stderr,
            flush=True,
        )
        step = WORKER_WAIT_NOTICE_S if limit is None else min(WORKER_WAIT_NOTICE_S, limit - waited)
        with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
            client.wait_for_workers(1, timeout=max(step, 0.1))


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
