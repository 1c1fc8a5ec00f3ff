"""Lease fencing (lifecycle/fencing.py) on every backend: a store that a fenced run writes
through stops writing data, in this process and in a worker's copy, once another run holds
the destination's lease; its control objects still go through."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import pickle

import pytest

from shardwright import api
from shardwright.errors import LeaseLost
from shardwright.jobs.coordinator import begin_dataset
from shardwright.lifecycle import fencing
from shardwright.lifecycle.job import Job
from shardwright.lifecycle.lease import Lease, heartbeat_key, lease_key
from shardwright.lifecycle.run_options import RunOptions
from shardwright.lifecycle.runs import FencedStore, JobRun, run_of
from shardwright.stores import Store, open_store
from tests.support import volumes
from tests.support.store_backends import BACKENDS, open_backend


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fenced_writer_stops_once_another_run_takes_the_lease(
    backend: str, request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    url, options = open_backend(backend, request, tmp_path)
    store = open_store(url, options)
    first = Lease(store, job="a" * 32)
    first.acquire()
    writer = FencedStore(store, fencing.fenced(first.job_run))
    worker = pickle.loads(pickle.dumps(writer))  # what a shard task on a worker holds
    assert type(worker) is FencedStore and worker.run == writer.run
    assert worker.inner.writer == first.run  # its temporaries carry the run
    writer.write_object("1_1_1/0.shard", b"first")
    worker.write_object("1_1_1/1.shard", b"first, from a worker")
    assert Lease(store, job="b" * 32).acquire(break_lease=True)
    for late in (writer, worker):
        with pytest.raises(LeaseLost, match=r"no longer holds the destination's lease \(.*1\.json"):
            late.write_object("1_1_1/2.shard", b"late")
    assert not store.exists("1_1_1/2.shard")
    writer.write_text(heartbeat_key(first.run), "{}")  # control objects are not fenced
    unfenced = FencedStore(store, first.job_run)  # the fence is what stops a run: none, no check
    unfenced.write_object("1_1_1/3.shard", b"unchecked")
    assert store.read("1_1_1/0.shard") == b"first"
    if backend == "memory":
        for key in store.list_keys():
            store.delete(key)


def test_an_unreadable_or_released_lease_stops_a_fenced_writer(tmp_path: pathlib.Path) -> None:
    store = open_store(str(tmp_path / "out"))
    lease = Lease(store, job="a" * 32)
    lease.acquire()
    writer = FencedStore(store, fencing.fenced(lease.job_run))
    held = store.read(lease_key(1))
    for unusable in (b"{not json", json.dumps({"run": lease.run}).encode()):  # no holder
        store.write_object(lease_key(1), unusable)
        with pytest.raises(LeaseLost):
            writer.write_text("info", "{}")
    store.write_object(lease_key(1), held)
    writer.write_text("info", "{}")
    lease.release()
    with pytest.raises(LeaseLost):
        writer.write_text("info", "{}")


def test_a_jobs_writer_is_fenced_from_its_first_step(tmp_path: pathlib.Path) -> None:
    source = volumes.saved(tmp_path, "vol", volumes.noise((8, 16, 16), 3))
    dest = str(tmp_path / "out")
    plan = api.plan(source, dest, chunk_size=(8, 8, 8), target_shard_bytes=2048)
    job = Job(plan, RunOptions())
    dataset = job.datasets[0]
    begun = begin_dataset(dataset.plan, dataset.store, dataset.claim)
    run = run_of(begun.store)
    assert run is not None and run.fence is fencing.check_lease
    begun.store.write_object("1_1_1/extra.shard", b"while it holds the lease")
    assert Lease(open_store(dest), job="b" * 32).acquire(break_lease=True)
    with pytest.raises(LeaseLost):
        begun.store.write_object("1_1_1/other.shard", b"after")


def _frozen_past_its_fence(
    store: Store, taker: str, racing: dict[str, bytes], writes_new: bool = False
) -> JobRun:
    """A run whose fence passes and then, before its upload, loses the race: another job
    takes the lease over and writes the same shards (`racing`), as happens to a worker cut
    off or frozen between its fence and its upload."""
    first = Lease(store, job="a" * 32)
    first.acquire(break_lease=True)

    def fence_then_lose(late: Store) -> None:
        fencing.check_lease(late)  # passes: the lease is still this run's
        if racing:
            second = Lease(store, job=taker)
            assert second.acquire(break_lease=True)
            newer = FencedStore(store, fencing.fenced(second.job_run))
            for key, data in racing.items():
                newer.write_object(key, data)
            racing.clear()

    return dataclasses.replace(first.job_run, fence=fence_then_lose, writes_new=writes_new)


@pytest.mark.parametrize("writes_new", [False, True])  # looked up first, or assumed absent
@pytest.mark.parametrize("backend", BACKENDS[2:])  # the stores with conditional writes
def test_a_write_delayed_past_another_jobs_write_of_its_shard_fails_its_condition(
    backend: str, writes_new: bool, request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    """The race the lease check alone cannot close: the check passed, the upload lands
    after the next job's write. The upload is conditional on what the key held before the
    check (absent, or an older version: S3's ETag, GCS's generation), so it fails and the
    fence, asked again, stops the writer; the next job's shard stays."""
    url, options = open_backend(backend, request, tmp_path)
    store = open_store(url, options)
    racing = {"1_1_1/0.shard": b"the next job's shard"}
    late = FencedStore(store, _frozen_past_its_fence(store, "b" * 32, racing, writes_new))
    with pytest.raises(LeaseLost):
        late.write_object("1_1_1/0.shard", b"a zombie's shard")
    assert store.read("1_1_1/0.shard") == b"the next job's shard"
    assert late.requests.counts.get("conflicts") == 1
    # Replacing an object: at its version (ETag, generation) as seen before the check.
    store.write_object("1_1_1/1.shard", b"written by the first job earlier")
    racing = {"1_1_1/1.shard": b"the next job's rewrite"}
    late = FencedStore(store, _frozen_past_its_fence(store, "c" * 32, racing))
    with pytest.raises(LeaseLost):
        late.write_object("1_1_1/1.shard", b"a zombie's rewrite")
    assert store.read("1_1_1/1.shard") == b"the next job's rewrite"
    assert late.requests.counts.get("conflicts") == 2  # the first late write's, and this one
