"""The job across hosts: a scheduler host, worker hosts (nanny on), an object-store host (moto's
S3 server) and a client host, each a network namespace of its own (tests/netns_hosts.py); the
source and the destination live on the store host. Faults are done to hosts as they happen to
machines, and each case ends in output TensorStore reads back exactly and `verify` passing."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator
from typing import Any

import netns_hosts
import netns_lab
import pytest
from netns_lab import SHARDS, Lab, wait_for

pytestmark = pytest.mark.skipif(
    (reason := netns_hosts.skip_reason()) is not None, reason=reason or ""
)

LEASE_TIMEOUT = 6.0  # seconds: a job stopped by a cut is resumed soon after


@pytest.fixture
def lab(tmp_path: pathlib.Path) -> Iterator[Lab]:
    with netns_lab.lab(tmp_path) as made:
        yield made


def _mid_job(lab: Lab, job: Any, log: pathlib.Path) -> None:
    """Until the job has stored some of its shards and is still running."""
    wait_for(lambda: lab.stored_shards() >= 8 or job.poll() is not None, 120, "no shard")
    assert job.poll() is None, log.read_text()


def test_a_worker_host_killed_mid_job_leaves_the_job_to_the_others(lab: Lab) -> None:
    voxels = lab.write_source()
    job, log = lab.start_job()
    _mid_job(lab, job, log)
    lab.workers[0].kill_all()
    assert not lab.workers[0].pids()
    assert job.wait(timeout=300) == 0, log.read_text()
    assert f"wrote {SHARDS} shards" in log.read_text()
    lab.check_finished(voxels)


def test_the_scheduler_host_killed_is_reported_and_a_new_one_resumes(lab: Lab) -> None:
    voxels = lab.write_source()
    job, log = lab.start_job()
    _mid_job(lab, job, log)
    lab.scheduler.kill_all()
    code = job.wait(timeout=120)
    said = log.read_text()
    assert code != 0, said
    assert "Traceback" not in said, said
    assert f"lost the Dask scheduler at {lab.address}" in said, said
    assert "--resume" in said, said
    for worker in lab.workers:  # the operator restarts the cluster
        worker.kill_all()
    lab.start_scheduler()
    netns_hosts.wait_for_port(lab.scheduler, netns_lab.SCHEDULER_PORT)
    for worker in lab.workers:
        lab.start_worker(worker)
    resumed, resumed_log = lab.start_job("--resume")
    assert resumed.wait(timeout=300) == 0, resumed_log.read_text()
    assert "kept from an earlier run" in resumed_log.read_text()
    lab.check_finished(voxels)


def test_a_worker_host_cut_off_mid_job_is_replaced_and_writes_nothing_wrong_on_return(
    lab: Lab,
) -> None:
    voxels = lab.write_source()
    job, log = lab.start_job()
    _mid_job(lab, job, log)
    cut = lab.workers[0]
    cut.cut()  # its processes live on, unreachable, with whatever task they hold
    assert job.wait(timeout=300) == 0, log.read_text()
    assert f"wrote {SHARDS} shards" in log.read_text()
    lab.check_finished(voxels)
    cut.restore()  # it comes back after the job: the scheduler has dropped it, it shuts down
    wait_for(lambda: not cut.pids(), 120, "the cut-off worker host did not shut down")
    lab.check_finished(voxels)  # nothing it wrote on its return left a wrong shard


def test_the_coordinator_cut_off_from_the_store_stops_in_time_and_another_host_resumes(
    lab: Lab,
) -> None:
    voxels = lab.write_source()
    lab.workers[1].kill_all()  # one worker: the job outlasts the stop by far
    job, log = lab.start_job("--lease-timeout", str(LEASE_TIMEOUT))
    _mid_job(lab, job, log)
    lab.client.cut_from(lab.store)  # the scheduler and the workers still reach the store
    cut_at = time.monotonic()
    code = job.wait(timeout=120)
    stopped_after = time.monotonic() - cut_at
    said = log.read_text()
    assert code == 1, said
    assert "Traceback" not in said, said
    assert "has not renewed the job's lease" in said and "--resume" in said, said
    assert stopped_after < LEASE_TIMEOUT, said  # before another job could take it over
    assert lab.stored_shards() < SHARDS
    lab.client = lab.net.add("client2")  # the operator resumes from another machine
    resumed, resumed_log = lab.start_job("--lease-timeout", str(LEASE_TIMEOUT), "--resume",
                                         "--lease-wait", "60")  # fmt: skip
    assert resumed.wait(timeout=300) == 0, resumed_log.read_text()
    resumed_said = resumed_log.read_text()
    assert "it stopped renewing it" in resumed_said, resumed_said
    assert "kept from an earlier run" in resumed_said, resumed_said
    lab.check_finished(voxels)


@pytest.mark.skipif((why := netns_hosts.loss_skip_reason()) is not None, reason=why or "")
def test_latency_and_loss_on_the_way_to_the_store_slow_the_job_but_it_finishes_exactly(
    tmp_path: pathlib.Path,
) -> None:
    """100 ms more round trip and 1 % of packets dropped each way between every host and the
    store: the job's requests wait and are retransmitted, the job finishes, exact. (Workers of
    four threads, as a latency-bound cluster would be set up: benchmarks/bench_hosts.py
    measures one.)"""
    with netns_lab.lab(tmp_path, rtt_ms=100.0, loss_percent=1.0, threads=4) as slow:
        voxels = slow.write_source()
        job, log = slow.start_job()
        assert job.wait(timeout=600) == 0, log.read_text()
        assert f"wrote {SHARDS} shards" in log.read_text()
        slow.check_finished(voxels)
