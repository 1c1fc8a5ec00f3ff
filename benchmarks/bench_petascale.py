"""A simulated petascale job: real shard tasks through a real scheduler process, with a
synthetic source and a sink that discards shard bodies (benchmarks/synthetic.py).

    python benchmarks/bench_petascale.py [--side 47] [--workers 2]

Starts `dask scheduler` and `dask worker` processes on 127.0.0.1 and measures, through them:

- scale: a volume of SIDE^3 one-chunk shards (47^3 = 103,823 by default): planning time, time
  to the first stored shard, shards/s, per-task overhead (wall x worker threads / shards minus
  the shard work itself), and the peak RSS of the client (this process), the scheduler and
  the workers, sampled every 0.2 s;
- petabyte start: a 1 PB uint8 volume (100,352^3 voxels, 64^3 chunks, 941,192 shards of
  16^3 chunks): time to plan, to the first shard task running on a worker, to the first shard
  stored; the job is then stopped;
- the coordinator's last step at 10^6 shards: a receipt table of 10^6 shards folded and the
  manifest built from it (time and memory), what a job of 10^6 shards adds at its end.

Results: benchmarks/results/petascale-DATE.json.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psutil
from _common import compile_package, write_result
from distributed import Client
from synthetic import SyntheticSource

from shardwright import api
from shardwright.common.receipts import Receipt
from shardwright.jobs.progress import Progress
from shardwright.lifecycle.manifest import ReceiptTable, build_manifest

HERE = pathlib.Path(__file__).parent
PETABYTE_SIDE = 98 * 16 * 64  # voxels: 98^3 shards of 16^3 chunks of 64^3


class _Stop(Exception):
    """Raised from the progress feed to end a job once it has shown what was measured."""


class Timeline(Progress):
    """Progress that records when the first shard was stored and the shards' own seconds."""

    def __init__(self, stop_after: int | None = None) -> None:
        super().__init__(enabled=False)
        self.first: float | None = None
        self.task_seconds = 0.0
        self.stop_after = stop_after

    def add(self, receipts: Iterable[Receipt]) -> None:
        receipts = list(receipts)
        if self.first is None:
            self.first = time.monotonic()
        self.task_seconds += sum(r.seconds for r in receipts)
        super().add(receipts)
        if self.stop_after is not None and self.done >= self.stop_after:
            raise _Stop


class PeakRss:
    """Samples the resident memory of named processes every 0.2 s from a thread."""

    def __init__(self, processes: dict[str, list[psutil.Process]]) -> None:
        self.processes = processes
        self.peak = dict.fromkeys(processes, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for name, procs in self.processes.items():
                total = 0
                for proc in procs:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        total += proc.memory_info().rss
                self.peak[name] = max(self.peak[name], total)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def dask_processes(workers: int, folder: pathlib.Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """`dask scheduler` and `dask worker` processes on 127.0.0.1; yields the address and the
    processes (scheduler, workers)."""
    scheduler_file = folder / "scheduler.json"
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", "0", "--no-dashboard", "--scheduler-file", str(scheduler_file)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    while not scheduler_file.exists():
        time.sleep(0.1)
    worker = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
         str(scheduler_file), "--nworkers", str(workers), "--nthreads", "1", "--host",
         "127.0.0.1", "--no-dashboard", "--preload", "synthetic"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with Client(scheduler_file=str(scheduler_file)) as client:
            client.wait_for_workers(workers, timeout=120)
            address = client.scheduler.address
        nanny = psutil.Process(worker.pid)
        procs = {
            "scheduler": [psutil.Process(scheduler.pid)],
            "workers": [nanny, *nanny.children(recursive=True)],
        }
        yield address, procs
    finally:
        for proc in (worker, scheduler):
            proc.terminate()
        for proc in (worker, scheduler):
            proc.wait(timeout=60)


def _first_task_running(client: Client, since: float, found: dict[str, float]) -> None:
    """Record when the scheduler first shows a shard task processing."""

    def processing(dask_scheduler: Any) -> bool:
        return any(
            str(key).startswith("shard-") and ts.state == "processing"
            for key, ts in dask_scheduler.tasks.items()
        )

    while "running" not in found:
        if client.run_on_scheduler(processing):
            found["running"] = time.monotonic() - since
            return
        time.sleep(0.05)


def scale(address: str, procs: dict[str, Any], side: int, folder: pathlib.Path) -> dict[str, Any]:
    dest = f"discard://{folder}/scale"
    source = SyntheticSource((16 * side,) * 3)
    start = time.monotonic()
    plan = api.plan(source, dest, chunk_size=(16, 16, 16), target_shard_bytes=4096,
                    compression="none")  # fmt: skip
    planned = time.monotonic() - start
    timeline = Timeline()
    with Client(address) as client, PeakRss({"client": [psutil.Process()], **procs}) as rss:
        threads = sum(client.nthreads().values())
        begun = time.monotonic()
        manifest = api.convert(plan, client=client, progress=timeline)
        wall = time.monotonic() - begun
    assert isinstance(manifest, api.Manifest) and timeline.first is not None
    shards = manifest.totals.shards
    return {
        "shards": shards,
        "plan_seconds": round(planned, 3),
        "wall_seconds": round(wall, 2),
        "shards_per_second": round(shards / wall, 1),
        "first_shard_stored_seconds": round(timeline.first - begun, 3),
        "mean_shard_task_seconds": round(timeline.task_seconds / shards, 5),
        "per_task_overhead_ms": round(1000 * (wall * threads - timeline.task_seconds) / shards, 3),
        "worker_threads": threads,
        "window": 4 * threads,
        "peak_rss_mb": {name: round(v / 2**20, 1) for name, v in rss.peak.items()},
        "client_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def petabyte_start(address: str, folder: pathlib.Path, stop_after: int) -> dict[str, Any]:
    dest = f"discard://{folder}/petabyte"
    source = SyntheticSource((PETABYTE_SIDE,) * 3)
    start = time.monotonic()
    plan = api.plan(source, dest, chunk_size=(64, 64, 64), compression="none",
                    target_shard_bytes=2**30)  # fmt: skip
    planned = time.monotonic() - start
    timeline = Timeline(stop_after=stop_after)
    found: dict[str, float] = {}
    with Client(address) as client:
        watcher = threading.Thread(target=_first_task_running, args=(client, start, found))
        watcher.start()
        with contextlib.suppress(_Stop):
            api.convert(plan, client=client, progress=timeline)
        watcher.join(timeout=60)
    assert timeline.first is not None
    return {
        "voxels": PETABYTE_SIDE**3,
        "shards": plan.shard_count,
        "shard_bytes": plan.chunks_per_shard * plan.raw_chunk_bytes,
        "plan_seconds": round(planned, 3),
        "first_task_running_seconds": round(found.get("running", float("nan")), 3),
        "first_shard_stored_seconds": round(timeline.first - start, 3),
        "stopped_after_shards": timeline.done,
    }


def manifest_at_a_million() -> dict[str, Any]:
    n = 10**6
    tracemalloc.start()
    start = time.monotonic()
    table = ReceiptTable()
    for i in range(n):
        table.add(Receipt(f"1_1_1/{i:x}.shard", 2**30 + i, i, 4096, seconds=1.0))
    folded = time.monotonic() - start
    table_bytes = tracemalloc.get_traced_memory()[0]
    start = time.monotonic()
    manifest = build_manifest({"format": "precomputed"}, table)
    built = time.monotonic() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(manifest.shards) == n
    return {
        "receipts": n,
        "fold_seconds": round(folded, 2),
        "table_mb": round(table_bytes / 2**20, 1),
        "build_manifest_seconds": round(built, 2),
        "peak_traced_mb": round(peak / 2**20, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=47, help="shards per side of the scale run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--petabyte-shards", type=int, default=4, help="stop after this many")
    args = parser.parse_args()
    compile_package()
    folder = pathlib.Path(tempfile.mkdtemp(prefix="petascale-"))
    try:
        with dask_processes(args.workers, folder) as (address, procs):
            figures = {"scale": scale(address, procs, args.side, folder)}
            print(figures, flush=True)
            figures["petabyte_start"] = petabyte_start(address, folder, args.petabyte_shards)
            print(figures["petabyte_start"], flush=True)
        figures["manifest_at_a_million"] = manifest_at_a_million()
        print(figures["manifest_at_a_million"], flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    path = write_result("petascale", figures, ("shardwright", "dask", "distributed", "numpy"))
    print(path)


if __name__ == "__main__":
    main()
