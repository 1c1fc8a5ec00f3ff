"""A job's shard tasks go to the cluster through a bounded window, fed lazily from the plan:
the scheduler never knows more than the window's tasks, errors stop the job, progress shows
shards, bytes, rate and time left, and the driving process keeps the job's lease alive."""

from __future__ import annotations

import io
import pathlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import shardwright.engine.engines as engines
from shardwright import api
from shardwright.common.receipts import Receipt
from shardwright.errors import LeaseHeld, LeaseUnrenewed, PlanError
from shardwright.jobs.progress import Progress, duration
from shardwright.jobs.runners import ThreadRunner
from shardwright.jobs.shard_stream import Node
from shardwright.jobs.submission import Window
from shardwright.lifecycle.journal import EXCHANGE, Planned
from shardwright.lifecycle.manifest import ReceiptTable
from tests.support import volumes

TINY = dict(chunk_size=(8, 8, 8), target_shard_bytes=512)  # one 8^3 chunk per shard


def _tiny_shards(tmp_path: pathlib.Path, shape: tuple[int, int, int]) -> tuple[str, np.ndarray]:
    vol = volumes.noise(shape, seed=3)
    return volumes.saved(tmp_path, "vol", vol), vol


def _scheduler_task_keys(dask_scheduler: Any) -> list[str]:
    return [str(key) for key in dask_scheduler.tasks]


def test_the_scheduler_never_holds_more_tasks_than_the_window(
    tmp_path: pathlib.Path, client: Any
) -> None:
    source, _ = _tiny_shards(tmp_path, (48, 64, 160))  # 6 x 8 x 20 = 960 shards
    plan = api.plan(source, str(tmp_path / "out"), **TINY)
    assert plan.shard_count >= 900
    window = 6
    counts: list[int] = []
    stop = threading.Event()
    # The cluster is the session's: tasks earlier tests left for the scheduler to forget are
    # not this job's.
    earlier = set(client.run_on_scheduler(_scheduler_task_keys))

    def watch() -> None:
        while not stop.is_set():
            keys = client.run_on_scheduler(_scheduler_task_keys)
            counts.append(len(set(keys) - earlier))

    with ThreadPoolExecutor(1) as pool:
        watching = pool.submit(watch)
        try:
            manifest = api.convert(plan, client=client, window=window, progress=False)
        finally:
            stop.set()
        watching.result()
    assert isinstance(manifest, api.Manifest) and manifest.totals.shards == plan.shard_count
    assert len(counts) > 20 and max(counts) >= window  # the watch saw the window full
    assert max(counts) <= window + 1  # the shard tasks in flight and the job's context
    report = api.verify(str(tmp_path / "out"), source, full=True)
    assert report.ok, report.summary()


def test_a_huge_plan_starts_writing_at_once(tmp_path: pathlib.Path) -> None:
    """The first shard is stored long before the plan's shards could all be enumerated: the
    stream is lazy (here the job is stopped by its first error, at the third shard)."""
    source, _ = _tiny_shards(tmp_path, (8, 8, 8 * 4))
    plan = api.plan(source, str(tmp_path / "out"), **TINY)
    seen: list[str] = []
    original = engines.run_cpu_shard

    def fail_third(plan: Any, task: Any, *args: Any, **kwargs: Any) -> Receipt:
        seen.append(task.key)
        if len(seen) == 3:
            raise RuntimeError("disk on fire")
        return original(plan, task, *args, **kwargs)

    engines.run_cpu_shard = fail_third
    try:
        with pytest.raises(RuntimeError, match="disk on fire"):
            api.convert(plan, scheduler="sync", window=1, progress=False)
    finally:
        engines.run_cpu_shard = original
    assert len(seen) == 3  # window 1: the fourth was never submitted
    assert not (tmp_path / "out" / "shardwright-manifest.json").exists()
    assert not list((tmp_path / "out").glob(".shardwright/lease-*"))  # given back


def _node(key: str, run: Any, *inputs: str, consumers: int = 0) -> Node:
    return Node(key, run, key, tuple(inputs), consumers)


def _receipt(context: Any, key: str, *inputs: Any) -> Receipt:
    time.sleep(0.002)
    return Receipt(key, 10, 1, 1)


def test_the_window_bounds_tasks_in_flight_and_follows_the_stream() -> None:
    runner = ThreadRunner(4)
    try:
        window = Window(runner, 3)
        table = ReceiptTable()
        nodes = (_node(f"s{i}", _receipt) for i in range(200))
        window.run([(None, nodes, table)], Progress(enabled=False))
    finally:
        runner.close()
    assert window.peak == 3
    assert sorted(table.keys()) == sorted(f"s{i}" for i in range(200))
    assert table.written == 200 and table.bytes == 2000


def test_a_window_waiting_on_long_tasks_stops_when_its_watch_says_so() -> None:
    """A job whose tasks run long still stops once its leases go unrenewed: the window
    watches while it waits, and cancels what is in flight."""
    started = time.monotonic()

    def watch() -> None:
        if time.monotonic() - started > 1.0:
            raise LeaseUnrenewed("the lease went unrenewed")

    def slow(context: Any, key: str) -> Receipt:
        time.sleep(3.0)
        return Receipt(key, 1, 1, 1)

    runner = ThreadRunner(1)
    try:
        nodes = (_node(f"s{i}", slow) for i in range(3))
        with pytest.raises(LeaseUnrenewed):
            Window(runner, 3, watch).run([(None, nodes, ReceiptTable())], Progress(enabled=False))
        assert 1.0 < time.monotonic() - started < 2.5  # before the first task returned
    finally:
        runner.close()


def test_results_that_later_tasks_take_reach_them_and_are_not_collected() -> None:
    """A producer's result goes to each node that takes it; only nodes nobody takes hand
    receipts back."""

    def produce(context: Any, key: str) -> int:
        return int(key[1:])

    def consume(context: Any, key: str, *values: int) -> list[Receipt]:
        return [Receipt(key, sum(values), 0, len(values))]

    stream = [
        _node("p1", produce, consumers=2),
        _node("p2", produce, consumers=1),
        _node("c1", consume, "p1", "p2"),
        _node("c2", consume, "p1"),
    ]
    runner = ThreadRunner(2)
    try:
        table = ReceiptTable()
        Window(runner, 1).run([(None, iter(stream), table)], Progress(enabled=False))
    finally:
        runner.close()
    assert dict(zip(table.keys(), table.rows()["size"].tolist(), strict=True)) == {
        "c1": 3,
        "c2": 1,
    }


def test_a_window_must_hold_a_task(tmp_path: pathlib.Path) -> None:
    source, _ = _tiny_shards(tmp_path, (8, 8, 8))
    with pytest.raises(PlanError, match="at least 1 task"):
        api.convert(source, str(tmp_path / "out"), window=0, **TINY)
    assert not (tmp_path / "out").exists()


def test_progress_shows_shards_bytes_rate_and_time_left() -> None:
    out = io.StringIO()
    progress = Progress(out=out)
    progress.start([Planned(shards=4)])
    progress.started -= 10  # ten seconds in
    progress.add([Receipt("a", 2048, 0, 1), Receipt("b", 2048, 0, 1, resumed=True)])
    line = progress.line(progress.started + 10)
    assert line == "shards 2 / 4 (50.0 %), 4.0 KiB, 410 B/s, 0.2 shards/s, 1 kept, 10 s left"
    progress.finish()
    assert out.getvalue().count("shards 2 / 4") >= 1  # not a terminal: whole lines
    # A volume with generated meshes: the blocks (whose spools are no output) counted apart
    # from the shards, whose count for the meshes is an estimate; the rate in tasks.
    progress.start([Planned(shards=4), Planned(shards=2, estimated=True, preparing=4)])
    spool = f"{EXCHANGE}block-0_0_0"
    progress.add([Receipt(spool, 999, 0, 1, resumed=True), Receipt(f"{spool}1", 999, 0, 1)])
    line = progress.line(progress.started + 10)
    assert line.startswith("blocks 2 / 4, shards 2 / 6 estimated (40.0 %), 4.0 KiB, ")
    assert ", 0.4 tasks/s, 1 blocks and 1 shards kept, 15 s left" in line
    assert duration(3) == "3 s" and duration(250) == "4 min 10 s"
    assert duration(7500) == "2 h 5 min" and duration(3 * 86400 + 4 * 3600) == "3 d 4 h"


@pytest.fixture
def slow_shards() -> Iterator[None]:
    original = engines.run_cpu_shard

    def slow(*args: Any, **kwargs: Any) -> Receipt:
        time.sleep(0.5)
        return original(*args, **kwargs)

    engines.run_cpu_shard = slow
    yield
    engines.run_cpu_shard = original


def test_a_job_longer_than_its_lease_timeout_keeps_its_lease(
    tmp_path: pathlib.Path, slow_shards: None
) -> None:
    """The driving process renews the lease while the job runs: another job is refused
    however long past the lease's timeout the first one runs."""
    source, vol = _tiny_shards(tmp_path, (8, 8, 8 * 8))
    other = volumes.saved(tmp_path, "other", vol + 1)
    dest = tmp_path / "out"
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(
            api.convert,
            source,
            str(dest),
            scheduler="sync",
            progress=False,
            lease_timeout=0.8,
            **TINY,
        )
        time.sleep(2.5)  # three timeouts: an unrenewed lease would have expired
        assert not running.done()
        with pytest.raises(LeaseHeld, match="is being written by another job"):
            api.convert(other, str(dest), scheduler="sync", overwrite=True, **TINY)
        manifest = running.result()
    assert manifest.totals.shards == 8
    assert api.verify(str(dest), source, full=True).ok
