"""The runners, on a real in-process Dask cluster: the distributed runner hands finished
tasks back through public Dask API, says workers that kept dying under one task as the job's
own failure, and releases finished tasks before it submits the next, so that the scheduler
never holds more than the window (checked at every submission the scheduler receives)."""

from __future__ import annotations

import time
import types
from collections.abc import Iterator
from typing import Any, cast

import pytest
from distributed import Client, KilledWorker, LocalCluster
from distributed.diagnostics.plugin import SchedulerPlugin

from shardwright.common.receipts import Receipt
from shardwright.errors import JobFailed
from shardwright.jobs.progress import Progress
from shardwright.jobs.runners import DistributedRunner, ThreadRunner, lost_workers
from shardwright.jobs.shard_stream import Node
from shardwright.jobs.submission import Window
from shardwright.lifecycle.manifest import ReceiptTable

GiB = 2**30
LAST_WORKER = cast(Any, types.SimpleNamespace(address="tcp://127.0.0.1:1"))


class GraphSizes(SchedulerPlugin):
    """Every time the scheduler takes new tasks: how many it holds then."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def update_graph(self, scheduler: Any, **kwargs: Any) -> None:
        self.sizes.append(len(scheduler.tasks))


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as local:
        yield local


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster) as c:
        yield c


def _receipt(context: Any, key: str) -> Receipt:
    time.sleep(0.001)
    return Receipt(key, 10, 1, 1)


def _dies(context: Any, key: str) -> Receipt:
    # What the scheduler raises once the workers running a task died allowed-failures + 1
    # times (its last worker stands in by its address: all the message reads of it).
    raise KilledWorker(f"shard-{key}-0123abcd", LAST_WORKER, 2)


def test_the_scheduler_holds_at_most_the_window_at_every_submission(
    cluster: LocalCluster, client: Client
) -> None:
    sizes = GraphSizes()
    cluster.scheduler.add_plugin(sizes, name="graph-sizes")
    try:
        runner = DistributedRunner(client)
        table = ReceiptTable()
        nodes = (Node(f"s{i}", _receipt, f"s{i}") for i in range(300))
        window = Window(runner, 4)
        window.run([(None, nodes, table)], Progress(enabled=False))
    finally:
        cluster.scheduler.remove_plugin("graph-sizes")
    assert sorted(table.keys()) == sorted(f"s{i}" for i in range(300))
    assert len(sizes.sizes) == 300 and window.peak == 4
    assert max(sizes.sizes) <= 4, max(sizes.sizes)  # a release behind a submission: 5


def test_workers_that_kept_dying_under_a_task_are_the_jobs_failure(client: Client) -> None:
    runner = DistributedRunner(client, peak_task_bytes=3 * 2**20)
    handle = runner.submit(Node("dies", _dies, "1.2.3"), None, [])
    done: list[Any] = []
    while not done:
        done = runner.finished(5.0)
    with pytest.raises(JobFailed) as failed:
        runner.results(done, lambda: None)
    said = str(failed.value)
    assert said.startswith("the workers running shard task 1.2.3 died 3 times"), said
    assert "the plan's peak per task is 3.0 MiB" in said and "resume=True" in said, said
    assert isinstance(failed.value.__cause__, KilledWorker)
    with pytest.raises(JobFailed, match="died 3 times"):
        runner.check(handle)


def test_the_diagnosis_names_the_shard_the_deaths_and_the_memory() -> None:
    killed = KilledWorker("shard-0.1.2-0123abcd", LAST_WORKER, 5)
    said = str(lost_workers(killed, GiB, None))
    assert "shard task 0.1.2 died 6 times" in said and "each worker may hold 1.0 GiB" in said
    assert "peak per task" not in said
    unknown = str(lost_workers(KilledWorker("", LAST_WORKER, 0), None, None))
    assert "shard task of a shard died" in unknown and "the workers' memory" in unknown


def test_a_thread_runner_bounds_no_memory_of_its_own() -> None:
    runner = ThreadRunner(1)
    try:
        assert runner.memory_limit() is None
    finally:
        runner.close()
