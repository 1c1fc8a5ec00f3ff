"""A lab of test hosts (netns_hosts.py) for the job across hosts, used by the tests and by
benchmarks/bench_hosts.py: a scheduler host, worker hosts (`dask worker --nanny`), an
object-store host (moto's S3 server) holding a TensorStore-written zarr v3 source and the
destination, and a client host that runs `shardwright convert --scheduler tcp://...`.

The store answers on two ports: DIRECT_PORT, which the test's own checks use, and, when the
lab is made with latency or loss, the job's port in front of it (delay_proxy.py, nftables'
random drops), so that only the job's path to the store is impaired.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorstore as ts

from tests.support import (
    netns_hosts,
    object_store_servers,  # noqa: F401 (its import sets the test credentials)
    volumes,
)
from tests.support.netns_hosts import Host, Hosts

JOB_PORT, DIRECT_PORT, SCHEDULER_PORT = 5000, 5001, 8786
BUCKET = "lab"
SHAPE = (64, 256, 512)  # z y x (zarr order): 2 x 8 x 16 chunks of 32^3, 2 per shard: 128 shards
SHARDS = 128
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
PROXY = pathlib.Path(__file__).with_name("delay_proxy.py")
# The lab's Dask processes give up on a silent connection after 12 s (distributed's default is
# 30 s; it refuses less than 11 s): a host cut off is noticed sooner, the tests wait less.
CLUSTER_ENV = {"DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP": "12s"}


@dataclass
class Lab:
    """The hosts of one lab and what runs where."""

    net: Hosts
    store: Host
    scheduler: Host
    workers: list[Host]
    client: Host
    logs: pathlib.Path
    job_port: int = DIRECT_PORT  # JOB_PORT where the job's path to the store is impaired
    threads: int = 1  # of each worker
    source: str = "src.zarr"  # in the bucket: what jobs convert and checks compare with

    @property
    def endpoint(self) -> str:
        """The store as the job reaches it."""
        return f"http://{self.store.address}:{self.job_port}"

    @property
    def direct_endpoint(self) -> str:
        """The store as the test's own checks reach it (never impaired)."""
        return f"http://{self.store.address}:{DIRECT_PORT}"

    @property
    def address(self) -> str:
        return f"tcp://{self.scheduler.address}:{SCHEDULER_PORT}"

    def options(self, endpoint: str | None = None) -> dict[str, Any]:
        return {"client_kwargs": {"endpoint_url": endpoint or self.endpoint}}

    def filesystem(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(**self.options(self.direct_endpoint), skip_instance_cache=True)

    def start_scheduler(self) -> None:
        log = self.logs / f"scheduler{len(self.scheduler.processes)}.log"
        self.scheduler.spawn([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                              self.scheduler.address, "--port", str(SCHEDULER_PORT),
                              "--no-dashboard"], env=CLUSTER_ENV, log=str(log))  # fmt: skip

    def start_worker(self, host: Host, *more: str, env: dict[str, str] | None = None) -> None:
        host.spawn([sys.executable, "-m", "distributed.cli.dask_worker", self.address,
                    "--nthreads", str(self.threads), "--nanny", "--host", host.address,
                    "--no-dashboard", "--local-directory", str(self.logs / host.namespace),
                    *more], env={**CREDENTIALS, **CLUSTER_ENV, **(env or {})},
                   log=str(self.logs / f"{host.namespace}.log"))  # fmt: skip

    def convert_args(self, *more: str, dest: str = "out",
                     program: Sequence[str] = ("-m", "shardwright.cli")) -> list[str]:  # fmt: skip
        """The client's `convert` of the lab's source to `dest` on the cluster (run by
        `program`: the CLI, or a driver of it)."""
        options = json.dumps(self.options())
        return [sys.executable, *program, "convert", f"s3://{BUCKET}/{self.source}",
                f"s3://{BUCKET}/{dest}", "--scheduler", self.address, "--storage-options",
                options, "--source-storage-options", options, "--chunk-size", "32,32,32",
                "--target-shard-bytes", "256KiB", "--resolution", "8,8,40", *more]  # fmt: skip

    def start_job(self, *more: str, dest: str = "out",
                  program: Sequence[str] = ("-m", "shardwright.cli"),
                  env: dict[str, str] | None = None) -> tuple[Any, pathlib.Path]:  # fmt: skip
        """The conversion started on the client host: (its process, its log)."""
        log = self.logs / f"job{len(list(self.logs.glob('job*.log')))}.log"
        args = self.convert_args(*more, dest=dest, program=program)
        return self.client.spawn(args, env={**CREDENTIALS, **CLUSTER_ENV, **(env or {})},
                                 log=str(log)), log  # fmt: skip

    def stored_shards(self, dest: str = "out") -> int:
        """Shard objects under the destination so far (each written whole, once)."""
        return sum(key.endswith(".shard") for key in self.filesystem().find(f"{BUCKET}/{dest}"))

    def write_source(self, seed: int = 5) -> np.ndarray:
        """A zarr v3 volume on the store host, written by TensorStore; its voxels [z, y, x]."""
        voxels = volumes.noise(SHAPE, seed, high=60000, dtype="uint16")
        grid = {"name": "regular", "configuration": {"chunk_shape": [64, 64, 64]}}
        metadata = {"shape": list(SHAPE), "chunk_grid": grid}
        spec = {"driver": "zarr3", "kvstore": self._kvstore(f"{self.source}/"), "create": True,
                "dtype": "uint16", "metadata": metadata}  # fmt: skip
        array = ts.open(spec).result()
        array.write(voxels).result()
        return voxels

    def read_back(self, dest: str = "out") -> np.ndarray:
        """The output as TensorStore reads it, [z, y, x] as the source."""
        spec = {"driver": "neuroglancer_precomputed", "kvstore": self._kvstore(f"{dest}/")}
        return np.asarray(ts.open(spec).result().read().result())[..., 0].T

    def verify(self, dest: str = "out") -> Any:
        """`shardwright verify --against` the source, run on the client host."""
        options = json.dumps(self.options(self.direct_endpoint))
        return self.client.run(
            [sys.executable, "-m", "shardwright.cli", "verify", f"s3://{BUCKET}/{dest}",
             "--against", f"s3://{BUCKET}/{self.source}", "--storage-options", options,
             "--source-storage-options", options],
            env=CREDENTIALS,
        )  # fmt: skip

    def check_finished(self, voxels: np.ndarray, dest: str = "out") -> None:
        """The output is the source, as TensorStore reads it, and `verify` against it passes."""
        np.testing.assert_array_equal(self.read_back(dest), voxels)
        checked = self.verify(dest)
        assert checked.returncode == 0, checked.stdout + checked.stderr

    def _kvstore(self, path: str) -> dict[str, Any]:
        return {"driver": "s3", "bucket": BUCKET, "path": path, "endpoint": self.direct_endpoint,
                "aws_region": "us-east-1"}  # fmt: skip


@contextlib.contextmanager
def lab(logs: pathlib.Path, workers: int = 2, rtt_ms: float | None = None,
        loss_percent: float = 0.0, threads: int = 1,
        cluster: bool = True) -> Iterator[Lab]:  # fmt: skip
    """The lab's hosts, its servers up, `workers` worker hosts of `threads` threads (their
    Dask processes started unless not `cluster`); with `rtt_ms` (added round-trip time, 0 for
    the proxy alone) or `loss_percent`, the job's path to the store impaired by that much."""
    with Hosts() as net:
        store, scheduler = net.add("store"), net.add("sched")
        worker_hosts = [net.add(f"w{i + 1}") for i in range(workers)]
        client = net.add("client")
        impaired = rtt_ms is not None or loss_percent > 0
        made = Lab(net, store, scheduler, worker_hosts, client, logs,
                   JOB_PORT if impaired else DIRECT_PORT, threads)  # fmt: skip
        store.spawn([sys.executable, "-m", "moto.server", "-H", store.address, "-p",
                     str(DIRECT_PORT)], log=str(logs / "store.log"))  # fmt: skip
        if impaired:
            store.spawn([sys.executable, str(PROXY), store.address, str(JOB_PORT), store.address,
                         str(DIRECT_PORT), str(rtt_ms or 0.0)],
                        log=str(logs / "proxy.log"))  # fmt: skip
            if loss_percent > 0:
                store.drop(loss_percent, JOB_PORT)
        if cluster:
            made.start_scheduler()
            for host in worker_hosts:
                made.start_worker(host)
        netns_hosts.wait_for_port(store, DIRECT_PORT)
        netns_hosts.wait_for_port(store, made.job_port)
        if cluster:
            netns_hosts.wait_for_port(scheduler, SCHEDULER_PORT)
        made.filesystem().mkdir(BUCKET)
        yield made


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)
