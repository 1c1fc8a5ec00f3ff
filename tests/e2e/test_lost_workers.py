"""Surviving lost workers, on a real LocalCluster of worker processes: a worker killed while
shards are being written loses its shard tasks and they are recomputed on the others; a
conversion whose client is killed as a whole continues with --resume. Either way every shard
is exact (TensorStore reads the volume back), none is torn and the manifest is exact. A
cluster the CLI started whose worker processes are all killed, again as they restart, ends
the job in one paragraph (how often they died, their memory limit, the command that
continues it); one whose workers die as it starts, too."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import google_crc32c
import numpy as np
import pytest
import tensorstore as ts
from distributed import Client, LocalCluster

from shardwright import api
from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.planning import ConversionPlan
from shardwright.stores.base import TMP_MARKER
from tests.support import volumes

OPTIONS: dict[str, Any] = dict(chunk_size=(16, 16, 16), target_shard_bytes=4096)
CLI_OPTIONS = ["--chunk-size", "16,16,16", "--target-shard-bytes", "4096"]
SHARD_DELAY_S = 0.25

# Run in each worker process: every shard task first sleeps, so that a worker is always in the
# middle of one when it is killed. A restarted worker process runs at full speed until this
# is run again.
SLOW_SHARD_TASKS = f"""
import time
import shardwright.engine.engines as engines

if not getattr(engines, "_test_slowed", False):
    original = engines.run_cpu_shard

    def slow(*args, **kwargs):
        time.sleep({SHARD_DELAY_S})
        return original(*args, **kwargs)

    engines.run_cpu_shard = slow
    engines._test_slowed = True
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(
        n_workers=3,
        processes=True,
        threads_per_worker=1,
        host="127.0.0.1",
        dashboard_address=None,
        silence_logs=50,
    ) as local:
        yield local


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster) as c:
        c.wait_for_workers(3, timeout=60)
        c.run(exec, SLOW_SHARD_TASKS, {})
        yield c


def _volume(tmp_path: pathlib.Path, seed: int) -> tuple[str, np.ndarray]:
    """A (z, y, x) uint8 volume of 2 x 4 x 6 = 48 chunks, one chunk per shard."""
    vol = volumes.noise((32, 64, 96), seed)
    return volumes.saved(tmp_path, "vol", vol), vol


def _stored_shards(dest: pathlib.Path) -> set[str]:
    return {
        str(p.relative_to(dest))
        for p in dest.rglob("*.shard")
        if p.is_file() and TMP_MARKER not in p.name
    }


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _assert_complete_and_exact(plan: ConversionPlan, dest: pathlib.Path, vol: np.ndarray) -> None:
    """Every planned shard stored whole, as the manifest lists it, and the voxels exact."""
    manifest = json.loads((dest / MANIFEST_KEY).read_text())
    expected = {task.key for task in plan.shards()}
    listed = {entry["key"]: entry for entry in manifest["shards"]}
    assert set(listed) == expected == _stored_shards(dest)
    for key, entry in listed.items():
        data = (dest / key).read_bytes()  # a torn shard has another size or checksum
        assert (len(data), google_crc32c.value(data)) == (entry["size"], entry["crc32c"]), key
    assert manifest["totals"]["shards"] == len(expected)
    assert manifest["totals"]["bytes"] == sum(e["size"] for e in listed.values())
    assert manifest["totals"]["chunks"] == plan.chunk_count
    got = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/"}).result()
    np.testing.assert_array_equal(np.asarray(got.read().result())[..., 0], vol.T)


def test_shard_tasks_lost_with_a_killed_worker_are_recomputed_elsewhere(
    client: Client, cluster: LocalCluster, tmp_path: pathlib.Path
) -> None:
    source, vol = _volume(tmp_path, seed=11)
    dest = tmp_path / "out"
    plan = api.plan(source, str(dest), **OPTIONS)
    assert plan.shard_count >= 24
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(
            api.convert, plan, scheduler=cluster.scheduler_address, progress=False
        )
        _wait_for(lambda: len(_stored_shards(dest)) >= plan.shard_count // 4, "first shards")

        def busy_with_a_shard() -> dict[str, list[str]]:
            return {
                worker: [k for k in keys if str(k).startswith("shard-")]
                for worker, keys in client.processing().items()
                if any(str(k).startswith("shard-") for k in keys)
            }

        _wait_for(lambda: bool(busy_with_a_shard()), "a worker in the middle of a shard")
        pids = client.run(os.getpid)
        victim = next(iter(busy_with_a_shard()))
        os.kill(pids[victim], signal.SIGKILL)
        assert len(_stored_shards(dest)) < plan.shard_count, "killed after the last shard"
        manifest = running.result(timeout=120)

    # The scheduler saw the worker die with shard tasks in hand, and they were run again.
    removals = [
        event
        for _, event in client.get_events(victim)
        if isinstance(event, dict) and event.get("action") == "remove-worker"
    ]
    assert removals, f"no record of losing {victim}"
    lost = {str(k) for event in removals for k in event["processing-tasks"]}
    lost_shards = {k for k in lost if k.startswith("shard-")}
    assert lost_shards, f"the killed worker held no shard task: {lost}"
    assert pids[victim] not in client.run(os.getpid).values()
    assert isinstance(manifest, api.Manifest) and manifest.totals.resumed_shards == 0
    _assert_complete_and_exact(plan, dest, vol)
    assert not list(dest.rglob(f"{TMP_MARKER}*")), "the lost write's temporary was left"
    assert api.verify(str(dest), source, full=True).ok


def test_a_conversion_killed_as_a_whole_continues_with_resume(
    client: Client, cluster: LocalCluster, tmp_path: pathlib.Path
) -> None:
    """What a Kubernetes Job's retried pod does: the same command with --resume."""
    source, vol = _volume(tmp_path, seed=12)
    dest = tmp_path / "out"
    plan = api.plan(source, str(dest), **OPTIONS)
    command = [
        sys.executable,
        "-m",
        "shardwright.cli",
        "convert",
        source,
        str(dest),
        *CLI_OPTIONS,
        "--scheduler",
        cluster.scheduler_address,
        "--quiet",
    ]
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: len(_stored_shards(dest)) >= 6, "first shards")
    finally:
        first.kill()
        first.wait()
    written = _stored_shards(dest)
    assert 6 <= len(written) < plan.shard_count
    assert not (dest / MANIFEST_KEY).exists()

    refused = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--resume" in refused.stderr

    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    manifest = json.loads((dest / MANIFEST_KEY).read_text())
    assert manifest["totals"]["resumed_shards"] >= len(written)
    assert f"({manifest['totals']['resumed_shards']} kept from an earlier run)" in resumed.stdout
    _assert_complete_and_exact(plan, dest, vol)
    assert not list(dest.rglob(f"{TMP_MARKER}*"))


# -- a cluster the CLI started, whose worker processes are killed from outside ---------------
# Its nannies give up on a worker that has not come back within this (distributed's
# `deploy.lost-worker-timeout`, 15 s by default): the test kills for seconds, not a quarter
# minute. No shard task may fail as the killer of its workers (`allowed-failures`): what is
# tested is a cluster left without any worker, not one task dying again and again.
KILLED_CLUSTER_ENV = {
    "DASK_DISTRIBUTED__DEPLOY__LOST_WORKER_TIMEOUT": "2s",
    "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1000",
}
ZSTD_19 = ["--format", "zarr3", "--compression", "zstd", "--compression-level", "19",
           "--chunk-size", "32,32,32", "--resolution", "4,4,40"]  # fmt: skip


def _kill_worker_processes(job: subprocess.Popen[str], limit: float = 90.0) -> float:
    """SIGKILL every worker process `job` starts, as an OOM killer or an admin would, until
    the job ends (within `limit` seconds); returns when the last was killed. (Stopping after
    a quiet spell let a worker that started late on a loaded machine finish the job.)"""
    import psutil

    last = started = time.monotonic()
    children: list[psutil.Process] = []
    while job.poll() is None:
        assert time.monotonic() - started < limit, "the job went on with its workers killed"
        with contextlib.suppress(psutil.Error):  # the job ended meanwhile
            children = psutil.Process(job.pid).children()
        for child in children:
            with contextlib.suppress(psutil.Error):  # gone meanwhile
                if "spawn_main" in " ".join(child.cmdline()):  # not the resource tracker
                    child.kill()
                    last = time.monotonic()
        time.sleep(0.02)
    return last


def _worker_killed_job(tmp_path: pathlib.Path, dest: pathlib.Path) -> subprocess.Popen[str]:
    source = tmp_path / "em.npy"
    np.save(source, volumes.noise((64, 256, 256), seed=13))
    return subprocess.Popen(
        [sys.executable, "-m", "shardwright.cli", "convert", str(source), str(dest), *ZSTD_19,
         "--scheduler", "processes", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **KILLED_CLUSTER_ENV},
    )  # fmt: skip


def test_a_cluster_started_for_the_job_whose_workers_all_died_ends_it_in_one_paragraph(
    tmp_path: pathlib.Path,
) -> None:
    dest = tmp_path / "out"
    job = _worker_killed_job(tmp_path, dest)
    try:
        _wait_for(lambda: (dest / ".shardwright").is_dir() or job.poll() is not None,
                  "the job's start", timeout=120)  # fmt: skip
        assert job.poll() is None, job.communicate()
        last_kill = _kill_worker_processes(job)
        stdout, stderr = job.communicate(timeout=90)
    finally:
        job.kill()
    ended_after = time.monotonic() - last_kill
    print(f"\nended {ended_after:.1f} s after the last kill: {stderr}")
    assert job.returncode == 1, stderr
    assert stdout == ""
    (said,) = stderr.splitlines()  # the one paragraph, nothing else (no traceback)
    assert said.startswith("shardwright convert: error: the Dask cluster started for the job "
                           "has had no worker for "), said  # fmt: skip
    assert re.search(r"its worker processes died (\d+ times|again and again) since", said), said
    assert re.search(r"each may hold \d", said), said  # the workers' memory limit
    resume = said.rsplit("continue with `", 1)[1]
    assert resume.endswith(f"{dest} {' '.join(ZSTD_19)} --scheduler processes --quiet --resume`")
    assert ended_after < 30, said
    assert not (dest / MANIFEST_KEY).exists()


def test_a_cluster_whose_workers_die_as_it_starts_is_one_paragraph(
    tmp_path: pathlib.Path,
) -> None:
    dest = tmp_path / "out"
    job = _worker_killed_job(tmp_path, dest)
    try:
        _kill_worker_processes(job)
        stdout, stderr = job.communicate(timeout=90)
    finally:
        job.kill()
    assert job.returncode == 1, stderr
    (said,) = stderr.splitlines()
    assert said.startswith("shardwright convert: error: the Dask cluster started for the job "
                           "could not start its worker processes ("), said  # fmt: skip
    assert "nothing was written" in said and "--workers" in said, said
    assert not dest.exists()
