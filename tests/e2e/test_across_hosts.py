"""The job across hosts: a scheduler host, worker hosts (nanny on), an object-store host (moto's
S3 server) and a client host, each a network namespace of its own (tests/netns_hosts.py); the
source and the destination live on the store host. Faults are done to hosts as they happen to
machines, and each case ends in output TensorStore reads back exactly and `verify` passing."""

from __future__ import annotations

import json
import pathlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import netns_hosts
import numpy as np
import object_store_servers  # noqa: F401 (its import sets the test credentials)
import pytest
import tensorstore as ts
import volumes
from netns_hosts import Host, Hosts

pytestmark = pytest.mark.skipif(
    (reason := netns_hosts.skip_reason()) is not None, reason=reason or ""
)

S3_PORT, SCHEDULER_PORT = 5000, 8786
BUCKET = "lab"
SHAPE = (64, 256, 512)  # z y x (zarr order): 2 x 8 x 16 chunks of 32^3, 2 per shard: 128 shards
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip


@dataclass
class Lab:
    """The hosts of one test and what runs where."""

    net: Hosts
    store: Host
    scheduler: Host
    workers: list[Host]
    client: Host
    logs: pathlib.Path

    @property
    def endpoint(self) -> str:
        return f"http://{self.store.address}:{S3_PORT}"

    @property
    def address(self) -> str:
        return f"tcp://{self.scheduler.address}:{SCHEDULER_PORT}"

    def options(self) -> dict[str, Any]:
        return {"client_kwargs": {"endpoint_url": self.endpoint}}

    def filesystem(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(**self.options(), skip_instance_cache=True)

    def start_worker(self, host: Host) -> None:
        host.spawn([sys.executable, "-m", "distributed.cli.dask_worker", self.address,
                    "--nthreads", "1", "--nanny", "--host", host.address, "--no-dashboard",
                    "--local-directory", str(self.logs / host.namespace)],
                   env=CREDENTIALS, log=str(self.logs / f"{host.namespace}.log"))  # fmt: skip

    def convert_args(self, *more: str) -> list[str]:
        """The client's `convert` of the lab's source to its destination on the cluster."""
        options = json.dumps(self.options())
        return [sys.executable, "-m", "shardwright.cli", "convert", f"s3://{BUCKET}/src.zarr",
                f"s3://{BUCKET}/out", "--scheduler", self.address, "--storage-options", options,
                "--source-storage-options", options, "--chunk-size", "32,32,32",
                "--target-shard-bytes", "256KiB", "--resolution", "8,8,40", *more]  # fmt: skip

    def start_job(self, *more: str) -> tuple[Any, pathlib.Path]:
        """The conversion started on the client host: (its process, its log)."""
        log = self.logs / f"job{len(self.client.processes)}.log"
        return self.client.spawn(self.convert_args(*more), env=CREDENTIALS, log=str(log)), log

    def stored_shards(self) -> int:
        """Shard objects under the destination so far (each written whole, once)."""
        return sum(key.endswith(".shard") for key in self.filesystem().find(f"{BUCKET}/out"))


@pytest.fixture
def lab(tmp_path: pathlib.Path) -> Iterator[Lab]:
    with Hosts() as net:
        store, scheduler = net.add("store"), net.add("sched")
        workers = [net.add("w1"), net.add("w2")]
        client = net.add("client")
        made = Lab(net, store, scheduler, workers, client, tmp_path)
        store.spawn([sys.executable, "-m", "moto.server", "-H", store.address, "-p",
                     str(S3_PORT)], log=str(tmp_path / "store.log"))  # fmt: skip
        scheduler.spawn([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                         scheduler.address, "--port", str(SCHEDULER_PORT), "--no-dashboard"],
                        log=str(tmp_path / "scheduler.log"))  # fmt: skip
        for worker in workers:
            made.start_worker(worker)
        netns_hosts.wait_for_port(store, S3_PORT)
        netns_hosts.wait_for_port(scheduler, SCHEDULER_PORT)
        made.filesystem().mkdir(BUCKET)
        yield made


def _source(lab: Lab) -> np.ndarray:
    """A zarr v3 volume on the store host, written by TensorStore; its voxels [z, y, x]."""
    voxels = volumes.noise(SHAPE, 5, high=60000, dtype="uint16")
    kv = {"driver": "s3", "bucket": BUCKET, "path": "src.zarr/", "endpoint": lab.endpoint,
          "aws_region": "us-east-1"}  # fmt: skip
    grid = {"name": "regular", "configuration": {"chunk_shape": [64, 64, 64]}}
    array = ts.open({"driver": "zarr3", "kvstore": kv, "create": True, "dtype": "uint16",
                     "metadata": {"shape": list(SHAPE), "chunk_grid": grid}}).result()  # fmt: skip
    array.write(voxels).result()
    return voxels


def _read_back(lab: Lab) -> np.ndarray:
    """The output as TensorStore reads it, [z, y, x] as the source."""
    kv = {"driver": "s3", "bucket": BUCKET, "path": "out/", "endpoint": lab.endpoint,
          "aws_region": "us-east-1"}  # fmt: skip
    got = ts.open({"driver": "neuroglancer_precomputed", "kvstore": kv}).result()
    return np.asarray(got.read().result())[..., 0].T


def _verify(lab: Lab) -> Any:
    options = json.dumps(lab.options())
    return lab.client.run(
        [sys.executable, "-m", "shardwright.cli", "verify", f"s3://{BUCKET}/out", "--against",
         f"s3://{BUCKET}/src.zarr", "--storage-options", options,
         "--source-storage-options", options],
        env=CREDENTIALS,
    )  # fmt: skip


def _wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


def _finished(lab: Lab, voxels: np.ndarray) -> None:
    """The output is the source, as TensorStore reads it, and `verify` against it passes."""
    np.testing.assert_array_equal(_read_back(lab), voxels)
    checked = _verify(lab)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _mid_job(lab: Lab, job: Any, log: pathlib.Path) -> None:
    """Until the job has stored some of its shards and is still running."""
    _wait_for(lambda: lab.stored_shards() >= 8 or job.poll() is not None, 120, "no shard")
    assert job.poll() is None, log.read_text()


def test_a_worker_host_killed_mid_job_leaves_the_job_to_the_others(lab: Lab) -> None:
    voxels = _source(lab)
    job, log = lab.start_job()
    _mid_job(lab, job, log)
    lab.workers[0].kill_all()
    assert not lab.workers[0].pids()
    assert job.wait(timeout=300) == 0, log.read_text()
    assert "wrote 128 shards" in log.read_text()
    _finished(lab, voxels)


def test_the_scheduler_host_killed_is_reported_and_a_new_one_resumes(lab: Lab) -> None:
    voxels = _source(lab)
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
    lab.scheduler.spawn([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                         lab.scheduler.address, "--port", str(SCHEDULER_PORT), "--no-dashboard"],
                        log=str(lab.logs / "scheduler2.log"))  # fmt: skip
    netns_hosts.wait_for_port(lab.scheduler, SCHEDULER_PORT)
    for worker in lab.workers:
        lab.start_worker(worker)
    resumed, resumed_log = lab.start_job("--resume")
    assert resumed.wait(timeout=300) == 0, resumed_log.read_text()
    assert "kept from an earlier run" in resumed_log.read_text()
    _finished(lab, voxels)


def test_a_worker_host_cut_off_mid_job_is_replaced_and_writes_nothing_wrong_on_return(
    lab: Lab,
) -> None:
    voxels = _source(lab)
    job, log = lab.start_job()
    _mid_job(lab, job, log)
    cut = lab.workers[0]
    cut.cut()  # its processes live on, unreachable, with whatever task they hold
    assert job.wait(timeout=300) == 0, log.read_text()
    assert "wrote 128 shards" in log.read_text()
    _finished(lab, voxels)
    cut.restore()  # it comes back after the job: the scheduler has dropped it, it shuts down
    _wait_for(lambda: not cut.pids(), 120, "the cut-off worker host did not shut down")
    _finished(lab, voxels)  # nothing it wrote on its return left a wrong shard
