"""The ways people run shardwright, run here on the demo volume: the notebook (executed by
nbclient), the submit script and the CLI against a scheduler that is already running (its
address given or taken from $DASK_SCHEDULER_ADDRESS), and the public-layout conversion."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import nbformat
import numpy as np
import pytest
import tensorstore as ts
from distributed import Client
from nbclient import NotebookClient

from shardwright.cli.demo import write_demo_volumes
from shardwright.common.control_keys import MANIFEST_KEY

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "workflows"
DEMO_SIZE_XYZ = (96, 80, 32)
SMALL = ["--set", "chunk_size=[32,32,16]", "--set", "target_shard_bytes=32768"]


def _read_precomputed(dest: pathlib.Path, scale_index: int = 0) -> np.ndarray:
    spec = {"driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/"}
    store = ts.open({**spec, "scale_index": scale_index}).result()
    return np.asarray(store.read().result())


def _average_2x2x1(level: np.ndarray) -> np.ndarray:
    """[x, y, z, c] uint8 reduced by 2, 2, 1: the block mean rounded half up (even sizes)."""
    blocks = level.astype(np.int64).reshape(
        level.shape[0] // 2, 2, level.shape[1] // 2, 2, *level.shape[2:]
    )
    return ((blocks.sum(axis=(1, 3)) + 2) // 4).astype(level.dtype)


@pytest.fixture(scope="module")
def demo_volume(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray]:
    path = tmp_path_factory.mktemp("demo") / "image.npy"
    write_demo_volumes(DEMO_SIZE_XYZ, str(path), None)
    return str(path), np.load(path)


@pytest.fixture(scope="module")
def running_scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Dask scheduler and two worker processes started as `dask scheduler` / `dask worker`
    are in a cluster: other processes, found only by address."""
    root = tmp_path_factory.mktemp("cluster")
    scheduler_file = root / "scheduler.json"
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    common = ["--host", "127.0.0.1", "--no-dashboard"]
    scheduler = subprocess.Popen(
        [*dask, "--port", "0", "--scheduler-file", str(scheduler_file), *common],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers = None
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists():
            assert scheduler.poll() is None and time.monotonic() < deadline, "no scheduler"
            time.sleep(0.05)
        workers = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                "--scheduler-file",
                str(scheduler_file),
                "--nworkers",
                "2",
                "--nthreads",
                "1",
                *common,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        address = json.loads(scheduler_file.read_text())["address"]
        with Client(address, timeout="30s") as client:
            client.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for process in (workers, scheduler):
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _scheduler_transitions(address: str) -> int:
    """How many task transitions the scheduler has made: it grows when it runs a job."""
    with Client(address, timeout="30s") as client:
        count: int = client.run_on_scheduler(
            lambda dask_scheduler: dask_scheduler.transition_counter
        )
    return count


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    return subprocess.run(
        args, env={**clean, **(env or {})}, capture_output=True, text=True, timeout=180
    )


# -- the notebook ---------------------------------------------------------------------------------
@pytest.fixture
def python_kernel(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kernelspec for this interpreter, found before any other python3 kernel on the machine."""
    spec = tmp_path / "jupyter" / "kernels" / "shardwright-tests"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "shardwright tests", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    return "shardwright-tests"


def _outputs(cell: Any) -> str:
    texts = []
    for output in cell.get("outputs", []):
        texts.append(output.get("text", ""))
        texts.extend(str(v) for v in output.get("data", {}).values())
    return "\n".join(texts)


def test_notebook_plans_and_converts_with_progress_and_dashboard(
    tmp_path: pathlib.Path, python_kernel: str
) -> None:
    notebook = nbformat.read(WORKFLOWS / "convert_in_notebook.ipynb", as_version=4)
    work = tmp_path / "run"
    work.mkdir()
    NotebookClient(
        notebook,
        timeout=240,
        kernel_name=python_kernel,
        resources={"metadata": {"path": str(work)}},
    ).execute()
    text = {i: _outputs(cell) for i, cell in enumerate(notebook.cells)}
    everything = "\n".join(text.values())
    assert "dask dashboard: http://" in everything
    assert "shards" in everything and "peak per task" in everything  # the plan report
    widget = [
        cell
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in output.get("data", {})
    ]
    assert widget, "no progress bar widget was displayed"
    assert ": OK" in everything  # verify's summary
    source = np.load(work / "notebook-output" / "demo-em.npy")
    got = _read_precomputed(work / "notebook-output" / "em-sharded")
    np.testing.assert_array_equal(got[..., 0], source.T)


# -- a scheduler that is already running ----------------------------------------------------------
def test_submit_script_converts_on_a_running_scheduler(
    running_scheduler: str, demo_volume: tuple[str, np.ndarray], tmp_path: pathlib.Path
) -> None:
    source, volume = demo_volume
    dest = tmp_path / "submitted"
    before = _scheduler_transitions(running_scheduler)
    script = [sys.executable, str(WORKFLOWS / "submit_job.py")]
    run = _run([*script, source, str(dest), "--scheduler", running_scheduler, *SMALL, "--verify"])
    assert run.returncode == 0, run.stderr
    assert "dask dashboard:" in run.stderr and "2 workers" in run.stderr
    assert ": OK" in run.stdout
    manifest = json.loads((dest / MANIFEST_KEY).read_text())
    assert _scheduler_transitions(running_scheduler) - before >= 2 * manifest["totals"]["shards"]
    np.testing.assert_array_equal(_read_precomputed(dest)[..., 0], volume.T)


def test_submit_script_detached_job_completes_without_its_client(
    running_scheduler: str, demo_volume: tuple[str, np.ndarray], tmp_path: pathlib.Path
) -> None:
    source, volume = demo_volume
    dest = tmp_path / "detached"
    script = [sys.executable, str(WORKFLOWS / "submit_job.py")]
    run = _run(
        [*script, source, str(dest), *SMALL, "--format", "zarr3", "--detach"],
        env={"DASK_SCHEDULER_ADDRESS": running_scheduler},
    )
    assert run.returncode == 0, run.stderr
    assert "submitted" in run.stdout
    deadline = time.monotonic() + 90
    while not (dest / MANIFEST_KEY).exists():
        assert time.monotonic() < deadline, "the detached job did not finish"
        time.sleep(0.1)
    got = ts.open({"driver": "zarr3", "kvstore": f"file://{dest}/0/"}).result().read().result()
    np.testing.assert_array_equal(np.asarray(got), volume)


def test_submit_script_without_a_scheduler_refuses_to_start_one(
    demo_volume: tuple[str, np.ndarray], tmp_path: pathlib.Path
) -> None:
    run = _run([sys.executable, str(WORKFLOWS / "submit_job.py"), demo_volume[0], str(tmp_path)])
    assert run.returncode == 2 and "DASK_SCHEDULER_ADDRESS" in run.stderr


@pytest.mark.parametrize("how", ["--scheduler", "DASK_SCHEDULER_ADDRESS"])
def test_cli_converts_on_the_scheduler_named_by_option_or_environment(
    running_scheduler: str, demo_volume: tuple[str, np.ndarray], tmp_path: pathlib.Path, how: str
) -> None:
    source, volume = demo_volume
    dest = tmp_path / "cli"
    command = [sys.executable, "-m", "shardwright.cli", "convert", source, str(dest), "--quiet"]
    command += ["--chunk-size", "32,32,16", "--target-shard-bytes", "32K"]
    before = _scheduler_transitions(running_scheduler)
    if how == "--scheduler":
        run = _run([*command, "--scheduler", running_scheduler])
    else:
        run = _run(command, env={"DASK_SCHEDULER_ADDRESS": running_scheduler})
    assert run.returncode == 0, run.stderr
    shards = json.loads((dest / MANIFEST_KEY).read_text())["totals"]["shards"]
    # The shard tasks ran on the running cluster, not on a cluster of the CLI's own.
    assert _scheduler_transitions(running_scheduler) - before >= 2 * shards
    np.testing.assert_array_equal(_read_precomputed(dest)[..., 0], volume.T)


def test_importing_shardwright_starts_no_cluster() -> None:
    probe = (
        "import json, multiprocessing, sys, threading\n"
        "import shardwright, shardwright.api, shardwright.cli, shardwright.jobs.cluster\n"
        "import shardwright.jobs.shard_stream\n"
        "client = None\n"
        "if 'distributed' in sys.modules:\n"
        "    from distributed.client import _get_global_client\n"
        "    client = _get_global_client()\n"
        "print(json.dumps([threading.active_count(), len(multiprocessing.active_children()),\n"
        "                  client is None]))\n"
    )
    run = _run([sys.executable, "-c", probe], env={"DASK_SCHEDULER_ADDRESS": "tcp://127.0.0.1:9"})
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == [1, 0, True]


# -- a public-style layout ------------------------------------------------------------------------
def test_public_layout_converts_to_sharded(tmp_path: pathlib.Path) -> None:
    script = [sys.executable, str(WORKFLOWS / "public_layout_to_sharded.py")]
    run = _run(
        [*script, "--demo", str(tmp_path), "--mips", "2", "--", "--target-shard-bytes", "64K"]
    )
    assert run.returncode == 0, run.stderr
    assert ": OK" in run.stdout
    source = ts.open(
        {"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/public/"}
    ).result()
    public_info = json.loads((tmp_path / "public" / "info").read_text())
    assert len(public_info["scales"]) == 2
    assert not any("sharding" in scale for scale in public_info["scales"])
    info = json.loads((tmp_path / "sharded" / "info").read_text())
    assert info["scales"][0]["sharding"]["@type"] == "neuroglancer_uint64_sharded_v1"
    assert [scale["key"] for scale in info["scales"]] == ["8_8_40", "16_16_40", "32_32_40"]
    assert all("sharding" in scale for scale in info["scales"])
    assert info["scales"][2]["size"] == [64, 64, 32]
    base = _read_precomputed(tmp_path / "sharded")
    np.testing.assert_array_equal(base, source.read().result())
    level1 = _average_2x2x1(base)
    np.testing.assert_array_equal(_read_precomputed(tmp_path / "sharded", 1), level1)
    np.testing.assert_array_equal(
        _read_precomputed(tmp_path / "sharded", 2), _average_2x2x1(level1)
    )
