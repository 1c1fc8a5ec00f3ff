"""One truth about a job, for every kind (a volume, a volume's generated meshes, a table's
annotations): the line a stopped `convert` ends with, `status` (the command line's and
Python's), the progress line and what `--resume` then keeps are the same counts, read from
the job's journal, with the preparing tasks (mesh blocks, table partitions) counted apart from
the shards and the plan's estimate of shards made from spools said so. A mesh job stopped
during its blocks keeps the blocks it did and stops within a block; a killed one leaves no
warning behind it. A dataset's bytes are its own, not those of a dataset nested in it. Real
processes, real signals."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import shardwright
from shardwright import api
from tests.support import label_shapes, volumes
from tests.support.processes import wait_until_gone

DRIVER = pathlib.Path(__file__).parents[1] / "support" / "lifecycle_driver.py"
ZARR3 = ["--format", "zarr3", "--resolution", "1,1,1", "--chunk-size", "64,64,32",
         "--target-shard-bytes", "512K"]  # fmt: skip
MESHES = ["--generate-meshes", "--mesh-block", "32,32,32"]
TABLE = ["--annotation-type", "point", "--resolution", "8,8,40", "--annotation-limit", "50",
         "--relationship", "pre=pre", "--relationship", "post=post"]  # fmt: skip
Counts = dict[str, dict[str, tuple[int, int]]]  # dataset ("" or "mesh/") -> unit -> counts


def _cli(*words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardwright.cli", *words],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def _status(dest: pathlib.Path) -> dict[str, Any]:
    shown = _cli("status", str(dest), "--json")
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout))


def _stopped(pause: str, words: list[str], ready: Callable[[], bool]) -> tuple[str, float]:
    """`convert` (the driver, `--scheduler sync --quiet`) sent Ctrl-C once `ready()`: its one
    line, and the seconds it took to end after the signal."""
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), pause, "unused", "convert", *words],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not ready():
            assert proc.poll() is None and time.monotonic() < deadline, "it ended first"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and stdout == "", stderr
    (line,) = stderr.strip().splitlines()
    assert line.endswith("--resume`"), line
    return line, time.monotonic() - sent


def _phrase(line: str) -> str:
    """What a stopped job's line says its destination holds."""
    stored = re.search(r"; stored so far: (.*?); its lease is released", line)
    assert stored is not None, line
    return stored[1]


def _said(line: str) -> Counts:
    """`interrupted; stored so far: shards 16 / 16, mesh/ blocks 3 / 24 and shards 0 / 2
    estimated; its lease ...` as {"": {"shards": (16, 16)}, "mesh/": {...}}."""
    counts: Counts = {}
    for phrase in _phrase(line).split(", "):
        name = phrase.split(" ")[0] if phrase.split(" ")[0].endswith("/") else ""
        found = re.findall(r"(\w+) ([\d,]+) / ([\d,]+)", phrase)
        counts[name] = {unit: (int(d.replace(",", "")), int(p.replace(",", "")))
                        for unit, d, p in found}  # fmt: skip
    return counts


def _receipts(dest: pathlib.Path) -> int:
    folder = dest / ".shardwright" / "journal"
    return sum(1 for p in folder.rglob("*.json")) if folder.is_dir() else 0


def test_a_stopped_volume_says_what_its_journal_holds_which_resume_keeps(
    tmp_path: pathlib.Path,
) -> None:
    """A zarr3 job of 16 shards stopped by Ctrl-C: its line counted the receipts the
    coordinator had heard of ("0 of 16"), while `status` read one more from the journal
    ("1 / 16"). The line, `status` (text, JSON, Python) and the resume's kept shards and
    progress are one count now."""
    source, out = tmp_path / "v.npy", tmp_path / "out"
    np.save(source, np.random.default_rng(1).integers(0, 255, (64, 256, 256), dtype=np.uint8))
    line, _ = _stopped("slow", [str(source), str(out), *ZARR3], lambda: _receipts(out) >= 3)
    said = _said(line)
    stored = said[""]["shards"][0]
    assert said == {"": {"shards": (stored, 16)}} and 3 <= stored < 16, line
    status = _status(out)
    assert status["state"] == "stopped" and status["preparing"] is None
    assert (status["shards_stored"], status["shards_planned"]) == (stored, 16)
    assert not status["shards_estimated"]
    assert f"  shards       {stored} / 16 (" in _cli("status", str(out)).stdout
    assert shardwright.status(str(out)).stored() == f"shards {stored} / 16"
    resumed = _cli("convert", str(source), str(out), *ZARR3, "--resume", "--scheduler", "sync")
    assert resumed.returncode == 0, resumed.stderr
    assert f"({stored} kept from an earlier run)" in resumed.stdout
    assert re.search(rf"^shards 16 / 16 \(100\.0 %\), .*, {stored} kept$", resumed.stderr, re.M)


def test_an_overwrite_stopped_counts_its_own_receipts_not_those_of_the_job_it_replaces(
    tmp_path: pathlib.Path,
) -> None:
    """A stopped job, then `--overwrite` with another chunk size, stopped too: `status` and the
    line count the second job's receipts alone (they counted the first job's too, a listing
    not saying whose a receipt was), and its resume keeps that many."""
    source, out = tmp_path / "v.npy", tmp_path / "out"
    np.save(source, np.random.default_rng(2).integers(0, 255, (64, 256, 256), dtype=np.uint8))
    _stopped("slow", [str(source), str(out), *ZARR3], lambda: _receipts(out) >= 4)
    first = _receipts(out)
    other = [*("64,64,64" if w == "64,64,32" else w for w in ZARR3), "--overwrite"]  # another job
    line, _ = _stopped("slow", [str(source), str(out), *other],
                       lambda: _receipts(out) >= first + 2)  # fmt: skip
    (stored, planned) = _said(line)[""]["shards"]
    assert 2 <= stored < planned and _receipts(out) >= first + stored, line
    status = _status(out)
    assert (status["shards_stored"], status["shards_planned"]) == (stored, planned)
    resumed = _cli("convert", str(source), str(out), *other[:-1], "--resume", "--scheduler",
                   "sync")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert f"({stored} kept from an earlier run)" in resumed.stdout
    jobs = list((out / ".shardwright" / "journal").iterdir())
    assert len(jobs) == 1 and _receipts(out) == planned  # done: the first job's receipts gone


def test_meshes_stopped_in_their_blocks_keep_them_and_stop_within_a_block(
    tmp_path: pathlib.Path,
) -> None:
    """Ctrl-C while groups of mesh blocks run (24 blocks of 0.3 s each): a group stops after
    the block it is in (it used to run all its blocks, and the stop waited for them), the
    blocks it did are journaled and counted apart from the shards (status
    said `shards 0 / 6` where the plan said 2 shards), and `--resume` keeps exactly those."""
    source = label_shapes.write_precomputed(tmp_path / "labels")
    out = tmp_path / "out"
    mesh = api.plan(source, str(out), generate_meshes=True, mesh_block=(32, 32, 32)).companions[0]
    blocks, shards = mesh.preparing_tasks, mesh.shard_count
    assert blocks == 24
    spools = out / "mesh" / ".shardwright" / "exchange"
    line, seconds = _stopped(
        "slow-blocks",
        [source, str(out), *MESHES],
        lambda: spools.is_dir() and len(list(spools.glob("block-*"))) >= 3,
    )
    assert seconds < 5, f"the stop took {seconds:.1f} s"
    said = _said(line)
    done = said["mesh/"]["blocks"][0]
    assert 3 <= done < blocks, line
    assert said["mesh/"] == {"blocks": (done, blocks), "shards": (0, shards)}, line
    assert f"mesh/ blocks {done} / {blocks} and shards 0 / {shards} estimated" in line
    volume = said[""]["shards"]
    assert volume[0] == volume[1], line  # the volume's shards ran first
    status = _status(out)
    (meshes,) = [c for c in status["companions"] if c["dest"].endswith("/mesh")]
    assert (meshes["preparing"], meshes["preparing_done"], meshes["preparing_planned"]) == (
        "blocks", done, blocks)  # fmt: skip
    assert (meshes["shards_stored"], meshes["shards_planned"]) == (0, shards)
    assert meshes["shards_estimated"] and len(list(spools.glob("block-*"))) == done
    text = _cli("status", str(out / "mesh")).stdout
    assert f"  blocks       {done} / {blocks} (" in text
    assert f"  shards       0 / {shards} estimated, " in text
    resumed = _cli("convert", source, str(out), *MESHES, "--resume", "--scheduler", "sync")
    assert resumed.returncode == 0, resumed.stderr
    assert f"kept {done} of {blocks} blocks from an earlier run (not made again)" in resumed.stdout
    assert f", {done} blocks and {volume[0]} shards kept" in resumed.stderr  # its progress
    assert api.verify(str(out / "mesh"), full=True).ok


def test_a_stopped_table_counts_its_partitions_apart_from_its_shards(
    tmp_path: pathlib.Path,
) -> None:
    """A table's job stopped among its shards: the partitions and the shards each counted
    against the plan (status said `7 / 97` for 64 shards: partitions and shards as one), the
    same in the line, `status` and what `--resume` keeps."""
    rng = np.random.default_rng(3)
    rows = 400
    frame = pd.DataFrame({
        "id": np.arange(1, rows + 1, dtype=np.uint64) * np.uint64(7919),
        "x": rng.uniform(0, 300, rows).astype(np.float32),
        "y": rng.uniform(0, 200, rows).astype(np.float32),
        "z": rng.uniform(0, 40, rows).astype(np.float32),
        "pre": rng.integers(1, 30, rows).astype(np.uint64),
        "post": rng.integers(0, 30, rows).astype(np.uint64),
    })  # fmt: skip
    table, dest = tmp_path / "synapses.parquet", tmp_path / "synapses"
    dd.from_pandas(frame, npartitions=3).to_parquet(table, write_index=False)
    plan = api.plan(str(table), str(dest), annotation_type="point", resolution=(8, 8, 40),
                    annotation_limit=50,
                    relationships=[("pre", "pre"), ("post", "post")])  # fmt: skip
    partitions, shards = plan.preparing_tasks, plan.shard_count
    assert partitions == 3 and shards > 6
    line, _ = _stopped("slow-tables", [str(table), str(dest), *TABLE],
                       lambda: _receipts(dest) >= partitions + 2)  # fmt: skip
    said = _said(line)
    stored = said[""]["shards"][0]
    assert said == {"": {"partitions": (3, 3), "shards": (stored, shards)}}, line
    assert 2 <= stored < shards and f"shards {stored} / {shards} estimated" in line
    status = _status(dest)
    assert (status["preparing"], status["preparing_done"], status["preparing_planned"]) == (
        "partitions", 3, 3)  # fmt: skip
    assert (status["shards_stored"], status["shards_planned"]) == (stored, shards)
    assert shardwright.status(str(dest)).stored() == _phrase(line)
    resumed = _cli("convert", str(table), str(dest), *TABLE, "--resume", "--scheduler", "sync",
                   "--quiet")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert f"({stored} kept from an earlier run)" in resumed.stdout
    assert "kept 3 of 3 partitions from an earlier run (not made again)" in resumed.stdout
    assert api.verify(str(dest)).ok


def test_a_datasets_bytes_leave_out_a_dataset_nested_in_its_folder(
    tmp_path: pathlib.Path,
) -> None:
    """A table's annotations converted into a folder of a volume: the volume's bytes are its
    own objects (they counted the annotations'), the annotations' are theirs."""
    source, dest = tmp_path / "v.npy", tmp_path / "out"
    np.save(source, np.arange(32 * 32 * 32, dtype=np.uint32).reshape(32, 32, 32))
    api.convert(str(source), str(dest), resolution=(1, 1, 1), chunk_size=(16, 16, 16),
                scheduler="sync", progress=False)  # fmt: skip
    table = tmp_path / "points.csv"
    table.write_text("x,y,z,id\n1,2,3,1\n4,5,6,2\n20,21,22,3\n")
    api.convert(str(table), str(dest / "points"), annotation_type="point",
                resolution=(4, 4, 40), scheduler="sync", progress=False)  # fmt: skip

    def objects(folder: pathlib.Path, beside: str | None = None) -> int:
        return sum(
            p.stat().st_size for p in folder.rglob("*")
            if p.is_file() and ".shardwright" not in p.parts
            and p.name != "shardwright-manifest.json"
            and p.relative_to(folder).parts[0] != beside
        )  # fmt: skip

    volume, points = shardwright.status(str(dest)), shardwright.status(str(dest / "points"))
    assert objects(dest / "points") > 0
    assert volume.bytes_stored == objects(dest, beside="points")
    assert points.bytes_stored == objects(dest / "points")
    assert _status(dest)["bytes_stored"] == volume.bytes_stored


def test_a_mesh_job_killed_in_its_blocks_says_nothing_after_and_keeps_them(
    tmp_path: pathlib.Path,
) -> None:
    """SIGKILL of `convert` (no unwinding) while its cluster's worker processes mesh blocks:
    nothing is printed after it (multiprocessing's resource tracker warned of "leaked
    semaphore objects" seconds later), and `--resume` keeps the blocks `status` counts."""
    pytest.importorskip("zmesh")
    source, out = volumes.saved_balls(tmp_path / "seg.npy"), tmp_path / "out"
    words = [source, str(out), *MESHES, "--resolution", "8,8,8", "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "shardwright.cli", "convert", *words],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    spools = out / "mesh" / ".shardwright" / "exchange"
    try:
        deadline = time.monotonic() + 120
        while not (spools.is_dir() and len(list(spools.glob("block-*"))) >= 10):
            assert proc.poll() is None and time.monotonic() < deadline, "it ended first"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=90)  # every process that could write it gone
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    assert stdout == "" and stderr == "", stderr
    # the cluster's processes gone: nothing more is journaled
    wait_until_gone(proc.pid, 30, "a process of the killed job lived on")
    (meshes,) = [c for c in _status(out)["companions"] if c["dest"].endswith("/mesh")]
    done = meshes["preparing_done"]
    assert meshes["state"] == "stopped" and 10 <= done < meshes["preparing_planned"] == 256
    resumed = _cli("convert", *words[:-1], "--resume", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert f"kept {done} of 256 blocks from an earlier run (not made again)" in resumed.stdout
