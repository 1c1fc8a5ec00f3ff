"""A job on a Dask cluster it did not start: a `dask scheduler` and `dask worker` processes
started here, the workers in a folder of their own. Relative paths convert exactly (they are
made absolute before anything is submitted); a destination the workers cannot write (workers
running as another user) is one clear error naming the worker and the path, before anything is
written; a scheduler with no worker is waited for, said so, and given up on after
`--wait-for-workers`, also once its last worker is lost mid-job (said under --quiet too); the
dashboard link is printed; workers that keep dying under a shard end in one paragraph (exit 1)
and `--resume` then finishes exactly."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tensorstore as ts

from tests.support import volumes
from tests.support.object_store_servers import free_port


def _spawn(
    args: list[str], cwd: pathlib.Path, read_only: pathlib.Path | None = None
) -> subprocess.Popen[str]:
    """A process; with `read_only`, in a mount namespace of its own where that folder is
    mounted read-only, as a worker host that mounts the storage read-only sees it."""
    if read_only is not None:
        mount = (f"mount --bind {read_only} {read_only} && "
                 f"mount -o remount,bind,ro {read_only} && exec \"$@\"")  # fmt: skip
        args = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mount,
                "sh", *args]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, text=True)  # fmt: skip


@contextlib.contextmanager
def _cluster(
    root: pathlib.Path, workers: int = 1, read_only: pathlib.Path | None = None
) -> Iterator[tuple[str, str]]:
    """A scheduler (address, dashboard) and `workers` worker processes, each in `root/w*`."""
    port, dashboard = free_port(), free_port()
    address = f"tcp://127.0.0.1:{port}"
    # `python -m distributed.cli.dask_scheduler` is what the `dask scheduler` command runs
    processes = [
        _spawn([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                "--port", str(port), "--dashboard-address", f"127.0.0.1:{dashboard}"], root)
    ]  # fmt: skip
    try:
        for i in range(workers):
            folder = root / f"w{i}"
            folder.mkdir(exist_ok=True)
            worker = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads",
                      "1", "--no-dashboard", "--local-directory", str(folder)]  # fmt: skip
            processes.append(_spawn(worker, folder, read_only))
        yield address, f"http://127.0.0.1:{dashboard}/status"
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=20)
            if process.poll() is None:
                process.kill()


def _convert(
    cwd: pathlib.Path, *words: str, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "convert", *words],
        cwd=cwd, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _wait_for(address: str, count: int) -> None:
    from distributed import Client

    with Client(address, timeout=60) as client:
        client.wait_for_workers(count, timeout=60)


def test_relative_paths_on_an_external_cluster(tmp_path: pathlib.Path) -> None:
    work = tmp_path / "project"
    (work / "data").mkdir(parents=True)
    zyx = volumes.noise((16, 64, 64), seed=11)
    np.save(work / "data" / "v.npy", zyx)
    with _cluster(tmp_path, workers=2) as (address, dashboard):
        _wait_for(address, 2)
        run = _convert(work, "data/v.npy", "out/v", "--scheduler", address, "--resolution",
                       "4,4,40", "--chunk-size", "32,32,8")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert f"dask dashboard: {dashboard}" in run.stderr
    assert f"on the Dask cluster at {address} (2 worker(s), 2 thread(s))" in run.stdout
    spec = {"driver": "neuroglancer_precomputed", "kvstore": f"file://{work}/out/v/"}
    got = np.asarray(ts.open(spec).result().read().result())[..., 0].transpose(2, 1, 0)
    np.testing.assert_array_equal(got, zyx)
    assert not (tmp_path / "w0" / "out").exists() and not (tmp_path / "w1" / "out").exists()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="a read-only mount for the workers needs root and unshare")  # fmt: skip
def test_a_destination_the_workers_cannot_write(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "v.npy"
    np.save(source, volumes.noise((8, 32, 32), seed=12))
    locked = tmp_path / "locked"
    locked.mkdir()  # writable here, mounted read-only where the worker runs
    with _cluster(tmp_path, workers=1, read_only=locked) as (address, _):
        _wait_for(address, 1)
        run = _convert(tmp_path, str(source), str(locked / "out"), "--scheduler", address,
                       "--resolution", "1,1,1")  # fmt: skip
    assert run.returncode == 2, run.stderr
    error = [line for line in run.stderr.splitlines() if "error:" in line]
    assert len(error) == 1 and "Traceback" not in run.stderr
    assert "do not see the job's paths as this process does (worker tcp://" in error[0]
    assert f"destination {locked / 'out'} cannot be written there" in error[0]
    assert list(locked.iterdir()) == []  # nothing written, not even the job's record


def test_a_scheduler_without_workers_is_waited_for_then_given_up(tmp_path: pathlib.Path) -> None:
    np.save(tmp_path / "v.npy", np.ones((8, 16, 16), np.uint8))
    with _cluster(tmp_path, workers=0) as (address, _):
        started = time.monotonic()
        run = _convert(tmp_path, "v.npy", "out", "--scheduler", address, "--resolution",
                       "1,1,1", "--wait-for-workers", "3")  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert time.monotonic() - started < 60
    assert f"shardwright: waiting for workers at {address} (0 connected)" in run.stderr
    assert f"no worker connected to {address} within 3 s (--wait-for-workers)" in run.stderr
    assert not (tmp_path / "out").exists()


def test_an_unreachable_scheduler_is_one_error(tmp_path: pathlib.Path) -> None:
    np.save(tmp_path / "v.npy", np.ones((8, 16, 16), np.uint8))
    address = f"tcp://127.0.0.1:{free_port()}"
    run = _convert(tmp_path, "v.npy", "out", "--scheduler", address, "--resolution", "1,1,1",
                   "--timeout", "3")  # fmt: skip
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert f"cannot connect to the Dask scheduler at {address}" in run.stderr


def test_workers_that_keep_dying_end_in_one_paragraph_then_resume(tmp_path: pathlib.Path) -> None:
    from distributed import Client, LocalCluster

    from shardwright import api
    from shardwright.errors import JobFailed
    from tests.support.dying_source import DyingSource

    zyx = volumes.noise((16, 64, 64), seed=13)
    np.save(tmp_path / "v.npy", zyx)
    marker = tmp_path / "die"
    marker.touch()
    source = DyingSource(str(tmp_path / "v.npy"), str(marker), x_start=32)
    import dask

    with dask.config.set({"distributed.scheduler.allowed-failures": 1}), LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address=None, memory_limit="1GiB", silence_logs=50,
    ) as cluster, Client(cluster) as client:  # fmt: skip
        with pytest.raises(JobFailed) as failed:
            api.convert(source, str(tmp_path / "out"), client=client, progress=False,
                        resolution=(1, 1, 1), chunk_size=(32, 32, 8))  # fmt: skip
        message = str(failed.value)
        assert "died" in message and "each worker may hold 1.0 GiB" in message
        assert "memory_budget" in message and "resume=True" in message
        marker.unlink()
        manifest = api.convert(
            source,
            str(tmp_path / "out"),
            client=client,
            progress=False,
            resume=True,
            resolution=(1, 1, 1),
            chunk_size=(32, 32, 8),
        )
    # Whether the first run finished other shards before it stopped depends on timing; that
    # the resumed job writes every shard exactly does not.
    assert isinstance(manifest, api.Manifest) and manifest.totals.shards == 8
    spec = {"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/out/"}
    got = np.asarray(ts.open(spec).result().read().result())[..., 0].transpose(2, 1, 0)
    np.testing.assert_array_equal(got, zyx)


def test_a_cluster_left_without_workers_mid_job_is_said_even_quiet_then_continues(
    tmp_path: pathlib.Path,
) -> None:
    """Every worker of a cluster the job did not start gone mid-job (the operator's to bring
    back): the job says it waits, under --quiet too, and finishes once a worker is back."""
    zyx = volumes.noise((32, 256, 256), seed=14)
    np.save(tmp_path / "v.npy", zyx)
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    worker = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
              "--no-dashboard", "--local-directory", str(tmp_path)]  # fmt: skip
    processes = [_spawn([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                         "127.0.0.1", "--port", str(port), "--no-dashboard"], tmp_path),
                 _spawn(worker, tmp_path)]  # fmt: skip
    said = tmp_path / "job.err"
    try:
        _wait_for(address, 1)
        with said.open("w") as stderr:
            job = subprocess.Popen(
                [sys.executable, "-m", "shardwright.cli", "convert", "v.npy", "out",
                 "--scheduler", address, "--quiet", "--resolution", "1,1,1", "--chunk-size",
                 "32,32,32", "--target-shard-bytes", "32K", "--compression", "gzip",
                 "--compression-level", "9"],
                cwd=tmp_path, stdout=subprocess.PIPE, stderr=stderr, text=True,
            )  # fmt: skip
        stored = tmp_path / "out" / "1_1_1"
        while job.poll() is None and not (stored.is_dir() and any(stored.glob("*.shard"))):
            time.sleep(0.02)
        assert job.poll() is None, said.read_text()
        processes[1].kill()  # the worker's nanny: its worker process follows it
        processes[1].wait()
        lost_at = time.monotonic()
        waiting = f"shardwright: waiting for workers at {address} (0 connected)"
        while waiting not in said.read_text():
            assert job.poll() is None, said.read_text()
            assert time.monotonic() - lost_at < 30, "the job waits without a word"
            time.sleep(0.1)
        print(f"\nsaid {time.monotonic() - lost_at:.1f} s after its last worker was lost")
        processes.append(_spawn(worker, tmp_path))  # the operator brings a worker back
        stdout, _ = job.communicate(timeout=240)
    finally:
        for process in processes:
            process.kill()
    assert job.returncode == 0, said.read_text()
    assert said.read_text().splitlines() == [waiting], said.read_text()
    assert "wrote 64 shards" in stdout, stdout
    spec = {"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/out/"}
    got = np.asarray(ts.open(spec).result().read().result())[..., 0].transpose(2, 1, 0)
    np.testing.assert_array_equal(got, zyx)
