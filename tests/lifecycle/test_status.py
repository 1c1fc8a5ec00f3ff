"""`shardwright status DEST` on a job as it runs, after it was killed (SIGKILL: no goodbye)
and once it finished, on local disk and on the moto S3 server: read from what the job writes
anyway (its record, lease, heartbeats, receipts, manifest)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest

import shardwright
from shardwright.errors import DestinationError

SOURCE_ZYX = (512, 512, 512)  # png-encoded in one thread: several seconds, time to look at it
ARGS = ["--resolution", "1,1,1", "--chunk-size", "64,64,32", "--target-shard-bytes", "1M",
        "--encoding", "png"]  # fmt: skip


def _cli(*words: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardwright.cli", *words],
                          capture_output=True, text=True, timeout=300, **kwargs)  # fmt: skip


def _status(dest: str, *words: str) -> dict[str, Any]:
    run = _cli("status", dest, "--json", *words)
    assert run.returncode == 0, run.stderr
    return dict(json.loads(run.stdout))


@pytest.fixture(scope="module")
def volume(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("status") / "v.npy"
    np.save(path, np.random.default_rng(0).integers(0, 255, SOURCE_ZYX, dtype=np.uint8))
    return path


def _start(volume: pathlib.Path, dest: str, *words: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "shardwright.cli", "convert", str(volume), dest, *ARGS, *words],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _wait_for_shards(job: subprocess.Popen[str], count: Any) -> None:
    while job.poll() is None and count() < 8:
        time.sleep(0.02)
    assert job.poll() is None, "the job ended before it could be looked at"


def test_status_of_a_running_a_killed_and_a_finished_job(
    volume: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    job = _start(volume, str(out), "--scheduler", "sync")
    _wait_for_shards(job, lambda: len(os.listdir(out / "1_1_1")) if (out / "1_1_1").is_dir() else 0)
    running = _status(str(out))
    assert running["state"] == "running"
    assert f"pid {job.pid}," in running["holder"]
    assert running["shards_planned"] == 256 and 0 < running["shards_stored"] < 256
    assert running["bytes_stored"] > 0 and running["bytes_per_second"] > 0
    assert running["seconds_left"] is not None
    text = _cli("status", str(out)).stdout
    assert f"{out}: running" in text and "shards" in text and "left" in text

    job.send_signal(signal.SIGKILL)  # no goodbye: the lease stays, its holder is gone
    job.wait(timeout=30)
    stopped = _status(str(out))
    assert stopped["state"] == "stopped" and stopped["shards_stored"] < 256
    assert "continue it with the same convert command and --resume" in _cli(
        "status", str(out)).stdout  # fmt: skip

    finished = _cli("convert", str(volume), str(out), *ARGS, "--resume", "--quiet")
    assert finished.returncode == 0, finished.stderr
    done = _status(str(out), "--watch", "0.1")  # returns at once: nothing left to watch
    assert done["state"] == "finished" and done["shards_stored"] == done["shards_planned"] == 256
    assert done["holder"] is None
    # Python's status is what the command line prints
    from_python = shardwright.status(str(out))
    assert from_python.to_json() == done
    assert _cli("status", str(out)).stdout.strip() == from_python.summary().strip()


def test_status_of_a_destination_without_a_job(tmp_path: pathlib.Path) -> None:
    (tmp_path / "empty").mkdir()
    run = _cli("status", str(tmp_path / "empty"))
    assert run.returncode == 2
    assert "holds no shardwright job (no job record, no manifest)" in run.stderr
    with pytest.raises(DestinationError, match="holds no shardwright job"):
        shardwright.status(str(tmp_path / "empty"))


def test_bare_shardwright_lists_its_commands() -> None:
    run = _cli()
    assert run.returncode == 0, run.stderr
    listed = [line.split()[0] for line in run.stdout.splitlines() if line.startswith("  ")]
    assert listed == ["plan", "convert", "verify", "status", "serve", "view", "demo"]
    assert "'shardwright COMMAND --help'" in run.stdout


@pytest.mark.s3
def test_status_on_an_object_store(volume: pathlib.Path, s3: Any) -> None:
    s3.make_bucket("status")
    options = json.dumps(s3.options())
    dest = "s3://status/out"
    env = {**os.environ}
    job = subprocess.Popen(
        [sys.executable, "-m", "shardwright.cli", "convert", str(volume), dest, *ARGS,
         "--storage-options", options, "--scheduler", "sync"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    import s3fs

    fs = s3fs.S3FileSystem(**s3.options(), skip_instance_cache=True)

    def stored() -> int:
        fs.invalidate_cache()
        return len(fs.glob("status/out/1_1_1/*.shard"))

    _wait_for_shards(job, stored)
    running = _status(dest, "--storage-options", options)
    assert running["state"] == "running" and 0 < running["shards_stored"] < 256
    job.send_signal(signal.SIGKILL)
    job.wait(timeout=30)
    assert _status(dest, "--storage-options", options)["state"] == "stopped"
    resumed = _cli("convert", str(volume), dest, *ARGS, "--storage-options", options,
                   "--resume", "--quiet")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    done = _status(dest, "--storage-options", options)
    assert done["state"] == "finished" and done["shards_stored"] == 256


def test_bytes_written_are_the_datasets_objects_once(tmp_path: pathlib.Path) -> None:
    """One definition of bytes written: the objects of each dataset. A segmentation converted
    with its meshes and skeletons: the progress counts their shards' bytes and not the
    blocks' spools (the job's intermediates); `status` counts the volume's objects apart
    from its meshes' and skeletons', each said once."""
    import io

    from shardwright import api
    from shardwright.jobs.progress import Progress
    from tests.support import label_shapes

    source = label_shapes.write_precomputed(tmp_path / "shapes")
    dest = tmp_path / "out"
    progress = Progress(out=io.StringIO())
    manifest = api.convert(
        source, str(dest), generate_meshes=True, generate_skeletons=True,
        mesh_block=(32, 32, 32), scheduler="sync", progress=progress,
    )  # fmt: skip

    def objects_of(folder: pathlib.Path, beside: tuple[str, ...] = ()) -> int:
        """Bytes of a dataset's objects: not its control objects, manifest, or `beside`."""
        return sum(
            p.stat().st_size
            for p in folder.rglob("*")
            if p.is_file()
            and ".shardwright" not in p.parts
            and p.name != "shardwright-manifest.json"
            and p.relative_to(folder).parts[0] not in beside
        )

    objects = {
        ".": objects_of(dest, ("mesh", "skeletons")),
        "mesh": objects_of(dest / "mesh"),
        "skeletons": objects_of(dest / "skeletons"),
    }
    shards = manifest.totals.bytes + sum(t.bytes for t in manifest.companions.values())
    assert progress.bytes == shards
    status = _status(str(dest))
    assert status["bytes_stored"] == objects["."]
    by_dest = {pathlib.Path(c["dest"]).name: c for c in status["companions"]}
    assert by_dest["mesh"]["bytes_stored"] == objects["mesh"]
    assert by_dest["skeletons"]["bytes_stored"] == objects["skeletons"]


def test_status_of_meshes_whose_blocks_still_run_gives_no_rate(tmp_path: pathlib.Path) -> None:
    """While the blocks of generated meshes run, the mesh dataset holds only its metadata:
    its status says running, its tasks done and the time left, and no byte rate (it said
    "434 B, 7 B/s")."""
    from shardwright.cli.demo import write_demo_volumes

    write_demo_volumes((256, 256, 96), str(tmp_path / "image.npy"), str(tmp_path / "seg.npy"))
    dest = tmp_path / "out"
    job = subprocess.Popen(
        [sys.executable, "-m", "shardwright.cli", "convert", str(tmp_path / "seg.npy"), str(dest),
         "--layer-type", "segmentation", "--generate-meshes", "--mesh-block", "64,64,64",
         "--resolution", "8,8,40", "--scheduler", "sync", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        seen = None
        deadline = time.monotonic() + 120
        while job.poll() is None and seen is None and time.monotonic() < deadline:
            if (dest / "mesh" / ".shardwright" / "job.json").exists():
                mesh = _status(str(dest / "mesh"))
                blocks_only = not list((dest / "mesh").glob("*.shard"))
                if mesh["state"] == "running" and mesh["preparing_done"] and blocks_only:
                    seen = mesh
            time.sleep(0.2)
        assert seen is not None, "the meshes' block phase was not seen running"
        assert seen["bytes_per_second"] is None  # tasks are done, no object's bytes yet
        assert seen["seconds_left"] is not None
        # its blocks counted apart from its shards (it said "shards 3 / 6" of 4 blocks and 2
        # shards), which the plan estimates
        assert seen["shards_stored"] == 0 and seen["shards_estimated"]
        assert seen["preparing"] == "blocks" and seen["preparing_planned"] == 4 * 4 * 2
    finally:
        job.kill()
        job.wait()
