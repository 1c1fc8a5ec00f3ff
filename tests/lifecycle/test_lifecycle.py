"""The job lifecycle as a hostile user meets it, on the local disk and real processes.

Destinations we do not own are never written; overwrite keeps the old dataset until the new
job runs and removes its objects only after the new manifest; one job per destination, under
a lease; resume keeps only what this job's receipts prove; a job killed (SIGKILL of its whole
process group) at any step resumes to exact output, read back by TensorStore.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dask
import distributed  # noqa: F401 - its config defaults, before the dask.config.set below
import numpy as np
import pytest
import tensorstore as ts

from shardwright import api
from shardwright.cli import main as cli_main
from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.errors import LeaseHeld, LeaseLost, LeaseUnrenewed, PlanError, StoreError
from shardwright.jobs.supervision import WATCH_S, Supervisor
from shardwright.lifecycle import fencing
from shardwright.lifecycle.lease import Lease, Renewer, heartbeat_key, lease_key
from shardwright.lifecycle.run_options import flag_wording
from shardwright.lifecycle.runs import FencedStore
from shardwright.stores import halted, open_store
from shardwright.stores.local import LocalStore
from tests.support import SUPPORT, volumes

DRIVER = SUPPORT / "lifecycle_driver.py"
A_OPTIONS = ["--chunk-size", "8,8,8", "--target-shard-bytes", "2048"]  # many small shards
B_OPTIONS = ["--chunk-size", "16,16,8", "--target-shard-bytes", "2048"]
A_KW: dict[str, Any] = dict(chunk_size=(8, 8, 8), target_shard_bytes=2048)
B_KW: dict[str, Any] = dict(chunk_size=(16, 16, 8), target_shard_bytes=2048)


def _volume(tmp_path: pathlib.Path, name: str, seed: int) -> tuple[str, np.ndarray]:
    vol = volumes.noise((24, 40, 48), seed)
    return volumes.saved(tmp_path, name, vol), vol


def _tree(root: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _read(dest: pathlib.Path) -> np.ndarray:
    store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/"}).result()
    return np.asarray(store.read().result())[..., 0].T  # x,y,z,c -> z,y,x


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardwright.cli", *args], capture_output=True, text=True
    )


def _convert(source: str, dest: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _cli("convert", source, str(dest), *args, "--scheduler", "sync", "--quiet")


def _paused(
    tmp_path: pathlib.Path, pause: str, source: str, dest: pathlib.Path, *args: str
) -> subprocess.Popen[bytes]:
    """A conversion in its own process group, stopped at `pause` (lifecycle_driver.py)."""
    marker = tmp_path / f"paused-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), pause, str(marker), "convert", source, str(dest), *args],
        start_new_session=True,
    )
    deadline = time.time() + 120
    while not marker.exists():
        assert proc.poll() is None, f"the job ended before it reached {pause}"
        assert time.time() < deadline, f"the job never reached {pause}"
        time.sleep(0.02)
    return proc


def _kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _clean(dest: pathlib.Path) -> None:
    """A finished job leaves no lease, heartbeat, retired record or temporary."""
    control = {p.name for p in (dest / ".shardwright").iterdir()}
    assert control <= {"job.json", "journal"}, control
    assert not list(dest.rglob(".shardwright-tmp-*"))


def _manifest_keys(dest: pathlib.Path) -> set[str]:
    return {s["key"] for s in json.loads((dest / MANIFEST_KEY).read_text())["shards"]}


def _stored_shards(dest: pathlib.Path) -> set[str]:
    return {str(p.relative_to(dest)) for p in dest.rglob("*.shard")}


# -- destinations we must not write -------------------------------------------------------
def _zarr_source(tmp_path: pathlib.Path) -> pathlib.Path:
    import zarr

    path = tmp_path / "vol.zarr"
    array = zarr.create_array(str(path), shape=(16, 16, 16), chunks=(8, 8, 8), dtype="uint8")
    array[:] = np.arange(16**3, dtype=np.uint32).reshape(16, 16, 16) % 251
    return path


@pytest.mark.parametrize("flag", [[], ["--resume"], ["--overwrite"]])
def test_the_source_itself_is_refused_and_left_untouched(
    tmp_path: pathlib.Path, flag: list[str]
) -> None:
    source = _zarr_source(tmp_path)
    before = _tree(tmp_path)
    done = _convert(str(source), source, *flag)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"shardwright convert: error: destination {source} is the source {source} itself"
    ]
    npy, _ = _volume(tmp_path, "file", 0)
    before = _tree(tmp_path)
    assert _convert(npy, pathlib.Path(npy), *flag).returncode == 2
    assert _tree(tmp_path) == before


def test_destinations_around_the_source_are_refused(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    (data / "work").mkdir(parents=True)
    (data / "notes.txt").write_text("mine")
    source, _ = _volume(data, "vol", 1)
    before = _tree(tmp_path)
    cases = [
        (tmp_path, str(data), "contains the source"),
        (tmp_path, str(tmp_path / "data" / ".." / "data"), "contains the source"),
        (data / "work", "..", "is the current directory or one of its parents"),
        (data / "work", ".", "is the current directory or one of its parents"),
        (data / "work", str(tmp_path), "is the current directory or one of its parents"),
    ]
    for cwd, dest, why in cases:
        monkeypatch.chdir(cwd)
        for flags in ({}, {"overwrite": True}, {"resume": True}):
            with pytest.raises(PlanError, match=why):
                api.convert(source, dest, scheduler="sync", progress=False, **flags)
    assert _tree(tmp_path) == before


def test_destinations_inside_the_source_or_home_or_a_file_are_refused(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _zarr_source(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "notes.txt").write_text("mine")
    before = _tree(tmp_path)
    cases = [
        (source / "out", "lies inside the source"),
        (source / "0", "lies inside the source"),
        (home, "is the home directory"),
        (tmp_path / "notes.txt", "is a file"),
    ]
    for dest, why in cases:
        with pytest.raises(PlanError, match=why):
            api.convert(str(source), str(dest), scheduler="sync", progress=False, overwrite=True)
    assert _tree(tmp_path) == before


def test_plan_refuses_the_places_convert_refuses_before_it_prints(
    tmp_path: pathlib.Path,
) -> None:
    """`plan` names the same wrong destination as `convert` would, in one line and before
    any plan is printed (it said nothing of a destination that is the source itself); and
    `verify` of a file says it is a file, not an errno of a path under it."""
    source = _zarr_source(tmp_path)
    npy, _ = _volume(tmp_path, "file", 0)
    before = _tree(tmp_path)
    cases = [
        (source, "is the source", " itself"),
        (source / "out", "lies inside the source", "; writing there would change the source"),
    ]
    for dest, why, rest in cases:
        done = _cli("plan", str(source), str(dest))
        assert done.returncode == 2 and done.stdout == "", done.stdout
        assert done.stderr.strip().splitlines() == [
            f"shardwright plan: error: destination {dest} {why} {source}{rest}"
        ]
        with pytest.raises(PlanError, match=why):
            api.plan(str(source), str(dest))
    done = _cli("verify", npy)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"shardwright verify: error: {npy} is a file: verify reads a dataset's folder (its "
        "manifest, its info or zarr.json, its shards)"
    ]
    assert _tree(tmp_path) == before


# -- overwrite ----------------------------------------------------------------------------
def test_overwrite_keeps_the_old_dataset_when_the_new_job_cannot_start(
    tmp_path: pathlib.Path,
) -> None:
    a, vol_a = _volume(tmp_path, "a", 2)
    b, _ = _volume(tmp_path, "b", 3)
    dest = tmp_path / "out"
    api.convert(a, str(dest), scheduler="sync", progress=False, **A_KW)
    before = _tree(dest)
    # distributed is imported at the top: a config.set made before its defaults exist removes,
    # on exit, the whole "distributed" section it found absent, and no later cluster starts.
    with (
        dask.config.set({"distributed.comm.timeouts.connect": "1s"}),
        pytest.raises(PlanError, match="cannot connect to the Dask scheduler at tcp://127.0.0.1:9"),
    ):
        api.convert(b, str(dest), scheduler="tcp://127.0.0.1:9", overwrite=True, **B_KW)
    assert _tree(dest) == before  # the lease came and went; nothing else was touched
    np.testing.assert_array_equal(_read(dest), vol_a)
    assert api.verify(str(dest), a, full=True).ok


def test_overwrite_replaces_our_dataset_and_nothing_else(tmp_path: pathlib.Path) -> None:
    a, _ = _volume(tmp_path, "a", 4)
    b, vol_b = _volume(tmp_path, "b", 5)
    dest = tmp_path / "out"
    api.convert(a, str(dest), scheduler="sync", progress=False, **A_KW)
    old = _manifest_keys(dest)
    (dest / "README.txt").write_text("the user's notes, added later")
    (dest / "1_1_1" / "extra.txt").write_text("and more")
    manifest = api.convert(b, str(dest), scheduler="sync", progress=False, overwrite=True, **B_KW)
    assert isinstance(manifest, api.Manifest)
    new = _manifest_keys(dest)
    assert old - new and old & new  # some keys replaced one by one, others stale
    assert _stored_shards(dest) == new  # the stale ones are gone
    assert (dest / "README.txt").read_text() == "the user's notes, added later"
    assert (dest / "1_1_1" / "extra.txt").read_text() == "and more"
    (journal,) = (dest / ".shardwright" / "journal").iterdir()  # the new job's alone
    receipts = {str(p.relative_to(journal))[: -len(".json")] for p in journal.rglob("*.json")}
    assert receipts == new
    _clean(dest)
    np.testing.assert_array_equal(_read(dest), vol_b)
    report = api.verify(str(dest), b, full=True)
    assert not report.ok and report.problems == [
        "1_1_1/extra.txt: stored, but not in the manifest (an object that is no shard of "
        "the dataset)"
    ]


@pytest.mark.parametrize("pause", ["lease", "begin", "shards:3", "manifest", "cleanup"])
def test_a_killed_overwrite_never_looks_complete_and_is_finished_by_the_next_job(
    tmp_path: pathlib.Path, pause: str
) -> None:
    a, vol_a = _volume(tmp_path, "a", 6)
    b, vol_b = _volume(tmp_path, "b", 7)
    dest = tmp_path / "out"
    assert _convert(a, dest, *A_OPTIONS).returncode == 0
    _kill(_paused(tmp_path, pause, b, dest, *B_OPTIONS, "--overwrite"))
    report = api.verify(str(dest))
    if pause == "lease":  # nothing but the lease written: the old dataset stands
        np.testing.assert_array_equal(_read(dest), vol_a)
        assert report.ok, report.summary()
    elif pause in ("begin", "shards:3"):
        assert not (dest / MANIFEST_KEY).exists()
        assert report.problems == [
            "no manifest: the job that writes this dataset did not finish (run the same "
            "convert again with --resume)"
        ]
    else:  # the new manifest is written: complete, but the old objects are still there
        assert any("did not finish removing" in p for p in report.problems), report.problems
    # A job recorded in DEST is continued with --resume; before that, only --overwrite can.
    flag = "--overwrite" if pause == "lease" else "--resume"
    done = _convert(b, dest, *B_OPTIONS, flag)
    assert done.returncode == 0, done.stderr
    assert "taking over the lease" in done.stderr and "that process is gone" in done.stderr
    np.testing.assert_array_equal(_read(dest), vol_b)
    assert _stored_shards(dest) == _manifest_keys(dest)
    _clean(dest)
    assert api.verify(str(dest), b, full=True).ok


def test_a_killed_overwrite_is_also_finished_by_another_overwrite(tmp_path: pathlib.Path) -> None:
    a, _ = _volume(tmp_path, "a", 8)
    b, _ = _volume(tmp_path, "b", 9)
    c, vol_c = _volume(tmp_path, "c", 10)
    dest = tmp_path / "out"
    assert _convert(a, dest, *A_OPTIONS).returncode == 0
    a_keys = _manifest_keys(dest)
    _kill(_paused(tmp_path, "shards:2", b, dest, *B_OPTIONS, "--overwrite"))
    done = _convert(c, dest, "--chunk-size", "8,8,16", "--target-shard-bytes", "4096",
                    "--overwrite")  # fmt: skip
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(_read(dest), vol_c)
    assert _stored_shards(dest) == _manifest_keys(dest) != a_keys
    _clean(dest)
    assert api.verify(str(dest), c, full=True).ok


@pytest.mark.parametrize("pause", ["lease", "begin", "shards:3", "manifest"])
def test_a_killed_job_resumes_to_exact_output(tmp_path: pathlib.Path, pause: str) -> None:
    source, vol = _volume(tmp_path, "vol", 11)
    dest = tmp_path / "out"
    _kill(_paused(tmp_path, pause, source, dest, *A_OPTIONS))
    written = _stored_shards(dest)
    stamps = {k: (dest / k).stat().st_mtime_ns for k in written}
    done = _convert(source, dest, *A_OPTIONS, "--resume")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((dest / MANIFEST_KEY).read_text())
    assert manifest["totals"]["resumed_shards"] == len(written)
    assert all((dest / k).stat().st_mtime_ns == t for k, t in stamps.items())  # kept as is
    np.testing.assert_array_equal(_read(dest), vol)
    _clean(dest)
    assert api.verify(str(dest), source, full=True).ok


# -- one job per destination --------------------------------------------------------------
def test_a_second_job_is_refused_while_one_writes(tmp_path: pathlib.Path) -> None:
    source, vol = _volume(tmp_path, "vol", 12)
    dest = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), "slow", str(tmp_path / "unused"), "convert", source,
         str(dest), *A_OPTIONS],
        start_new_session=True,
    )  # fmt: skip
    try:
        while not _stored_shards(dest):
            assert proc.poll() is None
            time.sleep(0.02)
        for flag in ([], ["--resume"], ["--overwrite"]):
            refused = _convert(source, dest, *A_OPTIONS, *flag)
            assert refused.returncode == 2, refused.stderr
            (line,) = refused.stderr.strip().splitlines()
            assert "is being written by another job" in line
            assert f"on host {socket.gethostname()}, pid {proc.pid}" in line
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            _kill(proc)
    np.testing.assert_array_equal(_read(dest), vol)
    _clean(dest)
    assert api.verify(str(dest), source, full=True).ok


def test_jobs_started_together_into_one_destination(tmp_path: pathlib.Path) -> None:
    """Four jobs at once, three times over: exactly one writes, the others are refused with
    the lease message, and what was written is exact."""
    for round_ in range(3):
        sources = [_volume(tmp_path, f"r{round_}-{i}", 20 + 4 * round_ + i) for i in range(4)]
        dest = tmp_path / f"out{round_}"
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(DRIVER),
                    "slow",
                    str(tmp_path / "unused"),
                    "convert",
                    path,
                    str(dest),
                    *A_OPTIONS,
                ],
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for path, _ in sources
        ]
        results = [(p.wait(timeout=300), p.stderr.read() if p.stderr else "") for p in procs]
        winners = [i for i, (code, _) in enumerate(results) if code == 0]
        assert len(winners) == 1, results
        for i, (code, err) in enumerate(results):
            if i != winners[0]:
                assert code == 2 and "is being written by another job" in err, err
        np.testing.assert_array_equal(_read(dest), sources[winners[0]][1])
        assert api.verify(str(dest), sources[winners[0]][0], full=True).ok


def test_two_jobs_on_one_multi_process_cluster(tmp_path: pathlib.Path) -> None:
    """A lazy graph takes nothing until it runs; once it runs on the cluster's worker
    processes, its lease refuses a second job into the same destination."""
    from distributed import Client, LocalCluster

    source, vol = _volume(tmp_path, "vol", 30)
    other, _ = _volume(tmp_path, "other", 31)
    dest = tmp_path / "out"
    slow = "import time, shardwright.engine.engines as g; r = g.run_cpu_shard\n"
    slow += "g.run_cpu_shard = lambda *a, **k: (time.sleep(0.2), r(*a, **k))[1]"
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                     silence_logs=50) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        client.run(exec, slow, {})
        lazy = api.convert(source, str(dest), client=client, compute=False, **A_KW)
        assert not dest.exists()
        assert isinstance(lazy, api.PendingConversion)
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(lazy.compute, client=client, progress=False)
            while not list(dest.glob(".shardwright/lease-*")):
                assert not running.done(), running
                time.sleep(0.02)
            with pytest.raises(LeaseHeld, match="is being written by another job"):
                api.convert(other, str(dest), client=client, overwrite=True, **A_KW)
            manifest = running.result()
    assert manifest.totals.shards == len(_stored_shards(dest))
    np.testing.assert_array_equal(_read(dest), vol)
    _clean(dest)  # the coordinator released the lease


def _plant_lease(dest: pathlib.Path, *, host: str, heard_ago: float, timeout: float) -> None:
    """The lease of a job on another machine, last heard from `heard_ago` seconds ago."""
    now = time.time()
    holder = {"run": "f" * 32, "job": "e" * 32, "host": host, "pid": 4242,
              "process_started": now - 3600, "started_at": now - 600, "timeout": timeout,
              "epoch": 1}  # fmt: skip
    (dest / ".shardwright").mkdir(parents=True)
    (dest / lease_key(1)).write_text(json.dumps(holder))
    beat = {"run": holder["run"], "renewed_at": now - heard_ago}
    (dest / heartbeat_key(holder["run"])).write_text(json.dumps(beat))


def test_a_lease_is_taken_over_only_once_it_stopped_renewing_or_when_broken(
    tmp_path: pathlib.Path,
) -> None:
    source, vol = _volume(tmp_path, "vol", 32)
    live, stale = tmp_path / "live", tmp_path / "stale"
    _plant_lease(live, host="node-17", heard_ago=2, timeout=120)
    _plant_lease(stale, host="node-17", heard_ago=30, timeout=10)

    refused = _convert(source, live, *A_OPTIONS)
    assert refused.returncode == 2
    assert (
        "being written by another job: job eeeeeeeeeeee (run ffffffffffff) on host node-17, "
        "pid 4242" in refused.stderr
    )
    assert "taken over once it has not been renewed for 120 s" in refused.stderr
    broken = _convert(source, live, *A_OPTIONS, "--break-lease")
    assert broken.returncode == 0, broken.stderr
    assert "taking over the lease of job eeeeeeeeeeee" in broken.stderr
    assert "(--break-lease)" in broken.stderr

    taken = _convert(source, stale, *A_OPTIONS)
    assert taken.returncode == 0, taken.stderr
    assert "it stopped renewing it (timeout 10 s)" in taken.stderr
    for dest in (live, stale):
        np.testing.assert_array_equal(_read(dest), vol)
        _clean(dest)


def test_an_unreadable_lease_is_broken_only_on_request(tmp_path: pathlib.Path) -> None:
    source, _ = _volume(tmp_path, "vol", 33)
    dest = tmp_path / "out"
    (dest / ".shardwright").mkdir(parents=True)
    (dest / lease_key(3)).write_text("{not json")
    refused = _convert(source, dest, *A_OPTIONS)
    assert refused.returncode == 2 and "unreadable lease" in refused.stderr
    assert _convert(source, dest, *A_OPTIONS, "--break-lease").returncode == 0
    assert not (dest / lease_key(3)).exists()
    _clean(dest)


def test_a_job_whose_lease_was_taken_over_stops_writing(tmp_path: pathlib.Path) -> None:
    store = open_store(str(tmp_path / "out"))
    first = Lease(store, job="a" * 32)
    first.acquire()
    writer = FencedStore(store, fencing.fenced(first.job_run))
    writer.write_text("1_1_1/0.shard", "first")
    second = Lease(store, job="b" * 32)
    assert second.acquire(break_lease=True)
    with pytest.raises(LeaseLost, match="no longer holds"):
        writer.write_text("1_1_1/1.shard", "late")
    assert not (tmp_path / "out" / "1_1_1" / "1.shard").exists()
    assert not first.holds() and second.holds()
    first.release()  # not the holder any more: nothing of the new holder's is removed
    assert second.holds()


def test_the_lease_is_renewed_while_its_job_runs(tmp_path: pathlib.Path) -> None:
    store = open_store(str(tmp_path / "out"))
    running = Lease(store, job="a" * 32, timeout=0.8)
    running.acquire()
    with Renewer([(store, running.run, running.timeout)]):
        time.sleep(2.0)  # two and a half timeouts
        with pytest.raises(LeaseHeld):
            Lease(store, job="b" * 32).acquire()
    time.sleep(1.0)  # no renewal for longer than the timeout: the lease may be taken over
    taker = Lease(store, job="b" * 32)
    assert "stopped renewing" in (taker.acquire() or "")
    assert not running.holds()


class _Unreachable(LocalStore):
    """A destination this host stops reaching once `cut` is set (its requests fail)."""

    cut = False

    def list_sizes(self, prefix: str = "") -> dict[str, int]:
        if _Unreachable.cut:
            raise StoreError(f"{self.url}: connection timed out")
        return super().list_sizes(prefix)


def test_a_lease_this_host_cannot_renew_stops_its_job_before_its_timeout(
    tmp_path: pathlib.Path,
) -> None:
    _Unreachable.cut = False
    store = _Unreachable(str(tmp_path / "out"))
    running = Lease(store, job="a" * 32, timeout=1.2)
    running.acquire()
    renewer = Renewer([(store, running.run, running.timeout)])
    with renewer:  # the lease counts from when this process took it
        time.sleep(1.5)  # renewed every 0.3 s: more than a timeout without a stop
        renewer.check()
        _Unreachable.cut = True
        cut_at = time.monotonic()
        with pytest.raises(LeaseUnrenewed) as stopped:
            while time.monotonic() - cut_at < 1.2:
                renewer.check()
                time.sleep(0.02)
        stopped_after = time.monotonic() - cut_at
    assert 0.2 < stopped_after < 1.2  # half the timeout after the last renewal, within it
    said = stopped.value.render(flag_wording)
    assert str(tmp_path / "out") in said and "connection timed out" in said, said
    assert "before the lease's timeout (1 s)" in said and "--resume" in said, said


def test_a_coordinator_stuck_in_a_request_is_stopped_within_half_its_lease(
    tmp_path: pathlib.Path,
) -> None:
    """Whatever the coordinator waits on (here a request that never returns), the thread
    that runs the job stops it once its lease has gone unrenewed for half the timeout."""
    _Unreachable.cut = False
    store = _Unreachable(str(tmp_path / "out"))
    running = Lease(store, job="a" * 32, timeout=1.2)
    running.acquire()
    never = threading.Event()
    with Renewer([(store, running.run, running.timeout)]) as renewer:
        _Unreachable.cut = True
        cut_at = time.monotonic()
        with pytest.raises(LeaseUnrenewed):
            Supervisor(renewer).run(lambda: never.wait(60))
    assert time.monotonic() - cut_at < 1.2 + WATCH_S  # half the timeout, and one look
    assert halted(running.run) is not None


def test_a_halted_run_writes_nothing_more_from_this_process(tmp_path: pathlib.Path) -> None:
    store = open_store(str(tmp_path / "out"))
    running = Lease(store, job="a" * 32)
    running.acquire()
    writer = FencedStore(store, fencing.fenced(running.job_run))
    writer.write_text("1_1_1/0.shard", "before")
    Renewer([(store, running.run, running.timeout)]).halt()  # its coordinator stopped
    with pytest.raises(StoreError, match="lease went unrenewed"):
        writer.write_text("1_1_1/1.shard", "after")
    with pytest.raises(StoreError, match="lease went unrenewed"):
        writer.delete("1_1_1/0.shard")
    with pytest.raises(StoreError, match="lease went unrenewed"):  # nor takes a lease again
        Lease(store, job="a" * 32, run=running.run).acquire(break_lease=True)
    assert (tmp_path / "out" / "1_1_1" / "0.shard").read_text() == "before"
    assert not (tmp_path / "out" / "1_1_1" / "1.shard").exists()
    assert running.holds()  # the lease is left to expire: this host may not reach the store


def test_concurrent_acquires_have_exactly_one_winner(tmp_path: pathlib.Path) -> None:
    store = open_store(str(tmp_path / "out"))

    def attempt(i: int) -> str:
        try:
            Lease(store, job=f"{i:032d}").acquire()
            return "won"
        except LeaseHeld:
            return "refused"

    for _ in range(25):  # a race lost once in a few rounds shows here
        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(attempt, range(8)))
        assert outcomes.count("won") == 1, outcomes
        for path in (tmp_path / "out" / ".shardwright").iterdir():
            path.unlink()


# -- resume trusts only what it can prove -------------------------------------------------
def test_resume_with_another_source_of_the_same_shape_is_refused(tmp_path: pathlib.Path) -> None:
    a, _ = _volume(tmp_path, "a", 40)
    b, _ = _volume(tmp_path, "b", 41)
    dest = tmp_path / "out"
    _kill(_paused(tmp_path, "shards:3", a, dest, *A_OPTIONS))
    before = _tree(dest)
    refused = _convert(b, dest, *A_OPTIONS, "--resume")
    assert refused.returncode == 2
    assert "this job differs from the one that wrote it" in refused.stderr
    assert f'source.url: "{a}" -> "{b}"' in refused.stderr
    assert _tree(dest) == before


def test_resume_after_the_source_changed_in_place_is_refused(tmp_path: pathlib.Path) -> None:
    a, _ = _volume(tmp_path, "a", 42)
    dest = tmp_path / "out"
    _kill(_paused(tmp_path, "shards:3", a, dest, *A_OPTIONS))
    np.save(a, np.random.default_rng(43).integers(0, 255, (24, 40, 48), dtype=np.uint8))
    refused = _convert(a, dest, *A_OPTIONS, "--resume")
    assert refused.returncode == 2 and "source.identity.mtime_ns" in refused.stderr


def test_resume_rewrites_shards_it_cannot_prove(tmp_path: pathlib.Path) -> None:
    """A bit flipped in a shard's data (its indexes still parse), a receipt removed, a
    receipt of another job: each shard is written again; the others are kept."""
    source, vol = _volume(tmp_path, "vol", 44)
    dest = tmp_path / "out"
    api.convert(source, str(dest), scheduler="sync", progress=False, **A_KW)
    keys = sorted(_manifest_keys(dest))
    flipped, unreceipted, foreign = keys[1], keys[2], keys[3]
    data = bytearray((dest / flipped).read_bytes())
    data[len(data) // 2] ^= 0x40
    (dest / flipped).write_bytes(bytes(data))
    (receipts,) = (dest / ".shardwright" / "journal").iterdir()  # the job's receipts
    (receipts / f"{unreceipted}.json").unlink()
    entry = json.loads((receipts / f"{foreign}.json").read_text())
    (receipts / f"{foreign}.json").write_text(json.dumps({**entry, "job": "0" * 32}))
    (dest / MANIFEST_KEY).unlink()
    stamps = {k: (dest / k).stat().st_mtime_ns for k in keys}
    manifest = api.convert(source, str(dest), scheduler="sync", progress=False, resume=True, **A_KW)
    assert isinstance(manifest, api.Manifest)
    assert manifest.totals.resumed_shards == len(keys) - 3
    rewritten = {k for k in keys if (dest / k).stat().st_mtime_ns != stamps[k]}
    assert rewritten == {flipped, unreceipted, foreign}
    np.testing.assert_array_equal(_read(dest), vol)
    assert api.verify(str(dest), source, full=True).ok


def test_resume_of_a_dataset_without_a_job_record_is_refused(tmp_path: pathlib.Path) -> None:
    source, vol = _volume(tmp_path, "vol", 45)
    dest = tmp_path / "out"
    api.convert(source, str(dest), scheduler="sync", progress=False, **A_KW)
    # As an earlier shardwright left it: a manifest, no job record, no receipts.
    for path in sorted((dest / ".shardwright").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (dest / ".shardwright").rmdir()
    manifest = json.loads((dest / MANIFEST_KEY).read_text())
    del manifest["job"], manifest["metadata"]
    (dest / MANIFEST_KEY).write_text(json.dumps(manifest))
    with pytest.raises(PlanError, match="kept no job record"):
        api.convert(source, str(dest), scheduler="sync", progress=False, resume=True, **A_KW)
    api.convert(source, str(dest), scheduler="sync", progress=False, overwrite=True, **B_KW)
    np.testing.assert_array_equal(_read(dest), vol)
    assert _stored_shards(dest) == _manifest_keys(dest)
    _clean(dest)


def test_the_plan_is_not_printed_before_a_destination_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, _ = _volume(tmp_path, "vol", 46)
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "keep.txt").write_text("x")
    assert cli_main(["convert", source, str(dest), "--scheduler", "sync"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did not write (e.g. keep.txt)" in err[0]


def test_a_lease_written_while_the_destination_is_inspected_reads_as_ours(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two jobs started together: the other one's lease appears between the look at
    `.shardwright/` (empty then) and the look at the rest. The destination is that job's
    (its lease is then refused as held), never "files shardwright did not write"."""
    from shardwright.lifecycle import destination

    store = open_store(str(tmp_path / "out"))
    first_entry = type(store).first_entry

    def lease_appears(self: Any) -> str | None:
        lease = tmp_path / "out" / ".shardwright" / "lease-000001.json"
        lease.parent.mkdir(parents=True, exist_ok=True)
        lease.write_text("{}")
        return first_entry(self)

    monkeypatch.setattr(type(store), "first_entry", lease_appears)
    assert destination.inspect(store).kind == "ours"
    monkeypatch.undo()
    (tmp_path / "out" / ".shardwright" / "lease-000001.json").unlink()
    (tmp_path / "out" / ".shardwright" / "notes.txt").write_text("someone else's")
    assert destination.inspect(store).kind == "foreign"  # looked at once more, then refused
